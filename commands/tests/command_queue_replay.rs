//! Replay coverage of the `commands` projection: a queue scenario (unbatched, held, released,
//! dispatched, answered, rejected, cancelled by its batch, worker certificates), then at
//! pseudo-random cut points a rebuild of every projection up to the cut equals a store fed the
//! same events one by one inline, on both backends.

use crate::identity_support::{fixture, join_new, Fixture};
use crate::quorum_support::{approvers, config, set_of, td};

use commands::command_queue::{
    enqueue_command, record_dispatched, record_node_answer, DispatchCause, EnqueueRequest,
    NodeAnswer, NodeAnswerOutcome, WorkerSigner,
};
use commands::quorum::{approve_batch, cancel_batch, create_batch, settle_trust_bundle};
use commands::{append_and_project, Clock};
use domain::pki::{CommandSigningRoot, KeyRole, PrivateKey, TrustDomain};
use domain::quorum::{CreateBatch, ScopeLeafRequest};
use events::store::testkit::TestDb;
use events::store::{ExpectedVersion, LogStore, LogTx, StoreTx};
use events::NewEvent;
use projections::digest::dump_table;
use projections::rebuild_in;

fn req(node: &str, kind: &str, batch: Option<domain::quorum::BatchId>) -> EnqueueRequest {
    EnqueueRequest {
        node_id: node.into(),
        kind: kind.into(),
        payload: vec![],
        batch_id: batch,
        caller: "alice".into(),
        lifetime_us: None,
    }
}

fn answer(id: &str, outcome: NodeAnswerOutcome) -> NodeAnswer {
    NodeAnswer {
        command_id: id.into(),
        outcome,
        detail: "d".into(),
        exit_code: Some(3),
        output_tail: b"out".to_vec(),
        started_at_ms: 10,
        finished_at_ms: 20,
    }
}

async fn scenario(f: &Fixture) {
    let a = approvers(3);
    let set = set_of(&[&a[0], &a[1], &a[2]], 2, vec![]);
    settle_trust_bundle(&f.store, &f.clock, &config(set, 1, vec![]))
        .await
        .unwrap();
    let n1 = join_new(f, "t1").await.1.node_id;
    let n2 = join_new(f, "t1").await.1.node_id;
    let cmd_td = TrustDomain::new(crate::identity_support::TD).unwrap();
    let root = CommandSigningRoot::generate(
        &cmd_td,
        PrivateKey::generate(KeyRole::CommandSigningRoot).unwrap(),
        f.clock.now(),
        time::Duration::days(30),
    )
    .unwrap();
    let signer = WorkerSigner::new(root, cmd_td, "api-1", time::Duration::hours(1));
    let batch = |key: &str| CreateBatch {
        tenant: "t1".into(),
        caller: "alice".into(),
        idempotency_key: key.into(),
        reason: "reboots".into(),
        leaves: [&n1, &n2]
            .iter()
            .map(|s| ScopeLeafRequest {
                subject: (*s).clone(),
                kind: "node.reboot".into(),
                payload_sha256: None,
                payload: None,
            })
            .collect(),
        not_after_seconds: Some(7200),
    };
    let b1 = create_batch(&f.store, &f.clock, &batch("k1"))
        .await
        .unwrap();
    let b2 = create_batch(&f.store, &f.clock, &batch("k2"))
        .await
        .unwrap();
    let s = &f.store;
    let c = &f.clock;
    let plain = enqueue_command(s, c, &signer, &req(&n1, "diag.ping", None))
        .await
        .unwrap();
    let held = enqueue_command(s, c, &signer, &req(&n1, "node.reboot", Some(b1.batch_id)))
        .await
        .unwrap();
    let other = enqueue_command(s, c, &signer, &req(&n2, "node.reboot", Some(b2.batch_id)))
        .await
        .unwrap();
    // Past 60% of the worker key's hour: the next command certifies a new key.
    c.advance_secs(40 * 60);
    let late = enqueue_command(s, c, &signer, &req(&n2, "logs.collect", None))
        .await
        .unwrap();
    record_dispatched(
        s,
        c,
        &n1,
        std::slice::from_ref(&plain.command_id),
        DispatchCause::Ready,
    )
    .await
    .unwrap();
    record_node_answer(
        s,
        c,
        &n1,
        &answer(&plain.command_id, NodeAnswerOutcome::Failed),
    )
    .await
    .unwrap();
    for approver in &a[..2] {
        let sig = approver.sign_batch(
            &b1.batch_id,
            &b1.scope_root,
            b1.scope_size,
            b1.not_after_us,
            &td(),
        );
        approve_batch(s, c, &td(), &b1.batch_id, &sig)
            .await
            .unwrap();
    }
    record_dispatched(
        s,
        c,
        &n1,
        std::slice::from_ref(&held.command_id),
        DispatchCause::Hello,
    )
    .await
    .unwrap();
    let rejected = NodeAnswer {
        exit_code: None,
        ..answer(
            &held.command_id,
            NodeAnswerOutcome::Rejected {
                reason: "NO_HOOK".into(),
            },
        )
    };
    record_node_answer(s, c, &n1, &rejected).await.unwrap();
    cancel_batch(s, c, &b2.batch_id, "not today", "bob")
        .await
        .unwrap();
    record_node_answer(
        s,
        c,
        &n2,
        &answer(&late.command_id, NodeAnswerOutcome::Succeeded),
    )
    .await
    .unwrap();
    let _ = other;
}

