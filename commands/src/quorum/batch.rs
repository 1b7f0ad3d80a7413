//! Destructive batches: create (scope tree and stored proofs), approve, expire, cancel, and the
//! reads approvers and the gateway need.
//!
//! Each batch is the stream `batch/<hex id>`. Creation appends with "no stream", so two creates
//! with one idempotency key race safely: the loser re-reads and finds a retry (same request) or
//! a CONFLICT (another request). Approvals and status changes append at the exact version read.

use std::collections::BTreeMap;

use domain::quorum::CreateBatch;
use domain::quorum::{
    assemble_proof, decide_add_approval, decide_create_batch, proof_rows, verify_proof,
    AddApproval, ApprovalEvent, ApprovalSignature, BatchApproval, BatchApprovalState,
    BatchCreation, BatchId, BatchStatus, Kid, PayloadDigest, RequestDigest, ScopeHash, ScopeLeaf,
    ScopeProof, ScopeTree, TrustDomain,
};
use events::schema::{
    BatchApprovalRecorded, BatchApproved, BatchCancelled, BatchCreated, BatchExpired, BatchLeaf,
    QuorumSignature,
};
use events::store::{EventStore, ExpectedVersion, LogStore, LogTx, StoreTx};
use events::NewEvent;
use projections::quorum::{
    pending_past_end, read_approvals, read_batch, read_leaf, read_scope_page, read_tree_range,
    read_tree_rows, BatchRow, ScopeRow, TreeRow,
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

/// A scope row's leaf, with the proof assembled by the caller.
fn scope_entry(row: ScopeRow, proof: ScopeProof) -> Result<ScopeEntry, QuorumError> {
    let digest = match &row.payload_sha256 {
        Some(d) => Some(PayloadDigest::from_slice(d).map_err(|e| corrupt("payload_sha256", e))?),
        None => None,
    };
    let leaf =
        ScopeLeaf::new(row.subject, row.kind, digest).map_err(|e| corrupt("scope leaf", e))?;
    Ok(ScopeEntry {
        leaf,
        leaf_hash: ScopeHash::from_slice(&row.leaf_hash).map_err(|e| corrupt("leaf_hash", e))?,
        payload_type_url: row.payload_type_url,
        payload_value: row.payload_value,
        proof,
    })
}

/// The tree nodes of some stored rows, by row index: the leaf hash and the nodes stored with it.
#[derive(Default)]
struct StoredNodes {
    rows: BTreeMap<u32, (ScopeHash, Vec<u8>)>,
    /// A row written before migration 0005 (no nodes) was among them.
    legacy: bool,
}

impl StoredNodes {
    fn add(
        &mut self,
        index: u32,
        leaf_hash: &[u8],
        nodes: Option<&[u8]>,
    ) -> Result<(), QuorumError> {
        let hash = ScopeHash::from_slice(leaf_hash).map_err(|e| corrupt("leaf_hash", e))?;
        match nodes {
            Some(nodes) if nodes.len().is_multiple_of(32) => {
                self.rows.insert(index, (hash, nodes.to_vec()));
            }
            Some(_) => return Err(corrupt("nodes", "not a whole number of 32-byte hashes")),
            None => self.legacy = true,
        }
        Ok(())
    }

    fn add_rows(&mut self, rows: Vec<TreeRow>) -> Result<(), QuorumError> {
        for row in rows {
            self.add(row.leaf_index, &row.leaf_hash, row.nodes.as_deref())?;
        }
        Ok(())
    }

    fn node(&self, level: u32, row: u32) -> Option<ScopeHash> {
        let (leaf, nodes) = self.rows.get(&row)?;
        if level == 0 {
            return Some(*leaf);
        }
        let start = (level as usize - 1) * 32;
        ScopeHash::from_slice(nodes.get(start..start + 32)?).ok()
    }

    fn proof(&self, index: u32, size: u32) -> Result<ScopeProof, QuorumError> {
        assemble_proof(index, size, |level, row| self.node(level, row)).ok_or_else(|| {
            corrupt(
                "command_batch_scope",
                format!("a node of leaf {index}'s proof is missing"),
            )
        })
    }
}

/// The whole tree of a batch whose rows predate migration 0005, rebuilt from its leaf hashes.
async fn legacy_tree(
    tx: &mut StoreTx,
    batch_id: &BatchId,
    size: u32,
) -> Result<ScopeTree, QuorumError> {
    let rows = read_tree_range(tx, batch_id.as_bytes(), 0, size.saturating_sub(1)).await?;
    let hashes = rows
        .iter()
        .map(|r| ScopeHash::from_slice(&r.leaf_hash).map_err(|e| corrupt("leaf_hash", e)))
        .collect::<Result<Vec<_>, _>>()?;
    if hashes.len() != size as usize {
        return Err(corrupt(
            "command_batch_scope",
            format!("{} rows for a scope of {size}", hashes.len()),
        ));
    }
    ScopeTree::from_leaf_hashes(hashes).map_err(|e| corrupt("command_batch_scope", e))
}

/// The inclusive index ranges of the rows the proofs of leaves `first..=last` read, merged.
fn proof_ranges(first: u32, last: u32, size: u32) -> Vec<(u32, u32)> {
    let mut ranges = Vec::new();
    let (mut a, mut b, mut len) = (first, last, size);
    while len > 1 {
        ranges.push((a.saturating_sub(1), (b + 1).min(len - 1)));
        a /= 2;
        b /= 2;
        len = len.div_ceil(2);
    }
    ranges.sort_unstable();
    let mut merged: Vec<(u32, u32)> = Vec::with_capacity(ranges.len());
    for (start, end) in ranges {
        match merged.last_mut() {
            Some(last) if start <= last.1.saturating_add(1) => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    merged
}

/// Up to `limit` leaves from `from_index` on, with their proofs (read from the stored tree
/// nodes, not recomputed).
pub async fn scope_page(
    store: &EventStore,
    batch_id: &BatchId,
    from_index: u32,
    limit: u32,
) -> Result<Vec<ScopeEntry>, QuorumError> {
    let mut tx = store.begin().await?;
    let result = scope_page_in(&mut tx, batch_id, from_index, limit).await;
    let _ = tx.rollback().await;
    result
}

async fn scope_page_in(
    tx: &mut StoreTx,
    batch_id: &BatchId,
    from_index: u32,
    limit: u32,
) -> Result<Vec<ScopeEntry>, QuorumError> {
    let Some(batch) = read_batch(tx, batch_id.as_bytes()).await? else {
        return Ok(Vec::new());
    };
    let size = batch.scope_size;
    let rows = read_scope_page(tx, batch_id.as_bytes(), from_index, limit).await?;
    let (Some(first), Some(last)) = (rows.first(), rows.last()) else {
        return Ok(Vec::new());
    };
    if last.leaf_index >= size {
        return Err(corrupt(
            "command_batch_scope",
            format!("leaf {} in a scope of {size}", last.leaf_index),
        ));
    }
    let mut stored = StoredNodes::default();
    for (start, end) in proof_ranges(first.leaf_index, last.leaf_index, size) {
        stored.add_rows(read_tree_range(tx, batch_id.as_bytes(), start, end).await?)?;
    }
    for row in &rows {
        stored.add(row.leaf_index, &row.leaf_hash, row.nodes.as_deref())?;
    }
    let legacy = if stored.legacy {
        Some(legacy_tree(tx, batch_id, size).await?)
    } else {
        None
    };
    rows.into_iter()
        .map(|row| {
            let proof = match &legacy {
                Some(tree) => tree
                    .proof(row.leaf_index)
                    .ok_or_else(|| corrupt("command_batch_scope", "leaf index past the scope"))?,
                None => stored.proof(row.leaf_index, size)?,
            };
            scope_entry(row, proof)
        })
        .collect()
}

/// The stored proof of the leaf with this hash (what the gateway sends with a command), read
/// from at most 17 rows and checked against the batch's root before it is handed out.
pub async fn leaf_proof(
    store: &EventStore,
    batch_id: &BatchId,
    leaf_hash: &ScopeHash,
) -> Result<Option<ScopeProof>, QuorumError> {
    let mut tx = store.begin().await?;
    let result = leaf_proof_in(&mut tx, batch_id, leaf_hash).await;
    let _ = tx.rollback().await;
    result
}

async fn leaf_proof_in(
    tx: &mut StoreTx,
    batch_id: &BatchId,
    leaf_hash: &ScopeHash,
) -> Result<Option<ScopeProof>, QuorumError> {
    let Some(row) = read_leaf(tx, batch_id.as_bytes(), leaf_hash.as_bytes()).await? else {
        return Ok(None);
    };
    let batch = require_batch(tx, batch_id).await?;
    let size = batch.scope_size;
    let root = ScopeHash::from_slice(&batch.scope_root).map_err(|e| corrupt("scope_root", e))?;
    let index = row.leaf_index;
    let proof = if row.nodes.is_none() {
        legacy_tree(tx, batch_id, size)
            .await?
            .proof(index)
            .ok_or_else(|| corrupt("command_batch_scope", "leaf index past the scope"))?
    } else {
        let wanted: Vec<u32> = proof_rows(index, size)
            .into_iter()
            .map(|(_, r)| r)
            .collect();
        let mut stored = StoredNodes::default();
        stored.add_rows(read_tree_rows(tx, batch_id.as_bytes(), &wanted).await?)?;
        if stored.legacy {
            legacy_tree(tx, batch_id, size)
                .await?
                .proof(index)
                .ok_or_else(|| corrupt("command_batch_scope", "leaf index past the scope"))?
        } else {
            stored.proof(index, size)?
        }
    };
    verify_proof(leaf_hash, &proof, size, &root).map_err(|e| {
        corrupt(
            "command_batch_scope",
            format!("the stored proof of leaf {index}: {e}"),
        )
    })?;
    Ok(Some(proof))
}
