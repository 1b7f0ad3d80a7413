//! The command queue's reads: one command, a node's runnable commands, the nodes with newly
//! runnable ones, lists for the CLI, a batch's held commands, and the scope leaves enqueue
//! checks. A held command whose batch reads `approved` is runnable: its effective status is
//! `queued` and it was released at the batch's `batch.approved` position (the batch row's
//! position: nothing else changes an approved batch's row but its cancel, which ends it).

use events::store::{EventStore, SqlValue, StoreError, StoreTx};

crate::from_row! {
    /// A command as the queue reads it (status is the effective one: `queued` for a held command of
    /// an approved batch).
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct CommandRow {
        pub command_id: String,
        pub node_id: String,
        pub tenant_id: String,
        pub kind: String,
        pub destructive: bool,
        pub payload_type_url: String,
        pub payload: Vec<u8>,
        pub batch_id: Option<Vec<u8>>,
        pub leaf_hash: Option<Vec<u8>>,
        pub body: Vec<u8>,
        pub signature: Vec<u8>,
        pub worker_certificate: Vec<u8>,
        pub caller: String,
        pub status: String,
        /// The stored status (`held` stays `held` until dispatched, cancelled or answered).
        pub stored_status: String,
        pub enqueued_at_us: i64,
        pub not_after_us: i64,
        pub dispatch_count: i64,
        pub reject_reason: Option<String>,
        pub exit_code: Option<i64>,
        pub detail: Option<String>,
        pub output_tail: Option<Vec<u8>>,
        pub answered_at_us: Option<i64>,
        /// Why it was cancelled (a batch's end, or its node's certificate at dispatch).
        pub cancel_reason: Option<String>,
        pub enqueued_position: i64,
        pub stream_version: i64,
    }
}

const SELECT: &str = "SELECT c.command_id, c.node_id, c.tenant_id, c.kind, c.destructive, \
    c.payload_type_url, c.payload, c.batch_id, c.leaf_hash, c.body, c.signature, \
    c.worker_certificate, c.caller, CASE WHEN c.status = 'held' AND b.status = 'approved' \
    THEN 'queued' ELSE c.status END AS status, c.status AS stored_status, c.enqueued_at_us, \
    c.not_after_us, c.dispatch_count, c.reject_reason, c.exit_code, c.detail, c.output_tail, \
    c.answered_at_us, c.cancel_reason, c.enqueued_position, c.stream_version FROM commands c LEFT JOIN \
    command_batches b ON b.batch_id = c.batch_id";

/// One command.
pub async fn command_by_id(
    tx: &mut StoreTx,
    command_id: &str,
) -> Result<Option<CommandRow>, StoreError> {
    let sql = format!("{SELECT} WHERE c.command_id = $1");
    tx.fetch_optional(&sql, &[command_id.into()]).await
}

/// Every command `node_id` may run now without an answer yet, oldest first, at most `limit`:
/// queued, dispatched without an answer, and held ones whose batch is approved. A batched one
/// is runnable only while its batch reads `approved`.
pub async fn runnable_of_node(
    tx: &mut StoreTx,
    node_id: &str,
    limit: u32,
) -> Result<Vec<CommandRow>, StoreError> {
    let sql = format!(
        "{SELECT} WHERE c.node_id = $1 AND c.status IN ('held', 'queued', 'dispatched') AND \
         (c.batch_id IS NULL OR b.status = 'approved') ORDER BY c.enqueued_position LIMIT $2"
    );
    tx.fetch_all(&sql, &[node_id.into(), SqlValue::Int(i64::from(limit))])
        .await
}

/// How far back (in log positions) [`ready_nodes_since`] looks behind its cursor: on Postgres a
/// transaction that took an earlier position may commit after a later one, so the cursor alone
/// would skip it (docs/DECISIONS.md "Issue 21: ready_since looks back").
pub const READY_LOOKBACK: i64 = 4096;

