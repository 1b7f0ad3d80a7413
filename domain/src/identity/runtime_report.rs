//! What a node's session says it runs now (its Hello's bcd version and boot id), recorded as
//! `node.runtime.reported` only when it changes what the control plane holds (decision 0105).
//!
//! The join records the version and boot id of the join; a node that upgrades bcd or reboots
//! keeps its identity and only opens new sessions. Each session's Hello carries both, and the
//! gateway hands them here off the session path: equal values write nothing, so a fleet
//! reconnecting writes no event per Hello. An empty value is "not reported" (an older daemon,
//! an unreadable boot id) and keeps what is held; a value over the join's bounds, or a boot id
//! that is not a UUID, is refused, not truncated (the join's rule, decision 0094).

use events::schema::NodeRuntimeReported;

use super::self_report::claim_text_ok;
use crate::decision::Decision;

/// What a session reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeReport {
    pub tenant_id: String,
    pub node_id: String,
    /// The Hello's `agent_version` (empty: not reported).
    pub agent_version: String,
    /// The Hello's `boot_id` (empty: not reported).
    pub boot_id: String,
}

/// What the control plane holds for the node (its `nodes` row).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeHeld {
    /// `active`, `deleted` or `retired`.
    pub status: String,
    pub bcd_version: Option<String>,
    pub boot_id: Option<String>,
}

/// Why a report is not recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuntimeRefusal {
    #[error("node {0} has no row: a session's report is recorded only for a node that joined")]
    UnknownNode(String),
    #[error("node {node} is {status}: its reports are not recorded")]
    NotActive { node: String, status: String },
    #[error(
        "the reported bcd version is {len} bytes or has a control character; at most {} printable bytes are recorded",
        super::self_report::MAX_CLAIM_BYTES
    )]
    BadVersion { len: usize },
    #[error(
        "the reported boot id is not a lower-case UUID (as /proc/sys/kernel/random/boot_id holds)"
    )]
    BadBootId,
}

impl RuntimeRefusal {
    /// A short label for metrics and logs.
    pub fn label(&self) -> &'static str {
        match self {
            RuntimeRefusal::UnknownNode(_) => "unknown-node",
            RuntimeRefusal::NotActive { .. } => "not-active",
            RuntimeRefusal::BadVersion { .. } => "bad-version",
            RuntimeRefusal::BadBootId => "bad-boot-id",
        }
    }
}

/// Whether `text` is a UUID as the kernel writes a boot id: 8-4-4-4-12 lower-case hex digits.
pub fn boot_id_ok(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_digit() || (b'a'..=b'f').contains(c),
        })
}

/// Checks the bounds of what a session reports (the gateway checks before queueing, the
/// decider again).
pub fn check_runtime(agent_version: &str, boot_id: &str) -> Result<(), RuntimeRefusal> {
    if !claim_text_ok(agent_version) {
        return Err(RuntimeRefusal::BadVersion {
            len: agent_version.len(),
        });
    }
    if !boot_id.is_empty() && !boot_id_ok(boot_id) {
        return Err(RuntimeRefusal::BadBootId);
    }
    Ok(())
}

/// One `node.runtime.reported` when the report changes the node's bcd version or boot id; no
/// event when it changes nothing (equal values, or nothing reported).
pub fn decide_runtime_report(
    report: &RuntimeReport,
    held: Option<&RuntimeHeld>,
) -> Result<Decision<NodeRuntimeReported, ()>, RuntimeRefusal> {
    check_runtime(&report.agent_version, &report.boot_id)?;
    let Some(held) = held else {
        return Err(RuntimeRefusal::UnknownNode(report.node_id.clone()));
    };
    if held.status != "active" {
        return Err(RuntimeRefusal::NotActive {
            node: report.node_id.clone(),
            status: held.status.clone(),
        });
    }
    let differs = |new: &str, old: &Option<String>| !new.is_empty() && old.as_deref() != Some(new);
    let changed = differs(&report.agent_version, &held.bcd_version)
        || differs(&report.boot_id, &held.boot_id);
    if !changed {
        return Ok(Decision::events_only(Vec::new()));
    }
    Ok(Decision::events_only(vec![NodeRuntimeReported {
        node_id: report.node_id.clone(),
        agent_version: report.agent_version.clone(),
        boot_id: report.boot_id.clone(),
    }]))
}
