//! Destructive batches: create (scope tree and stored proofs), approve, expire, cancel, and the
//! reads approvers and the gateway need.
//!
//! Each batch is the stream `batch/<hex id>`. Creation appends with "no stream", so two creates
//! with one idempotency key race safely: the loser re-reads and finds a retry (same request) or
//! a CONFLICT (another request). Approvals and status changes append at the exact version read.

use std::collections::BTreeMap;

use domain::quorum::CreateBatch;
use domain::quorum::{
    decide_add_approval, decide_create_batch, AddApproval, ApprovalEvent, ApprovalSignature,
    BatchApproval, BatchApprovalState, BatchCreation, BatchId, BatchStatus, Kid, PayloadDigest,
    RequestDigest, ScopeHash, ScopeLeaf, ScopeProof, TrustDomain,
};
use events::schema::{
    BatchApprovalRecorded, BatchApproved, BatchCancelled, BatchCreated, BatchExpired, BatchLeaf,
    QuorumSignature,
};
use events::store::{EventStore, ExpectedVersion, LogStore, LogTx, StoreTx};
use events::NewEvent;
use projections::quorum::{
    pending_past_end, read_approvals, read_batch, read_leaf, read_scope_page, BatchRow, ScopeRow,
};

use super::bundle::current_set;
use super::{new_event_id, projections, refused, QuorumError, QuorumRefusal};
use crate::clock::Clock;
use crate::run::append_and_project;

/// The stream of a batch.
pub fn batch_stream(batch_id: &BatchId) -> String {
    format!("batch/{}", batch_id.to_hex())
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

/// A batch as stored, with its approvals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchView {
    pub tenant_id: String,
    pub caller: String,
    pub reason: String,
    pub created_at_us: i64,
    pub approver_set_epoch: u64,
    pub approvals_held: u32,
    pub state: BatchApprovalState,
}

impl BatchView {
    /// The approval a command carries (meaningful once approved).
    pub fn approval(&self) -> BatchApproval {
        self.state.to_approval()
    }
}

/// One scope leaf with its stored proof.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopeEntry {
    pub leaf: ScopeLeaf,
    pub leaf_hash: ScopeHash,
    pub payload_type_url: Option<String>,
    pub payload_value: Option<Vec<u8>>,
    pub proof: ScopeProof,
}

/// What recording an approval did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApproveOutcome {
    /// False when this key had already approved (duplicates count once).
    pub recorded: bool,
    pub held: u32,
    pub required: u32,
    pub status: BatchStatus,
}

fn corrupt(what: &str, e: impl std::fmt::Display) -> QuorumError {
    QuorumError::Corrupt(format!("{what}: {e}"))
}

fn parse_status(text: &str) -> Result<BatchStatus, QuorumError> {
    match text {
        "pending" => Ok(BatchStatus::Pending),
        "approved" => Ok(BatchStatus::Approved),
        "expired" => Ok(BatchStatus::Expired),
        "cancelled" => Ok(BatchStatus::Cancelled),
        other => Err(corrupt("command_batches.status", other)),
    }
}

async fn load_view(tx: &mut StoreTx, row: BatchRow) -> Result<BatchView, QuorumError> {
    let batch_id = BatchId::from_slice(&row.batch_id).map_err(|e| corrupt("batch_id", e))?;
    let mut approvals = BTreeMap::new();
    for a in read_approvals(tx, &row.batch_id).await? {
        let kid = Kid::from_slice(&a.kid).map_err(|e| corrupt("approval kid", e))?;
        approvals.insert(kid, ApprovalSignature { kid, sig: a.sig });
    }
    Ok(BatchView {
        tenant_id: row.tenant_id,
        caller: row.caller,
        reason: row.reason,
        created_at_us: row.created_at_us,
        approver_set_epoch: row.approver_set_epoch,
        approvals_held: row.approvals_held,
        state: BatchApprovalState {
            batch_id,
            scope_root: ScopeHash::from_slice(&row.scope_root)
                .map_err(|e| corrupt("scope_root", e))?,
            scope_size: row.scope_size,
            not_after_us: row.not_after_us,
            required: row.required_approvals,
            status: parse_status(&row.status)?,
            approvals,
        },
    })
}

async fn require_batch(tx: &mut StoreTx, batch_id: &BatchId) -> Result<BatchRow, QuorumError> {
    match read_batch(tx, batch_id.as_bytes()).await? {
        Some(row) => Ok(row),
        None => refused(QuorumRefusal::BatchNotFound(*batch_id)),
    }
}

