//! The quorum reads: the published trust bundle and its history, the nodes' reported trust
//! versions and approver sets, and destructive batches with their approvals and scope rows. Each is one statement
//! on either backend through `events`' [`StoreTx::fetch_all`] / [`StoreTx::fetch_optional`]
//! (inside the caller's transaction) or [`EventStore::fetch_optional`] (outside one).

use events::store::{EventStore, SqlValue, StoreError, StoreTx};

/// The `trust_bundle_state` row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleStateRow {
    pub version: u64,
    pub digest: Vec<u8>,
    /// protobuf `TrustBundleContent`.
    pub content: Vec<u8>,
    pub active_root_sha256: Vec<u8>,
    /// `none`, `added` or `switched`.
    pub rotation_stage: String,
    pub rotation_root_sha256: Option<Vec<u8>>,
    pub switched_at_us: Option<i64>,
    pub approver_set_sha256: Option<Vec<u8>>,
    pub approver_set_epoch: u64,
    pub floor: u64,
    pub stream_version: u64,
    pub published_at_us: i64,
}

type StateTuple = (
    i64,
    Vec<u8>,
    Vec<u8>,
    Vec<u8>,
    String,
    Option<Vec<u8>>,
    Option<i64>,
    Option<Vec<u8>>,
    i64,
    i64,
    i64,
    i64,
);

/// Reads the published bundle, if any has been published.
pub async fn read_bundle_state(tx: &mut StoreTx) -> Result<Option<BundleStateRow>, StoreError> {
    let row: Option<StateTuple> = tx
        .fetch_optional(
            "SELECT version, digest, content, active_root_sha256, rotation_stage, \
         rotation_root_sha256, switched_at_us, approver_set_sha256, approver_set_epoch, floor, \
         stream_version, published_at_us FROM trust_bundle_state WHERE id = 1",
            &[],
        )
        .await?;
    Ok(row.map(|r| BundleStateRow {
        version: r.0.max(0) as u64,
        digest: r.1,
        content: r.2,
        active_root_sha256: r.3,
        rotation_stage: r.4,
        rotation_root_sha256: r.5,
        switched_at_us: r.6,
        approver_set_sha256: r.7,
        approver_set_epoch: r.8.max(0) as u64,
        floor: r.9.max(0) as u64,
        stream_version: r.10.max(0) as u64,
        published_at_us: r.11,
    }))
}

/// The highest version at which a bundle with `digest` was published, if ever.
pub async fn history_version_of(
    tx: &mut StoreTx,
    digest: &[u8],
) -> Result<Option<u64>, StoreError> {
    let row: Option<(i64,)> = tx.fetch_optional(
        "SELECT version FROM trust_bundle_history WHERE digest = $1 ORDER BY version DESC LIMIT 1",
        &[SqlValue::Bytes(digest.to_vec())],
    )
    .await?;
    Ok(row.map(|r| r.0.max(0) as u64))
}

/// One published version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryRow {
    pub version: u64,
    pub digest: Vec<u8>,
    pub previous_version: u64,
    pub cause: String,
    pub published_at_us: i64,
}

/// Every published version, oldest first.
pub async fn read_history(tx: &mut StoreTx) -> Result<Vec<HistoryRow>, StoreError> {
    let rows: Vec<(i64, Vec<u8>, i64, String, i64)> = tx
        .fetch_all(
            "SELECT version, digest, previous_version, cause, published_at_us \
         FROM trust_bundle_history ORDER BY version",
            &[],
        )
        .await?;
    Ok(rows
        .into_iter()
        .map(|r| HistoryRow {
            version: r.0.max(0) as u64,
            digest: r.1,
            previous_version: r.2.max(0) as u64,
            cause: r.3,
            published_at_us: r.4,
        })
        .collect())
}

/// A node's reported trust version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeTrustRow {
    pub node_id: String,
    pub trust_version: u64,
    pub last_seen_us: i64,
}

/// Nodes with a session that has not ended and was seen at or after `seen_since_us`.
pub async fn connected_nodes(
    tx: &mut StoreTx,
    seen_since_us: i64,
) -> Result<Vec<NodeTrustRow>, StoreError> {
    let rows: Vec<(String, i64, i64)> = tx
        .fetch_all(
            "SELECT node_id, trust_version, last_seen_us FROM node_trust_reports \
         WHERE connected = $1 AND last_seen_us >= $2 ORDER BY trust_version, node_id",
            &[SqlValue::Bool(true), SqlValue::Int(seen_since_us)],
        )
        .await?;
    Ok(rows
        .into_iter()
        .map(|r| NodeTrustRow {
            node_id: r.0,
            trust_version: r.1.max(0) as u64,
            last_seen_us: r.2,
        })
        .collect())
}

