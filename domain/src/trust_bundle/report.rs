//! A node's report of the trust it holds (its session's Hello, StatusReport and end), written
//! as it was made: the projection keeps the highest version per node and the connection.

use std::convert::Infallible;

use events::schema::NodeTrustReported;

use crate::decision::Decision;

/// What a node reported.
#[derive(Debug, Clone, PartialEq, Eq)]
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

/// Records a report: every report is one `node.trust.reported` event.
pub fn decide_trust_report(
    report: &TrustReport,
) -> Result<Decision<NodeTrustReported, ()>, Infallible> {
    Ok(Decision::events_only(vec![NodeTrustReported {
        node_id: report.node_id.clone(),
        trust_version: report.trust_version,
        session_start: report.session_start,
        connected: report.connected,
        approver_set_epoch: report.approver_set_epoch,
        approver_set_sha256: report.approver_set_sha256.clone(),
    }]))
}
