//! Creating a batch on the server: the plan of [`super::batch`] written as the batch's first
//! events, or the answer to a retry of the request that created it (same rules as
//! [`super::batch::plan_create_batch`]).

use std::collections::BTreeMap;

use events::schema::{BatchApproved, BatchCreated, BatchLeaf};

use super::approval::{BatchApprovalState, BatchStatus};
use super::batch::{
    check_retry, plan_request, BatchPlan, BatchRefusal, CreateBatch, RequestDigest,
};
use super::batch_event::BatchEvent;
use super::batch_subjects::{check_batch_subjects, subject_nodes};
use super::decision::Decision;
use super::scope::{BatchId, ScopeHash};
use super::set_change::HeldApproverSet;

/// The batch stored under the id a create request derives, if there is one.
#[derive(Debug, Clone, Copy)]
pub struct ExistingBatch<'a> {
    /// The digest of the request that created it.
    pub request_digest: &'a RequestDigest,
    /// Its approval state.
    pub state: &'a BatchApprovalState,
}

/// What a create answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatedBatch {
    pub batch_id: BatchId,
    pub scope_root: ScopeHash,
    pub scope_size: u32,
    pub required_approvals: u32,
    pub not_after_us: i64,
    pub status: BatchStatus,
    /// A retry of the request that created the batch: nothing new was written.
    pub retry: bool,
}

/// Decides a create request against the published approver set `held`: a new batch's
/// `batch.created` (and `batch.approved` when it needs no approvals), or no events for a retry.
/// A new batch's subjects must each name a machine of its own tenant (`subject_tenants`: the
/// tenant of each node the subjects name, as the shell loaded them; [`check_batch_subjects`]).
pub fn decide_batch_creation(
    command: &CreateBatch,
    existing: Option<ExistingBatch<'_>>,
    held: &HeldApproverSet,
    subject_tenants: &BTreeMap<String, String>,
    now_us: i64,
) -> Result<Decision<BatchEvent, CreatedBatch>, BatchRefusal> {
    let plan = plan_request(command, &held.set, now_us)?;
    if let Some(existing) = existing {
        check_retry(existing.request_digest, &plan)?;
        let state = existing.state;
        return Ok(Decision::unchanged(CreatedBatch {
            batch_id: plan.batch_id,
            scope_root: state.scope_root,
            scope_size: state.scope_size,
            required_approvals: state.required,
            not_after_us: state.not_after_us,
            status: state.status,
            retry: true,
        }));
    }
    subject_nodes(&command.leaves)?;
    check_batch_subjects(&command.leaves, &command.tenant, subject_tenants)?;
    let mut events = vec![BatchEvent::Created(created_event(
        command, &plan, held.epoch,
    ))];
    if plan.status == BatchStatus::Approved {
        events.push(BatchEvent::Approved(BatchApproved {
            batch_id: plan.batch_id.as_bytes().to_vec(),
            approvers: Vec::new(),
        }));
    }
    Ok(Decision {
        events,
        outcome: CreatedBatch {
            batch_id: plan.batch_id,
            scope_root: plan.tree.root(),
            scope_size: plan.tree.size(),
            required_approvals: plan.required_approvals,
            not_after_us: plan.not_after_us,
            status: plan.status,
            retry: false,
        },
    })
}

fn created_event(command: &CreateBatch, plan: &BatchPlan, approver_set_epoch: u64) -> BatchCreated {
    let leaves: Vec<BatchLeaf> = plan
        .leaves
        .iter()
        .map(|p| BatchLeaf {
            subject: p.leaf.subject().to_string(),
            kind: p.leaf.kind().to_string(),
            payload_sha256: p
                .leaf
                .payload_sha256()
                .map_or_else(Vec::new, |d| d.as_bytes().to_vec()),
            payload_type_url: p
                .payload
                .as_ref()
                .map_or_else(String::new, |x| x.type_url.clone()),
            payload_value: p
                .payload
                .as_ref()
                .map_or_else(Vec::new, |x| x.value.clone()),
            has_payload: p.payload.is_some(),
        })
        .collect();
    BatchCreated {
        batch_id: plan.batch_id.as_bytes().to_vec(),
        tenant_id: command.tenant.clone(),
        caller: command.caller.clone(),
        reason: plan.reason.clone(),
        request_digest: plan.request_digest.as_bytes().to_vec(),
        not_after_us: plan.not_after_us,
        scope_root: plan.tree.root().as_bytes().to_vec(),
        scope_size: plan.tree.size(),
        required_approvals: plan.required_approvals,
        approver_set_epoch,
        leaves,
    }
}