/// The approver set a connected node reports holding (spec 003 "Nodes that hold another set").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeApproverSetRow {
    pub node_id: String,
    pub trust_version: u64,
    /// `None` for a node holding no approver keys (or one not seen since the column exists).
    pub approver_set_epoch: Option<u64>,
    /// SHA-256(approverSetInput) of the set it holds; `None` as for the epoch.
    pub approver_set_sha256: Option<Vec<u8>>,
    pub last_seen_us: i64,
}

type ApproverSetTuple = (String, i64, Option<i64>, Option<Vec<u8>>, i64);

/// The approver sets of the nodes with a session that has not ended and was seen at or after
/// `seen_since_us`, by node id.
pub async fn connected_approver_sets(
    tx: &mut StoreTx,
    seen_since_us: i64,
) -> Result<Vec<NodeApproverSetRow>, StoreError> {
    let rows: Vec<ApproverSetTuple> = tx
        .fetch_all(
            "SELECT node_id, trust_version, approver_set_epoch, approver_set_sha256, \
             last_seen_us FROM node_trust_reports \
             WHERE connected = $1 AND last_seen_us >= $2 ORDER BY node_id",
            &[SqlValue::Bool(true), SqlValue::Int(seen_since_us)],
        )
        .await?;
    Ok(rows
        .into_iter()
        .map(|r| NodeApproverSetRow {
            node_id: r.0,
            trust_version: r.1.max(0) as u64,
            approver_set_epoch: r.2.map(|e| e.max(0) as u64),
            approver_set_sha256: r.3,
            last_seen_us: r.4,
        })
        .collect())
}

/// The published bundle's version and content, the part a Welcome carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishedContentRow {
    pub version: u64,
    /// protobuf `TrustBundleContent`.
    pub content: Vec<u8>,
}

/// The published bundle's version and content, read outside any transaction (from the pool on
/// Postgres, a reader connection on SQLite), or `None` before any is published. A stored
/// version below zero is reported, not clamped.
pub async fn read_published_content(
    store: &EventStore,
) -> Result<Option<PublishedContentRow>, PublishedContentError> {
    let row: Option<(i64, Vec<u8>)> = store
        .fetch_optional(
            "SELECT version, content FROM trust_bundle_state WHERE id = 1",
            &[],
        )
        .await?;
    row.map(|(version, content)| {
        Ok(PublishedContentRow {
            version: u64::try_from(version).map_err(|_| PublishedContentError::Version(version))?,
            content,
        })
    })
    .transpose()
}

/// Why the published content cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum PublishedContentError {
    #[error("reading trust_bundle_state: {0}")]
    Store(#[from] StoreError),
    #[error("trust_bundle_state holds version {0}")]
    Version(i64),
}

/// A `command_batches` row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchRow {
    pub batch_id: Vec<u8>,
    pub tenant_id: String,
    pub caller: String,
    pub reason: String,
    pub request_digest: Vec<u8>,
    pub scope_root: Vec<u8>,
    pub scope_size: u32,
    pub not_after_us: i64,
    pub required_approvals: u32,
    pub approvals_held: u32,
    pub approver_set_epoch: u64,
    pub status: String,
    pub created_at_us: i64,
    pub status_at_us: i64,
    pub stream_version: u64,
}

type BatchTuple = (
    Vec<u8>,
    String,
    String,
    String,
    Vec<u8>,
    Vec<u8>,
    i64,
    i64,
    i64,
    i64,
    i64,
    String,
    i64,
    i64,
    i64,
);

const BATCH_COLUMNS: &str = "batch_id, tenant_id, caller, reason, request_digest, scope_root, \
     scope_size, not_after_us, required_approvals, approvals_held, approver_set_epoch, status, \
     created_at_us, status_at_us, stream_version";

fn batch_row(r: BatchTuple) -> BatchRow {
    BatchRow {
        batch_id: r.0,
        tenant_id: r.1,
        caller: r.2,
        reason: r.3,
        request_digest: r.4,
        scope_root: r.5,
        scope_size: u32::try_from(r.6).unwrap_or(0),
        not_after_us: r.7,
        required_approvals: u32::try_from(r.8).unwrap_or(u32::MAX),
        approvals_held: u32::try_from(r.9).unwrap_or(0),
        approver_set_epoch: r.10.max(0) as u64,
        status: r.11,
        created_at_us: r.12,
        status_at_us: r.13,
        stream_version: r.14.max(0) as u64,
    }
}

