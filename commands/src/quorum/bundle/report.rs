//! The trust versions nodes report (the node sessions record Hello, StatusReport and end); the
//! event is `domain::trust_bundle::decide_trust_report`'s.

use async_trait::async_trait;
use domain::trust_bundle::decide_trust_report;
pub use domain::trust_bundle::TrustReport;
use events::schema::NodeTrustReported;
use events::store::{EventStore, ExpectedVersion, StoreTx};
use events::NewEvent;
use rand_core::CryptoRngCore;

use crate::clock::Clock;
use crate::quorum::error::QuorumError;
use crate::quorum::stream::{new_event_id, node_trust_stream};
use crate::quorum::tables::projections;
use crate::run::{append_and_project, run, At, Command, Decided};

/// Records a node's trust report (the node sessions call this on Hello, StatusReport and end).
pub async fn report_node_trust(
    store: &EventStore,
    clock: &dyn Clock,
    report: &TrustReport,
) -> Result<(), QuorumError> {
    run(store, clock, &Report(report)).await
}

/// A report, as the runner drives it: nothing to load.
struct Report<'a>(&'a TrustReport);

#[async_trait]
impl Command for Report<'_> {
    type State = ();
    type Event = NodeTrustReported;
    type Outcome = ();
    type Answer = ();
    type Error = QuorumError;

    async fn load(&self, _: &mut StoreTx, _: &At) -> Result<(), QuorumError> {
        Ok(())
    }

    fn decide(&self, _: &(), _: &At, _: &mut dyn CryptoRngCore) -> Decided<Self> {
        decide_trust_report(self.0).map_err(|never| match never {})
    }

    async fn append(
        &self,
        tx: &mut StoreTx,
        _: &(),
        events: Vec<NodeTrustReported>,
        at: &At,
    ) -> Result<(), QuorumError> {
        let tenant = self.0.tenant_id.as_str();
        let events: Vec<NewEvent> = events
            .iter()
            .map(|e| NewEvent::from_payload(new_event_id(), tenant, at.now_us, e))
            .collect();
        append_and_project(
            tx,
            &projections(),
            &node_trust_stream(&self.0.node_id),
            ExpectedVersion::Any,
            &events,
        )
        .await?;
        Ok(())
    }

    async fn answer(&self, _: &mut StoreTx, _: (), _: (), _: &At) -> Result<(), QuorumError> {
        Ok(())
    }
}