/// Creates a batch (or answers the retry of the request that created it).
pub async fn create_batch(
    store: &EventStore,
    clock: &dyn Clock,
    command: &CreateBatch,
) -> Result<CreatedBatch, QuorumError> {
    let batch_id = BatchId::derive(&command.tenant, &command.caller, &command.idempotency_key)
        .map_err(|e| QuorumRefusal::Batch(e.into()))?;
    crate::transaction!(store, QuorumError, |tx| {
        let now_us = clock.now_us();
        let existing = read_batch(tx, batch_id.as_bytes()).await?;
        let existing_digest = match &existing {
            Some(row) => Some(
                RequestDigest::from_slice(&row.request_digest)
                    .map_err(|e| corrupt("request_digest", e))?,
            ),
            None => None,
        };
        let held = current_set(tx).await?;
        let decision = decide_create_batch(command, existing_digest.as_ref(), &held.set, now_us)
            .map_err(QuorumRefusal::Batch)?;
        let plan = match decision {
            BatchCreation::Retry { .. } => {
                let Some(row) = existing else {
                    return Err(corrupt("batch", "a retry without a stored batch"));
                };
                let view = load_view(tx, row).await?;
                return Ok(CreatedBatch {
                    batch_id,
                    scope_root: view.state.scope_root,
                    scope_size: view.state.scope_size,
                    required_approvals: view.state.required,
                    not_after_us: view.state.not_after_us,
                    status: view.state.status,
                    retry: true,
                });
            }
            BatchCreation::New(plan) => plan,
        };
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
        let mut events = vec![NewEvent::from_payload(
            new_event_id(),
            command.tenant.clone(),
            now_us,
            &BatchCreated {
                batch_id: batch_id.as_bytes().to_vec(),
                tenant_id: command.tenant.clone(),
                caller: command.caller.clone(),
                reason: plan.reason.clone(),
                request_digest: plan.request_digest.as_bytes().to_vec(),
                not_after_us: plan.not_after_us,
                scope_root: plan.tree.root().as_bytes().to_vec(),
                scope_size: plan.tree.size(),
                required_approvals: plan.required_approvals,
                approver_set_epoch: held.epoch,
                leaves,
            },
        )];
        if plan.status == BatchStatus::Approved {
            events.push(NewEvent::from_payload(
                new_event_id(),
                command.tenant.clone(),
                now_us,
                &BatchApproved {
                    batch_id: batch_id.as_bytes().to_vec(),
                    approvers: Vec::new(),
                },
            ));
        }
        append_and_project(
            tx,
            &projections(),
            &batch_stream(&batch_id),
            ExpectedVersion::NoStream,
            &events,
        )
        .await?;
        Ok(CreatedBatch {
            batch_id,
            scope_root: plan.tree.root(),
            scope_size: plan.tree.size(),
            required_approvals: plan.required_approvals,
            not_after_us: plan.not_after_us,
            status: plan.status,
            retry: false,
        })
    })
}

/// Records one approver's signature; the one that reaches the requirement releases the batch.
pub async fn approve_batch(
    store: &EventStore,
    clock: &dyn Clock,
    trust_domain: &TrustDomain,
    batch_id: &BatchId,
    signature: &ApprovalSignature,
) -> Result<ApproveOutcome, QuorumError> {
    crate::transaction!(store, QuorumError, |tx| {
        let now_us = clock.now_us();
        let row = require_batch(tx, batch_id).await?;
        let stream_version = row.stream_version;
        let tenant = row.tenant_id.clone();
        let view = load_view(tx, row).await?;
        let held = current_set(tx).await?;
        let decided = decide_add_approval(
            &AddApproval {
                signature: signature.clone(),
            },
            &view.state,
            &held.set,
            trust_domain,
            now_us,
        )
        .map_err(QuorumRefusal::Approval)?;
        let mut state = view.state.clone();
        let mut events = Vec::new();
        for event in &decided {
            state = state.evolve(event);
            let new = match event {
                ApprovalEvent::Recorded(sig) => NewEvent::from_payload(
                    new_event_id(),
                    tenant.clone(),
                    now_us,
                    &BatchApprovalRecorded {
                        batch_id: batch_id.as_bytes().to_vec(),
                        signature: Some(QuorumSignature {
                            kid: sig.kid.as_bytes().to_vec(),
                            sig: sig.sig.clone(),
                        }),
                    },
                ),
                ApprovalEvent::Approved { approvers } => NewEvent::from_payload(
                    new_event_id(),
                    tenant.clone(),
                    now_us,
                    &BatchApproved {
                        batch_id: batch_id.as_bytes().to_vec(),
                        approvers: approvers.iter().map(|k| k.as_bytes().to_vec()).collect(),
                    },
                ),
            };
            events.push(new);
        }
        if !events.is_empty() {
            append_and_project(
                tx,
                &projections(),
                &batch_stream(batch_id),
                ExpectedVersion::Exact(stream_version),
                &events,
            )
            .await?;
        }
        Ok(ApproveOutcome {
            recorded: !events.is_empty(),
            held: u32::try_from(state.approvals.len()).unwrap_or(u32::MAX),
            required: state.required,
            status: state.status,
        })
    })
}