/// One batch.
pub async fn read_batch(tx: &mut StoreTx, batch_id: &[u8]) -> Result<Option<BatchRow>, StoreError> {
    let row: Option<BatchTuple> = tx
        .fetch_optional(
            &format!("SELECT {BATCH_COLUMNS} FROM command_batches WHERE batch_id = $1"),
            &[SqlValue::Bytes(batch_id.to_vec())],
        )
        .await?;
    Ok(row.map(batch_row))
}

/// The batches of `tenant` still open (pending or approved), by id: what its deletion cancels.
pub async fn open_batches_of_tenant(
    tx: &mut StoreTx,
    tenant: &str,
) -> Result<Vec<BatchRow>, StoreError> {
    let rows: Vec<BatchTuple> = tx
        .fetch_all(
            &format!(
                "SELECT {BATCH_COLUMNS} FROM command_batches WHERE tenant_id = $1 \
             AND status IN ('pending', 'approved') ORDER BY batch_id"
            ),
            &[tenant.into()],
        )
        .await?;
    Ok(rows.into_iter().map(batch_row).collect())
}

/// Pending batches whose end is before `now_us`, at most `limit`, oldest end first.
pub async fn pending_past_end(
    tx: &mut StoreTx,
    now_us: i64,
    limit: u32,
) -> Result<Vec<BatchRow>, StoreError> {
    let rows: Vec<BatchTuple> = tx
        .fetch_all(
            &format!(
                "SELECT {BATCH_COLUMNS} FROM command_batches WHERE status = 'pending' \
             AND not_after_us < $1 ORDER BY not_after_us, batch_id LIMIT $2"
            ),
            &[SqlValue::Int(now_us), SqlValue::Int(i64::from(limit))],
        )
        .await?;
    Ok(rows.into_iter().map(batch_row).collect())
}

/// Batches newest first (by creation, then id), at most `limit`; only those of `status` when
/// one is given (`pending`, `approved`, ...). What `bcctl batch list` shows approvers.
pub async fn list_batches(
    tx: &mut StoreTx,
    status: Option<&str>,
    limit: u32,
) -> Result<Vec<BatchRow>, StoreError> {
    let rows: Vec<BatchTuple> = match status {
        Some(status) => {
            tx.fetch_all(
                &format!(
                    "SELECT {BATCH_COLUMNS} FROM command_batches WHERE status = $1 \
                 ORDER BY created_at_us DESC, batch_id LIMIT $2"
                ),
                &[
                    SqlValue::Text(status.to_string()),
                    SqlValue::Int(i64::from(limit)),
                ],
            )
            .await?
        }
        None => {
            tx.fetch_all(
                &format!(
                    "SELECT {BATCH_COLUMNS} FROM command_batches \
                 ORDER BY created_at_us DESC, batch_id LIMIT $1"
                ),
                &[SqlValue::Int(i64::from(limit))],
            )
            .await?
        }
    };
    Ok(rows.into_iter().map(batch_row).collect())
}

/// A recorded approval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalRow {
    pub kid: Vec<u8>,
    pub sig: Vec<u8>,
    pub recorded_at_us: i64,
}

/// A batch's approvals, in kid order.
pub async fn read_approvals(
    tx: &mut StoreTx,
    batch_id: &[u8],
) -> Result<Vec<ApprovalRow>, StoreError> {
    let rows: Vec<(Vec<u8>, Vec<u8>, i64)> = tx
        .fetch_all(
            "SELECT kid, sig, recorded_at_us FROM command_batch_approvals WHERE batch_id = $1 \
         ORDER BY kid",
            &[SqlValue::Bytes(batch_id.to_vec())],
        )
        .await?;
    Ok(rows
        .into_iter()
        .map(|r| ApprovalRow {
            kid: r.0,
            sig: r.1,
            recorded_at_us: r.2,
        })
        .collect())
}

/// A `command_batch_scope` row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopeRow {
    pub leaf_index: u32,
    pub leaf_hash: Vec<u8>,
    pub subject: String,
    pub kind: String,
    pub payload_sha256: Option<Vec<u8>>,
    pub payload_type_url: Option<String>,
    pub payload_value: Option<Vec<u8>>,
    /// The tree's nodes at this index of levels 1, 2, ..., 32 bytes each (`None` on rows written
    /// before migration 0005).
    pub nodes: Option<Vec<u8>>,
}

type ScopeTuple = (
    i64,
    Vec<u8>,
    String,
    String,
    Option<Vec<u8>>,
    Option<String>,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
);

