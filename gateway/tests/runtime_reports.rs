//! The bcd version and boot id a session's Hello reports (decision 0105), over real TLS and
//! gRPC on Postgres and SQLite: a node reconnecting N times with the same values writes exactly
//! one `node.runtime.reported`, and the `nodes` row shows it; another version, then another
//! boot id, each write one more; a Hello with neither (an older bcd) and one with a boot id
//! that is not a UUID write nothing.

use crate::common;

use std::time::Duration;

use common::{start, Env, Node};
use events::schema::NodeRuntimeReported;
use events::store::testkit::TestDb;
use events::store::{LogStore, LogTx};
use tokio_stream::StreamExt;

const BOOT_A: &str = "0b4f3c2a-6d1e-4f5a-9b8c-7d6e5f4a3b2c";
const BOOT_B: &str = "5d0c9e1a-2b3c-4d5e-8f70-112233445566";

fn hello(version: &str, boot_id: &str) -> proto::NodeMessage {
    proto::NodeMessage {
        body: Some(proto::node_message::Body::Hello(proto::Hello {
            agent_version: version.into(),
            boot_id: boot_id.into(),
            ..Default::default()
        })),
    }
}

/// One session: the Hello, then the node's side ends; waits for the gateway's end.
async fn session(env: &Env, node: &Node, hello: proto::NodeMessage) {
    let mut c = env.client(Some(node)).await.unwrap();
    let mut stream = c
        .session(tokio_stream::iter(vec![hello]))
        .await
        .unwrap()
        .into_inner();
    while stream.next().await.is_some() {}
}

async fn reported(env: &Env, node_id: &str) -> Vec<(String, String)> {
    env.store
        .read_stream(&format!("node-runtime/{node_id}"))
        .await
        .unwrap()
        .iter()
        .map(|e| {
            let r: NodeRuntimeReported = e.decode().unwrap();
            (r.agent_version, r.boot_id)
        })
        .collect()
}

async fn row(env: &Env, node_id: &str) -> (Option<String>, Option<String>) {
    let mut tx = env.store.begin().await.unwrap();
    let row = projections::identity::read::node_by_id(&mut tx, node_id)
        .await
        .unwrap()
        .expect("the node's row");
    tx.rollback().await.unwrap();
    (row.bcd_version, row.last_boot_id)
}

/// Waits (up to 20 s) until the row shows `want`: the one worker takes reports in order, so
/// every report queued before the one that wrote it has been taken too.
async fn row_shows(env: &Env, node_id: &str, want: (&str, &str)) {
    let want = (Some(want.0.to_owned()), Some(want.1.to_owned()));
    for _ in 0..200 {
        if row(env, node_id).await == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the row shows {:?}, not {want:?}", row(env, node_id).await);
}

async fn reconnects_write_one_event_per_change(db: TestDb) {
    let env = start(db.store().await.unwrap(), |_| {}).await;
    let token = env.token(1).await;
    let node = env.join_node(&token).await;
    // The wire join sent no version and no boot id.
    assert_eq!(row(&env, &node.node_id).await, (None, None));

    for _ in 0..5 {
        session(&env, &node, hello("0.1.0", BOOT_A)).await;
    }
    // An older bcd's Hello (neither) and a boot id that is not a UUID: nothing to record.
    session(&env, &node, hello("", "")).await;
    session(&env, &node, hello("0.1.0", "boot-1")).await;
    // A marker queued after them: once the row shows it, all before it were taken.
    session(&env, &node, hello("0.1.0", BOOT_B)).await;
    row_shows(&env, &node.node_id, ("0.1.0", BOOT_B)).await;
    assert_eq!(
        reported(&env, &node.node_id).await,
        vec![
            ("0.1.0".into(), BOOT_A.into()),
            ("0.1.0".into(), BOOT_B.into())
        ]
    );

    // An upgrade without a reboot, reconnecting three times: one more event.
    for _ in 0..3 {
        session(&env, &node, hello("0.2.0", BOOT_B)).await;
    }
    session(&env, &node, hello("0.2.0", BOOT_A)).await;
    row_shows(&env, &node.node_id, ("0.2.0", BOOT_A)).await;
    assert_eq!(
        reported(&env, &node.node_id).await,
        vec![
            ("0.1.0".into(), BOOT_A.into()),
            ("0.1.0".into(), BOOT_B.into()),
            ("0.2.0".into(), BOOT_B.into()),
            ("0.2.0".into(), BOOT_A.into()),
        ]
    );
    let counters = &env.gateway.runtime_reports;
    assert_eq!(
        (
            counters.queued.load(std::sync::atomic::Ordering::Relaxed),
            counters
                .malformed
                .load(std::sync::atomic::Ordering::Relaxed),
            counters.dropped.load(std::sync::atomic::Ordering::Relaxed),
        ),
        (10, 1, 0)
    );
    env.gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnects_write_one_runtime_event_per_change_on_sqlite() {
    reconnects_write_one_event_per_change(TestDb::sqlite().unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnects_write_one_runtime_event_per_change_on_postgres() {
    reconnects_write_one_event_per_change(TestDb::postgres().await.unwrap()).await;
}
