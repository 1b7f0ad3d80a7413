//! Recording an approval on the server: [`super::approval::decide_add_approval`]'s events as
//! the batch's log events, with what the approval did to the batch.

use events::schema::{BatchApprovalRecorded, BatchApproved, QuorumSignature};

use super::approval::{
    decide_add_approval, AddApproval, ApprovalEvent, ApprovalRefusal, BatchApprovalState,
    BatchStatus,
};
use super::approver_set::ApproverSet;
use super::batch_event::BatchEvent;
use super::decision::Decision;
use super::trust_domain::TrustDomain;

/// What recording an approval did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApproveOutcome {
    /// False when this key had already approved (duplicates count once).
    pub recorded: bool,
    pub held: u32,
    pub required: u32,
    pub status: BatchStatus,
}

/// Decides one approval against the published set and answers the batch's approvals and
/// status after it.
pub fn decide_approval(
    command: &AddApproval,
    state: &BatchApprovalState,
    set: &ApproverSet,
    trust_domain: &TrustDomain,
    now_us: i64,
) -> Result<Decision<BatchEvent, ApproveOutcome>, ApprovalRefusal> {
    let decided = decide_add_approval(command, state, set, trust_domain, now_us)?;
    let after = decided.iter().fold(state.clone(), |s, e| s.evolve(e));
    let batch_id = state.batch_id.as_bytes().to_vec();
    let events = decided
        .iter()
        .map(|event| match event {
            ApprovalEvent::Recorded(sig) => BatchEvent::ApprovalRecorded(BatchApprovalRecorded {
                batch_id: batch_id.clone(),
                signature: Some(QuorumSignature {
                    kid: sig.kid.as_bytes().to_vec(),
                    sig: sig.sig.clone(),
                }),
            }),
            ApprovalEvent::Approved { approvers } => BatchEvent::Approved(BatchApproved {
                batch_id: batch_id.clone(),
                approvers: approvers.iter().map(|k| k.as_bytes().to_vec()).collect(),
            }),
        })
        .collect::<Vec<_>>();
    Ok(Decision {
        outcome: ApproveOutcome {
            recorded: !events.is_empty(),
            held: u32::try_from(after.approvals.len()).unwrap_or(u32::MAX),
            required: after.required,
            status: after.status,
        },
        events,
    })
}