const SCOPE_COLUMNS: &str = "leaf_index, leaf_hash, subject, kind, payload_sha256, \
     payload_type_url, payload_value, nodes";

fn scope_row(r: ScopeTuple) -> ScopeRow {
    ScopeRow {
        leaf_index: u32::try_from(r.0).unwrap_or(u32::MAX),
        leaf_hash: r.1,
        subject: r.2,
        kind: r.3,
        payload_sha256: r.4,
        payload_type_url: r.5,
        payload_value: r.6,
        nodes: r.7,
    }
}

/// Up to `limit` scope leaves from `from_index` on, in leaf order.
pub async fn read_scope_page(
    tx: &mut StoreTx,
    batch_id: &[u8],
    from_index: u32,
    limit: u32,
) -> Result<Vec<ScopeRow>, StoreError> {
    let rows: Vec<ScopeTuple> = tx
        .fetch_all(
            &format!(
                "SELECT {SCOPE_COLUMNS} FROM command_batch_scope WHERE batch_id = $1 \
             AND leaf_index >= $2 ORDER BY leaf_index LIMIT $3"
            ),
            &[
                SqlValue::Bytes(batch_id.to_vec()),
                SqlValue::Int(i64::from(from_index)),
                SqlValue::Int(i64::from(limit)),
            ],
        )
        .await?;
    Ok(rows.into_iter().map(scope_row).collect())
}

/// The scope leaf with this hash, if the batch holds it.
pub async fn read_leaf(
    tx: &mut StoreTx,
    batch_id: &[u8],
    leaf_hash: &[u8],
) -> Result<Option<ScopeRow>, StoreError> {
    let row: Option<ScopeTuple> = tx
        .fetch_optional(
            &format!(
                "SELECT {SCOPE_COLUMNS} FROM command_batch_scope WHERE batch_id = $1 \
             AND leaf_hash = $2"
            ),
            &[
                SqlValue::Bytes(batch_id.to_vec()),
                SqlValue::Bytes(leaf_hash.to_vec()),
            ],
        )
        .await?;
    Ok(row.map(scope_row))
}

/// The tree material of one scope row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeRow {
    pub leaf_index: u32,
    pub leaf_hash: Vec<u8>,
    /// As [`ScopeRow::nodes`].
    pub nodes: Option<Vec<u8>>,
}

type TreeTuple = (i64, Vec<u8>, Option<Vec<u8>>);

fn tree_row(r: TreeTuple) -> TreeRow {
    TreeRow {
        leaf_index: u32::try_from(r.0).unwrap_or(u32::MAX),
        leaf_hash: r.1,
        nodes: r.2,
    }
}

/// The tree material of the rows with these indexes (a proof's rows: a few dozen at most), in
/// index order; indexes the batch does not have are left out.
pub async fn read_tree_rows(
    tx: &mut StoreTx,
    batch_id: &[u8],
    indexes: &[u32],
) -> Result<Vec<TreeRow>, StoreError> {
    if indexes.is_empty() {
        return Ok(Vec::new());
    }
    let placeholders: Vec<String> = (0..indexes.len()).map(|i| format!("${}", i + 2)).collect();
    let mut args = Vec::with_capacity(indexes.len() + 1);
    args.push(SqlValue::Bytes(batch_id.to_vec()));
    args.extend(indexes.iter().map(|&i| SqlValue::Int(i64::from(i))));
    let rows: Vec<TreeTuple> = tx
        .fetch_all(
            &format!(
                "SELECT leaf_index, leaf_hash, nodes FROM command_batch_scope WHERE batch_id = $1 \
             AND leaf_index IN ({}) ORDER BY leaf_index",
                placeholders.join(", ")
            ),
            &args,
        )
        .await?;
    Ok(rows.into_iter().map(tree_row).collect())
}

/// The tree material of the rows from index `first` to `last` (inclusive), in index order.
pub async fn read_tree_range(
    tx: &mut StoreTx,
    batch_id: &[u8],
    first: u32,
    last: u32,
) -> Result<Vec<TreeRow>, StoreError> {
    let rows: Vec<TreeTuple> = tx
        .fetch_all(
            "SELECT leaf_index, leaf_hash, nodes FROM command_batch_scope WHERE batch_id = $1 \
         AND leaf_index >= $2 AND leaf_index <= $3 ORDER BY leaf_index",
            &[
                SqlValue::Bytes(batch_id.to_vec()),
                SqlValue::Int(i64::from(first)),
                SqlValue::Int(i64::from(last)),
            ],
        )
        .await?;
    Ok(rows.into_iter().map(tree_row).collect())
}
