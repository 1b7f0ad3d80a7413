//! A joining machine's self-report (issue 45 item 1), on Postgres and SQLite: recorded in
//! `node.joined` exactly as sent and projected into the node's row; a report over a bound is
//! refused with its own reason (one test each) and admits nothing; a `node.joined` written before
//! the field projects no claims; a re-join replaces them.

use crate::identity_support;

use domain::identity::SelfReport;
use events::schema::NodeJoined;
use events::store::testkit::TestDb;
use events::store::{LogStore, LogTx};
use identity_support::*;
use projections::identity::read;

fn report(host: &str) -> SelfReport {
    SelfReport {
        hostname: host.into(),
        product_serial: "PS-0001".into(),
        board_serial: "BS-0001".into(),
        chassis_serial: "CS-0001".into(),
        gpu_uuids: vec!["GPU-aaaa".into(), "GPU-bbbb".into()],
        boot_id: "0b4f3c2a-6d1e-4f5a-9b8c-7d6e5f4a3b2c".into(),
        agent_version: "0.1.0".into(),
    }
}

async fn node_row(f: &Fixture, node_id: &str) -> read::NodeRow {
    let mut tx = f.store.begin().await.unwrap();
    let row = read::node_by_id(&mut tx, node_id).await.unwrap();
    tx.rollback().await.unwrap();
    row.expect("the node's row")
}

#[tokio::test]
async fn the_self_report_is_recorded_as_sent_and_projected() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let created = f.svc.create_token(&token_spec("t1")).await.unwrap();
        let agent = Agent::new();
        let mut req = join_request(&f, &agent, &created.secret, "node", Default::default());
        req.input.report = report("rack4-n17");
        let answer = f.svc.join(&req).await.unwrap();

        let stream = f
            .store
            .read_stream(&format!("node/{}", answer.node_id))
            .await
            .unwrap();
        let joined: NodeJoined = stream
            .iter()
            .find(|e| e.event_type == "node.joined")
            .expect("node.joined")
            .decode()
            .unwrap();
        assert_eq!(
            joined.report.as_deref(),
            Some(&report("rack4-n17").to_event())
        );

        let row = node_row(&f, &answer.node_id).await;
        assert_eq!(row.hostname.as_deref(), Some("rack4-n17"));
        assert_eq!(row.product_serial.as_deref(), Some("PS-0001"));
        assert_eq!(row.board_serial.as_deref(), Some("BS-0001"));
        assert_eq!(row.chassis_serial.as_deref(), Some("CS-0001"));
        assert_eq!(row.gpu_uuids.as_deref(), Some("GPU-aaaa,GPU-bbbb"));
        assert_eq!(row.bcd_version.as_deref(), Some("0.1.0"));
        assert_eq!(
            row.last_boot_id.as_deref(),
            Some("0b4f3c2a-6d1e-4f5a-9b8c-7d6e5f4a3b2c")
        );

        // A machine that could read nothing: no claims, NULL columns.
        let bare = Agent::new();
        let req = join_request(&f, &bare, &created.secret, "node", Default::default());
        let answer = f.svc.join(&req).await.unwrap();
        let row = node_row(&f, &answer.node_id).await;
        assert_eq!(
            (
                row.hostname,
                row.product_serial,
                row.gpu_uuids,
                row.bcd_version,
                row.last_boot_id
            ),
            (None, None, None, None, None)
        );
    }
}

#[tokio::test]
async fn a_node_joined_before_the_report_projects_no_claims() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        // An event as written before field 17: it decodes, with no report.
        let old = NodeJoined {
            node_id: "node-old".into(),
            tenant_id: "t1".into(),
            site_id: "site-1".into(),
            pool_id: "pool-1".into(),
            role: "node".into(),
            attestor: "join-token".into(),
            node_key: "unattested".into(),
            identity_generation: 1,
            ..Default::default()
        };
        let mut tx = f.store.begin().await.unwrap();
        commands::append_and_project(
            &mut tx,
            &projections::identity::all(),
            "node/node-old",
            events::store::ExpectedVersion::NoStream,
            &[events::NewEvent::from_payload(
                events::new_event_id(),
                "t1",
                1_800_000_000_000_000,
                &old,
            )],
        )
        .await
        .unwrap();
        tx.commit().await.unwrap();
        let row = node_row(&f, "node-old").await;
        assert_eq!(
            (row.hostname, row.bcd_version, row.last_boot_id),
            (None, None, None)
        );
    }
}

/// A join whose report breaks a bound: refused with `reason`, recorded in the root tenant, and
/// no node joined.
async fn refused_for(f: &Fixture, secret: &str, bad: SelfReport, reason: &str) {
    let agent = Agent::new();
    let mut req = join_request(f, &agent, secret, "node", Default::default());
    req.input.report = bad;
    assert_join_denied(f.svc.join(&req).await);
    assert_last_refusal(&f.store, "root", reason).await;
    let (_, event) = last_join_refusal(&f.store).await;
    assert_eq!(event.csr_sha256, agent.csr_sha256().to_vec());
    let mut tx = f.store.begin().await.unwrap();
    let nodes = read::nodes_of_tenant(&mut tx, None).await.unwrap();
    tx.rollback().await.unwrap();
    assert!(nodes.is_empty(), "{nodes:?}");
}

#[tokio::test]
async fn a_claim_over_128_bytes_is_refused_claim_too_long() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let created = f.svc.create_token(&token_spec("t1")).await.unwrap();
        let bad = SelfReport {
            hostname: "h".repeat(129),
            ..report("x")
        };
        refused_for(&f, &created.secret, bad, "join:claim-too-long").await;
    }
}

#[tokio::test]
async fn a_claim_with_a_control_character_is_refused_claim_not_printable() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let created = f.svc.create_token(&token_spec("t1")).await.unwrap();
        let bad = SelfReport {
            product_serial: "SN\u{1b}[2J".into(),
            ..report("x")
        };
        refused_for(&f, &created.secret, bad, "join:claim-not-printable").await;
    }
}

#[tokio::test]
async fn more_than_64_gpu_uuids_are_refused_claim_too_many() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let created = f.svc.create_token(&token_spec("t1")).await.unwrap();
        let bad = SelfReport {
            gpu_uuids: (0..65).map(|i| format!("GPU-{i}")).collect(),
            ..report("x")
        };
        refused_for(&f, &created.secret, bad, "join:claim-too-many").await;
    }
}
