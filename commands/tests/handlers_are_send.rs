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
    };
    // Compiles only if the handler's future is Send.
    let task = tokio::spawn(async move {
        commands::quorum::report_node_trust(&store, clock.as_ref(), &report).await
    });
    task.await.unwrap().unwrap();
}
