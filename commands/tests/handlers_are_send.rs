//! The gateway spawns handler futures on a multi-threaded runtime, so they must be `Send`.
//! (Futures of async closures are not `Send` today; handlers use `commands::transaction!`.)

use std::sync::Arc;

use commands::quorum::TrustReport;
use commands::{Clock, SimClock};
use events::store::testkit::TestDb;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_handler_runs_on_a_spawned_task() {
    let db = TestDb::sqlite().unwrap();
    let store = db.store().await.unwrap();
    let clock: Arc<dyn Clock> = Arc::new(SimClock::new());
    let report = TrustReport {
        tenant_id: "root".into(),
        node_id: "node_x".into(),
        trust_version: 3,
        session_start: true,
        connected: true,
        approver_set_epoch: 0,
        approver_set_sha256: Vec::new(),
    };
    // Compiles only if the handler's future is Send.
    let task = tokio::spawn(async move {
        commands::quorum::report_node_trust(&store, clock.as_ref(), &report).await
    });
    task.await.unwrap().unwrap();
}

fn assert_send<T: Send>(_: &T) {}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identity_handlers_run_on_spawned_tasks() {
    use commands::identity::{
        IdentityConfig, IdentityMaintenance, JoinRequest, Joins, NodeAdmin, Renewals,
    };
    use domain::identity::{JoinInput, RenewInput};
    use domain::pki::{KeySet, KeySetLifetimes, TrustDomain};

    let db = TestDb::sqlite().unwrap();
    let store = db.store().await.unwrap();
    let clock: Arc<dyn Clock> = Arc::new(SimClock::new());
    let td = TrustDomain::new("send.example.com").unwrap();
    let keys =
        Arc::new(KeySet::generate(td.clone(), clock.now(), KeySetLifetimes::default()).unwrap());
    let joins = Joins::new(
        store.clone(),
        keys.clone(),
        clock.clone(),
        IdentityConfig::new(td.clone()),
    )
    .unwrap();
    let renewals =
        Renewals::new(store.clone(), keys, clock.clone(), IdentityConfig::new(td)).unwrap();
    let request = JoinRequest {
        attestor: String::new(),
        input: JoinInput {
            csr_der: Vec::new(),
            sealed_token: Vec::new(),
            role: "node".into(),
            claims: Default::default(),
            attestation: Vec::new(),
            report: Default::default(),
        },
    };
    let renew = RenewInput {
        csr_der: Vec::new(),
        chain: Vec::new(),
        client_time_ms: 0,
        signature: Vec::new(),
        key_attestation: None,
    };
    // Compiles only if the handlers' futures are Send.
    assert_send(&joins.join(&request));
    assert_send(&renewals.renew(&renew));
    let admin = NodeAdmin::new(store.clone(), clock.clone());
    let maintenance = IdentityMaintenance::new(store, clock, "root");
    let listed = tokio::spawn(async move { admin.list_tokens(None).await });
    assert!(listed.await.unwrap().unwrap().is_empty());
    let maintained = tokio::spawn(async move { maintenance.maintain().await });
    assert_eq!(maintained.await.unwrap().unwrap(), Default::default());
}
