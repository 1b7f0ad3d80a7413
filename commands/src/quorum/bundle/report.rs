//! The trust versions nodes report (the node sessions record Hello, StatusReport and end).

use events::schema::NodeTrustReported;
use events::store::{EventStore, ExpectedVersion};
use events::NewEvent;

use crate::clock::Clock;
use crate::quorum::error::QuorumError;
use crate::quorum::stream::{new_event_id, node_trust_stream};
use crate::quorum::tables::projections;
use crate::run::append_and_project;

/// A node's report of the trust version it holds.
#[derive(Debug, Clone)]
pub struct TrustReport {
    pub tenant_id: String,
    pub node_id: String,
    pub trust_version: u64,
    /// Hello (sets the version as reported) rather than a StatusReport (only raises it).
    pub session_start: bool,
    /// False when the session ended.
    pub connected: bool,
    /// The approver set the node reports holding: its epoch (0 without keys).
    pub approver_set_epoch: u64,
    /// SHA-256(approverSetInput) of the set it holds; empty without keys.
    pub approver_set_sha256: Vec<u8>,
}

/// Records a node's trust report (the node sessions call this on Hello, StatusReport and end).
pub async fn report_node_trust(
    store: &EventStore,
    clock: &dyn Clock,
    report: &TrustReport,
) -> Result<(), QuorumError> {
    crate::transaction!(store, QuorumError, |tx| {
        let event = NewEvent::from_payload(
            new_event_id(),
            report.tenant_id.clone(),
            clock.now_us(),
            &NodeTrustReported {
                node_id: report.node_id.clone(),
                trust_version: report.trust_version,
                session_start: report.session_start,
                connected: report.connected,
                approver_set_epoch: report.approver_set_epoch,
                approver_set_sha256: report.approver_set_sha256.clone(),
            },
        );
        append_and_project(
            tx,
            &projections(),
            &node_trust_stream(&report.node_id),
            ExpectedVersion::Any,
            &[event],
        )
        .await?;
        Ok(())
    })
}