/// The nodes with undispatched runnable commands released at a position in `(after, upto]`,
/// with the release positions, oldest first, at most `limit` rows.
pub async fn ready_nodes_since(
    store: &EventStore,
    after: i64,
    upto: i64,
    limit: u32,
) -> Result<Vec<(String, i64)>, StoreError> {
    store
        .fetch_all(
            "SELECT node_id, pos FROM (SELECT node_id, ready_position AS pos FROM commands \
             WHERE ready_position > $1 AND ready_position <= $2 AND status = 'queued' UNION ALL \
             SELECT c.node_id, b.position AS pos FROM commands c JOIN command_batches b ON \
             b.batch_id = c.batch_id WHERE c.status = 'held' AND b.status = 'approved' AND \
             b.position > $1 AND b.position <= $2) r ORDER BY pos, node_id LIMIT $3",
            &[
                SqlValue::Int(after),
                SqlValue::Int(upto),
                SqlValue::Int(i64::from(limit)),
            ],
        )
        .await
}

/// Which commands a list selects.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommandListFilter {
    pub node_id: Option<String>,
    pub batch_id: Option<Vec<u8>>,
    /// The effective status.
    pub status: Option<String>,
    pub limit: u32,
}

/// The commands `filter` selects, newest first.
pub async fn list_commands(
    store: &EventStore,
    filter: &CommandListFilter,
) -> Result<Vec<CommandRow>, StoreError> {
    let sql = format!(
        "SELECT * FROM ({SELECT}) q WHERE ($1 = '' OR node_id = $1) AND ($2 = '' OR status = $2) \
         AND ($3 = 0 OR batch_id = $4) ORDER BY enqueued_position DESC LIMIT $5"
    );
    let limit = if filter.limit == 0 { 100 } else { filter.limit };
    store
        .fetch_all(
            &sql,
            &[
                filter.node_id.clone().unwrap_or_default().into(),
                filter.status.clone().unwrap_or_default().into(),
                SqlValue::Int(i64::from(filter.batch_id.is_some())),
                SqlValue::Bytes(filter.batch_id.clone().unwrap_or_default()),
                SqlValue::Int(i64::from(limit)),
            ],
        )
        .await
}

/// One command outside any transaction.
pub async fn command_by_id_outside(
    store: &EventStore,
    command_id: &str,
) -> Result<Option<CommandRow>, StoreError> {
    let sql = format!("{SELECT} WHERE c.command_id = $1");
    store.fetch_optional(&sql, &[command_id.into()]).await
}

/// The batch's commands not yet dispatched (stored `held`): what its cancel or expiry cancels.
/// (command id, node id, tenant id, stream version), by command id.
pub async fn commands_of_batch_to_cancel(
    tx: &mut StoreTx,
    batch_id: &[u8],
) -> Result<Vec<(String, String, String, i64)>, StoreError> {
    tx.fetch_all(
        "SELECT command_id, node_id, tenant_id, stream_version FROM commands \
         WHERE batch_id = $1 AND status = 'held' ORDER BY command_id",
        &[SqlValue::Bytes(batch_id.to_vec())],
    )
    .await
}

crate::from_row! {
    /// A stored scope leaf of a batch for one (subject, kind).
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct ScopeLeafRow {
        pub leaf_hash: Vec<u8>,
        pub payload_sha256: Option<Vec<u8>>,
    }
}

/// The batch's scope leaves for (subject, kind) (the unbound one and the bound ones, at most 4,096).
pub async fn scope_leaves_for(
    tx: &mut StoreTx,
    batch_id: &[u8],
    subject: &str,
    kind: &str,
) -> Result<Vec<ScopeLeafRow>, StoreError> {
    tx.fetch_all(
        "SELECT leaf_hash, payload_sha256 FROM command_batch_scope WHERE batch_id = $1 AND \
         subject = $2 AND kind = $3 ORDER BY leaf_index LIMIT 4096",
        &[
            SqlValue::Bytes(batch_id.to_vec()),
            subject.into(),
            kind.into(),
        ],
    )
    .await
}

/// The tenants of those of `node_ids` that exist (in chunks of 500 ids a statement).
pub async fn tenants_of_nodes(
    tx: &mut StoreTx,
    node_ids: &[String],
) -> Result<Vec<(String, String)>, StoreError> {
    let mut out = Vec::with_capacity(node_ids.len());
    for chunk in node_ids.chunks(500) {
        let params: Vec<String> = (1..=chunk.len()).map(|i| format!("${i}")).collect();
        let sql = format!(
            "SELECT node_id, tenant_id FROM nodes WHERE node_id IN ({})",
            params.join(", ")
        );
        let args: Vec<SqlValue> = chunk.iter().map(|id| id.as_str().into()).collect();
        let rows: Vec<(String, String)> = tx.fetch_all(&sql, &args).await?;
        out.extend(rows);
    }
    Ok(out)
}
