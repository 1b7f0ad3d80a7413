//! What a node's session reports running now (bcd version, boot id): recorded as
//! `node.runtime.reported` on the node's `node-runtime/<id>` stream only when
//! [`domain::identity::runtime_report::decide_runtime_report`] finds it changes the `nodes`
//! row (decision 0105). The gateway calls this from one worker, off the session path.

use async_trait::async_trait;
use domain::identity::runtime_report::{decide_runtime_report, RuntimeHeld};
pub use domain::identity::runtime_report::{RuntimeRefusal, RuntimeReport};
use events::schema::NodeRuntimeReported;
use events::store::{EventStore, ExpectedVersion, StoreError, StoreTx};
use events::NewEvent;
use rand_core::CryptoRngCore;

use crate::clock::Clock;
use crate::run::{append_and_project, run, AsConflict, At, Command, Decided, RunError};

/// Why a report was not recorded.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeReportError {
    /// The report itself (unknown node, over a bound).
    #[error("{0}")]
    Refused(#[from] RuntimeRefusal),
    /// The store.
    #[error("{0}")]
    Run(#[from] RunError),
}

impl From<StoreError> for RuntimeReportError {
    fn from(e: StoreError) -> Self {
        RuntimeReportError::Run(RunError::Store(e))
    }
}

impl AsConflict for RuntimeReportError {
    fn into_conflict(self) -> Result<StoreError, Self> {
        match self {
            RuntimeReportError::Run(run) => run.into_conflict().map_err(RuntimeReportError::Run),
            other => Err(other),
        }
    }
}

/// Whether a report wrote an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeRecorded {
    /// `node.runtime.reported` was appended.
    Changed,
    /// Equal to what the projection holds: nothing written.
    Unchanged,
}

/// The stream of a node's runtime reports.
pub fn node_runtime_stream(node_id: &str) -> String {
    format!("node-runtime/{node_id}")
}

/// Records a session's report when it changes the node's bcd version or boot id.
pub async fn report_node_runtime(
    store: &EventStore,
    clock: &dyn Clock,
    report: &RuntimeReport,
) -> Result<RuntimeRecorded, RuntimeReportError> {
    run(store, clock, &Report(report)).await
}

struct Report<'a>(&'a RuntimeReport);

#[async_trait]
impl Command for Report<'_> {
    type State = Option<RuntimeHeld>;
    type Event = NodeRuntimeReported;
    type Outcome = bool;
    type Answer = RuntimeRecorded;
    type Error = RuntimeReportError;

    async fn load(&self, tx: &mut StoreTx, _: &At) -> Result<Option<RuntimeHeld>, Self::Error> {
        let row = projections::identity::read::node_by_id(tx, &self.0.node_id).await?;
        Ok(row.map(|r| RuntimeHeld {
            status: r.status,
            bcd_version: r.bcd_version,
            boot_id: r.last_boot_id,
        }))
    }

    fn decide(
        &self,
        held: &Option<RuntimeHeld>,
        _: &At,
        _: &mut dyn CryptoRngCore,
    ) -> Decided<Self> {
        let decision =
            decide_runtime_report(self.0, held.as_ref()).map_err(RuntimeReportError::from)?;
        let changed = !decision.events.is_empty();
        Ok(domain::decision::Decision {
            events: decision.events,
            outcome: changed,
        })
    }

    async fn append(
        &self,
        tx: &mut StoreTx,
        _: &Option<RuntimeHeld>,
        events: Vec<NodeRuntimeReported>,
        at: &At,
    ) -> Result<(), Self::Error> {
        let tenant = self.0.tenant_id.as_str();
        let events: Vec<NewEvent> = events
            .iter()
            .map(|e| NewEvent::from_payload(events::new_event_id(), tenant, at.now_us, e))
            .collect();
        append_and_project(
            tx,
            &projections::identity::all(),
            &node_runtime_stream(&self.0.node_id),
            ExpectedVersion::Any,
            &events,
        )
        .await?;
        Ok(())
    }

    async fn answer(
        &self,
        _: &mut StoreTx,
        _: Option<RuntimeHeld>,
        changed: bool,
        _: &At,
    ) -> Result<RuntimeRecorded, Self::Error> {
        Ok(if changed {
            RuntimeRecorded::Changed
        } else {
            RuntimeRecorded::Unchanged
        })
    }
}
