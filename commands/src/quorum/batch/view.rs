//! A batch as stored, read into the domain's values: the view approvers and the CLI read, and the
//! standing cancel and expiry decide on.

use std::collections::BTreeMap;

use domain::quorum::{
    ApprovalSignature, BatchApproval, BatchApprovalState, BatchId, BatchStanding, BatchStatus, Kid,
    ScopeHash,
};
use events::store::{EventStore, LogStore, LogTx, StoreTx};
use projections::quorum::{read_approvals, read_batch, BatchRow};

use crate::quorum::error::{corrupt, refused, QuorumError, QuorumRefusal};

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

/// A stored status text.
pub(crate) fn parse_status(text: &str) -> Result<BatchStatus, QuorumError> {
    BatchStatus::parse(text).ok_or_else(|| corrupt("command_batches.status", text))
}

/// A stored row's batch id.
pub(crate) fn row_batch_id(row: &BatchRow) -> Result<BatchId, QuorumError> {
    BatchId::from_slice(&row.batch_id).map_err(|e| corrupt("batch_id", e))
}

/// Where a stored batch stands (for cancel and expiry).
pub(crate) fn standing(row: &BatchRow) -> Result<BatchStanding, QuorumError> {
    Ok(BatchStanding {
        batch_id: row_batch_id(row)?,
        status: parse_status(&row.status)?,
        not_after_us: row.not_after_us,
    })
}

/// A stored batch with its approvals, read in `tx`.
pub(crate) async fn load_view(tx: &mut StoreTx, row: BatchRow) -> Result<BatchView, QuorumError> {
    let batch_id = row_batch_id(&row)?;
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

/// The stored batch; NOT_FOUND when there is none.
pub(crate) async fn require_batch(
    tx: &mut StoreTx,
    batch_id: &BatchId,
) -> Result<BatchRow, QuorumError> {
    match read_batch(tx, batch_id.as_bytes()).await? {
        Some(row) => Ok(row),
        None => refused(QuorumRefusal::BatchNotFound(*batch_id)),
    }
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

/// The most batches one [`list_batches`] call answers.
pub const MAX_BATCH_LIST: u32 = 1000;

/// Batches newest first with their approvals, at most `limit` (capped at [`MAX_BATCH_LIST`]),
/// only those of `status` when one is given: what approvers read to find pending batches.
pub async fn list_batches(
    store: &EventStore,
    status: Option<BatchStatus>,
    limit: u32,
) -> Result<Vec<BatchView>, QuorumError> {
    let mut tx = store.begin().await?;
    let result = async {
        let rows = projections::quorum::list_batches(
            &mut tx,
            status.map(|s| s.as_str()),
            limit.min(MAX_BATCH_LIST),
        )
        .await?;
        let mut views = Vec::with_capacity(rows.len());
        for row in rows {
            views.push(load_view(&mut tx, row).await?);
        }
        Ok(views)
    }
    .await;
    let _ = tx.rollback().await;
    result
}