/// Cancels a pending or approved batch.
pub async fn cancel_batch(
    store: &EventStore,
    clock: &dyn Clock,
    batch_id: &BatchId,
    reason: &str,
    cancelled_by: &str,
) -> Result<(), QuorumError> {
    crate::transaction!(store, QuorumError, |tx| {
        let now_us = clock.now_us();
        let row = require_batch(tx, batch_id).await?;
        let status = parse_status(&row.status)?;
        if !matches!(status, BatchStatus::Pending | BatchStatus::Approved) {
            return refused(QuorumRefusal::InvalidState(format!(
                "batch {batch_id} is {}: only a pending or approved batch can be cancelled",
                row.status
            )));
        }
        let event = NewEvent::from_payload(
            new_event_id(),
            row.tenant_id.clone(),
            now_us,
            &BatchCancelled {
                batch_id: batch_id.as_bytes().to_vec(),
                reason: reason.to_string(),
                cancelled_by: cancelled_by.to_string(),
            },
        );
        append_and_project(
            tx,
            &projections(),
            &batch_stream(batch_id),
            ExpectedVersion::Exact(row.stream_version),
            &[event],
        )
        .await?;
        Ok(())
    })
}

/// The reconciler: records `batch.expired` for pending batches past their end (at most `limit`
/// per call). Each batch commits on its own, so an approval racing it is re-read, not lost.
pub async fn expire_due_batches(
    store: &EventStore,
    clock: &dyn Clock,
    limit: u32,
) -> Result<Vec<BatchId>, QuorumError> {
    let due = {
        let mut tx = store.begin().await?;
        let rows = pending_past_end(&mut tx, clock.now_us(), limit).await;
        let _ = tx.rollback().await;
        rows?
    };
    let mut expired = Vec::new();
    for row in due {
        let batch_id = BatchId::from_slice(&row.batch_id).map_err(|e| corrupt("batch_id", e))?;
        let done = crate::transaction!(store, QuorumError, |tx| {
            let now_us = clock.now_us();
            let row = require_batch(tx, &batch_id).await?;
            if row.status != "pending" || row.not_after_us >= now_us {
                return Ok(false);
            }
            let event = NewEvent::from_payload(
                new_event_id(),
                row.tenant_id.clone(),
                now_us,
                &BatchExpired {
                    batch_id: batch_id.as_bytes().to_vec(),
                    not_after_us: row.not_after_us,
                },
            );
            append_and_project(
                tx,
                &projections(),
                &batch_stream(&batch_id),
                ExpectedVersion::Exact(row.stream_version),
                &[event],
            )
            .await?;
            Ok::<bool, QuorumError>(true)
        })?;
        if done {
            expired.push(batch_id);
        }
    }
    Ok(expired)
}

/// A batch with its approvals, or `None`.
pub async fn batch_view(
    store: &EventStore,
    batch_id: &BatchId,
) -> Result<Option<BatchView>, QuorumError> {
    let mut tx = store.begin().await?;
    let result = async {
        match read_batch(&mut tx, batch_id.as_bytes()).await? {
            Some(row) => Ok(Some(load_view(&mut tx, row).await?)),
            None => Ok(None),
        }
    }
    .await;
    let _ = tx.rollback().await;
    result
}

fn scope_entry(row: ScopeRow) -> Result<ScopeEntry, QuorumError> {
    let digest = match &row.payload_sha256 {
        Some(d) => Some(PayloadDigest::from_slice(d).map_err(|e| corrupt("payload_sha256", e))?),
        None => None,
    };
    let leaf =
        ScopeLeaf::new(row.subject, row.kind, digest).map_err(|e| corrupt("scope leaf", e))?;
    if !row.proof.len().is_multiple_of(32) {
        return Err(corrupt("proof", "not a whole number of 32-byte hashes"));
    }
    let siblings = row
        .proof
        .chunks(32)
        .map(|c| ScopeHash::from_slice(c).map_err(|e| corrupt("proof", e)))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ScopeEntry {
        leaf,
        leaf_hash: ScopeHash::from_slice(&row.leaf_hash).map_err(|e| corrupt("leaf_hash", e))?,
        payload_type_url: row.payload_type_url,
        payload_value: row.payload_value,
        proof: ScopeProof {
            index: row.leaf_index,
            siblings,
        },
    })
}

/// Up to `limit` leaves from `from_index` on, with their proofs.
pub async fn scope_page(
    store: &EventStore,
    batch_id: &BatchId,
    from_index: u32,
    limit: u32,
) -> Result<Vec<ScopeEntry>, QuorumError> {
    let mut tx = store.begin().await?;
    let rows = read_scope_page(&mut tx, batch_id.as_bytes(), from_index, limit).await;
    let _ = tx.rollback().await;
    rows?.into_iter().map(scope_entry).collect()
}

/// The stored proof of the leaf with this hash (what the gateway sends with a command).
pub async fn leaf_proof(
    store: &EventStore,
    batch_id: &BatchId,
    leaf_hash: &ScopeHash,
) -> Result<Option<ScopeProof>, QuorumError> {
    let mut tx = store.begin().await?;
    let row = read_leaf(&mut tx, batch_id.as_bytes(), leaf_hash.as_bytes()).await;
    let _ = tx.rollback().await;
    match row? {
        Some(row) => Ok(Some(scope_entry(row)?.proof)),
        None => Ok(None),
    }
}
