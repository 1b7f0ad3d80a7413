//! The bcd version and boot id a node's session reports (decision 0105), on Postgres and
//! SQLite: a report equal to the node's row writes nothing (however often it comes), another
//! version or boot id writes one `node.runtime.reported` and the row shows it, a field not
//! reported keeps the row's, and an unknown node, a retired node or a malformed value is
//! refused with its own reason and writes nothing.

use crate::identity_support;

use commands::identity::runtime::{
    node_runtime_stream, report_node_runtime, RuntimeRecorded, RuntimeRefusal, RuntimeReport,
    RuntimeReportError,
};
use domain::identity::SelfReport;
use events::schema::NodeRuntimeReported;
use events::store::testkit::TestDb;
use events::store::{LogStore, LogTx};
use identity_support::*;
use projections::identity::read;

const BOOT_A: &str = "0b4f3c2a-6d1e-4f5a-9b8c-7d6e5f4a3b2c";
const BOOT_B: &str = "5d0c9e1a-2b3c-4d5e-8f70-112233445566";

async fn node_row(f: &Fixture, node_id: &str) -> read::NodeRow {
    let mut tx = f.store.begin().await.unwrap();
    let row = read::node_by_id(&mut tx, node_id).await.unwrap();
    tx.rollback().await.unwrap();
    row.expect("the node's row")
}

async fn reported(f: &Fixture, node_id: &str) -> Vec<NodeRuntimeReported> {
    f.store
        .read_stream(&node_runtime_stream(node_id))
        .await
        .unwrap()
        .iter()
        .map(|e| {
            assert_eq!(e.event_type, "node.runtime.reported");
            e.decode().unwrap()
        })
        .collect()
}

/// A node joined with bcd 0.1.0 on boot A: (node id, tenant id).
async fn joined(f: &Fixture) -> (String, String) {
    let created = f.svc.create_token(&token_spec("t1")).await.unwrap();
    let agent = Agent::new();
    let mut req = join_request(f, &agent, &created.secret, "node", Default::default());
    req.input.report = SelfReport {
        boot_id: BOOT_A.into(),
        agent_version: "0.1.0".into(),
        ..Default::default()
    };
    let answer = f.svc.join(&req).await.unwrap();
    let tenant = node_row(f, &answer.node_id).await.tenant_id;
    (answer.node_id, tenant)
}

fn report(node: &str, tenant: &str, version: &str, boot: &str) -> RuntimeReport {
    RuntimeReport {
        tenant_id: tenant.into(),
        node_id: node.into(),
        agent_version: version.into(),
        boot_id: boot.into(),
    }
}

fn row_runtime(row: &read::NodeRow) -> (Option<&str>, Option<&str>) {
    (row.bcd_version.as_deref(), row.last_boot_id.as_deref())
}

#[tokio::test]
async fn a_change_of_version_or_boot_writes_one_event_and_equal_reports_none() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let (node, tenant) = joined(&f).await;
        let r = |v: &str, b: &str| report(&node, &tenant, v, b);

        // What the join recorded: nothing to write, however often.
        for _ in 0..20 {
            let got = report_node_runtime(&f.store, &f.clock, &r("0.1.0", BOOT_A)).await;
            assert_eq!(got.unwrap(), RuntimeRecorded::Unchanged);
        }
        assert!(reported(&f, &node).await.is_empty());

        // An upgrade: one event, the row shows it; the same again writes nothing.
        for _ in 0..5 {
            report_node_runtime(&f.store, &f.clock, &r("0.2.0", BOOT_A))
                .await
                .unwrap();
        }
        let row = node_row(&f, &node).await;
        assert_eq!(row_runtime(&row), (Some("0.2.0"), Some(BOOT_A)));
        assert_eq!(reported(&f, &node).await.len(), 1);

        // A reboot: one more.
        let got = report_node_runtime(&f.store, &f.clock, &r("0.2.0", BOOT_B)).await;
        assert_eq!(got.unwrap(), RuntimeRecorded::Changed);
        let row = node_row(&f, &node).await;
        assert_eq!(row_runtime(&row), (Some("0.2.0"), Some(BOOT_B)));

        // An older daemon reports a version and no boot id: the boot id is kept.
        let got = report_node_runtime(&f.store, &f.clock, &r("0.1.5", "")).await;
        assert_eq!(got.unwrap(), RuntimeRecorded::Changed);
        let row = node_row(&f, &node).await;
        assert_eq!(row_runtime(&row), (Some("0.1.5"), Some(BOOT_B)));
        let got = report_node_runtime(&f.store, &f.clock, &r("", "")).await;
        assert_eq!(got.unwrap(), RuntimeRecorded::Unchanged);

        let events = reported(&f, &node).await;
        assert_eq!(
            events
                .iter()
                .map(|e| (e.agent_version.as_str(), e.boot_id.as_str()))
                .collect::<Vec<_>>(),
            vec![("0.2.0", BOOT_A), ("0.2.0", BOOT_B), ("0.1.5", "")]
        );
        // The node stream is untouched: the row's version is still the node stream's.
        let node_stream = f.store.read_stream(&format!("node/{node}")).await.unwrap();
        assert_eq!(row.version, node_stream.last().unwrap().stream_version);
    }
}

#[tokio::test]
async fn malformed_reports_and_unknown_or_retired_nodes_are_refused_and_write_nothing() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let (node, tenant) = joined(&f).await;
        let refused = |got: Result<RuntimeRecorded, RuntimeReportError>| match got {
            Err(RuntimeReportError::Refused(why)) => why,
            other => panic!("expected a refusal, got {other:?}"),
        };
        let long = "v".repeat(129);
        let cases = [
            (
                report(&node, &tenant, &long, BOOT_B),
                RuntimeRefusal::BadVersion { len: 129 },
            ),
            (
                report(&node, &tenant, "0.2\n", BOOT_B),
                RuntimeRefusal::BadVersion { len: 4 },
            ),
            (
                report(&node, &tenant, "0.2.0", "boot-1"),
                RuntimeRefusal::BadBootId,
            ),
            (
                report(&node, &tenant, "0.2.0", &BOOT_B.to_uppercase()),
                RuntimeRefusal::BadBootId,
            ),
            (
                report("nobody", &tenant, "0.2.0", BOOT_B),
                RuntimeRefusal::UnknownNode("nobody".into()),
            ),
        ];
        for (r, want) in cases {
            assert_eq!(
                refused(report_node_runtime(&f.store, &f.clock, &r).await),
                want
            );
        }
        assert!(reported(&f, &node).await.is_empty());
        let row = node_row(&f, &node).await;
        assert_eq!(row_runtime(&row), (Some("0.1.0"), Some(BOOT_A)));

        f.svc
            .retire_node(&node, "decommissioned")
            .await
            .expect("retire");
        let got =
            report_node_runtime(&f.store, &f.clock, &report(&node, &tenant, "0.2.0", BOOT_B)).await;
        assert_eq!(
            refused(got),
            RuntimeRefusal::NotActive {
                node: node.clone(),
                status: "retired".into()
            }
        );
        assert!(reported(&f, &node).await.is_empty());
    }
}