async fn digest_in(tx: &mut StoreTx) -> String {
    let mut out = String::new();
    for table in projections::commands::tables() {
        out.push_str(table.name);
        out.push('\n');
        for row in dump_table(tx, &table).await.unwrap() {
            out.push_str(&row);
            out.push('\n');
        }
    }
    out
}

#[tokio::test]
async fn command_tables_at_random_cut_points_match_a_store_fed_only_that_far() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        scenario(&f).await;
        let store = &f.store;
        let head = store.head_position().await.unwrap();
        let mut all = Vec::new();
        let mut pages = store.read_all(0, 1000);
        while let Some(batch) = pages.next_batch().await.unwrap() {
            all.extend(batch);
        }
        assert_eq!(all.len() as i64, head);
        let kinds: std::collections::BTreeSet<&str> = all
            .iter()
            .filter(|e| e.event_type.starts_with("command."))
            .map(|e| e.event_type.as_str())
            .collect();
        assert_eq!(kinds.len(), 6, "every command event type: {kinds:?}");
        let certified = all
            .iter()
            .filter(|e| e.event_type == "command.worker.certified")
            .count();
        assert_eq!(
            certified, 2,
            "the key was replaced after 60% of its lifetime"
        );

        let mut cuts: Vec<i64> = all
            .iter()
            .filter(|e| e.event_type.starts_with("command."))
            .map(|e| e.position)
            .collect();
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for _ in 0..6 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            cuts.push(1 + (x % head as u64) as i64);
        }
        cuts.push(head);
        cuts.sort_unstable();
        cuts.dedup();

        let copy_db = if store.backend() == events::store::Backend::Postgres {
            TestDb::postgres().await.unwrap()
        } else {
            TestDb::sqlite().unwrap()
        };
        let copy = copy_db.store().await.unwrap();
        let every = commands::every_projection();
        for event in &all {
            let mut tx = copy.begin().await.unwrap();
            let new = NewEvent::from_bytes(
                event.event_id,
                event.event_type.clone(),
                event.schema_version,
                event.tenant_id.clone(),
                event.occurred_at_us,
                event.payload.clone(),
            );
            append_and_project(
                &mut tx,
                &every,
                &event.stream_id,
                ExpectedVersion::Exact(event.stream_version as u64 - 1),
                &[new],
            )
            .await
            .unwrap();
            tx.commit().await.unwrap();
            if cuts.contains(&event.position) {
                let mut copy_tx = copy.begin().await.unwrap();
                let expected = digest_in(&mut copy_tx).await;
                copy_tx.rollback().await.unwrap();
                let mut tx = store.begin().await.unwrap();
                rebuild_in(store, &mut tx, &every, Some(event.position), 4, |_| {})
                    .await
                    .unwrap();
                let actual = digest_in(&mut tx).await;
                tx.rollback().await.unwrap();
                assert_eq!(actual, expected, "cut at position {}", event.position);
            }
        }
        let mut tx = store.begin().await.unwrap();
        let live = digest_in(&mut tx).await;
        tx.rollback().await.unwrap();
        let mut tx = copy.begin().await.unwrap();
        assert_eq!(
            live,
            digest_in(&mut tx).await,
            "inline tables equal the copy's"
        );
        tx.rollback().await.unwrap();
    }
}
