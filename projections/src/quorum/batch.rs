//! `command_batches`, `command_batch_scope` (each leaf, with the scope tree's nodes at its index)
//! and `command_batch_approvals`.
//!
//! The scope tree is maths of the pure `domain` crate, which this crate may not depend on, so the
//! projection takes it as a [`ScopeIndexer`] function (the command layer passes
//! `domain::quorum`'s tree). The indexer is pure, so a rebuild gives the same rows.
//!
//! Every node of the tree is stored once (migration 0005): row `i` holds the leaf hash at index
//! `i` and, in `nodes`, the nodes at index `i` of levels 1, 2, ... as far as a level reaches `i`
//! (32 bytes each; the root ends row 0). A leaf's proof is therefore stored, node for node, and
//! read from at most 17 rows without hashing ([`read_tree_rows`]); the command layer assembles
//! it. Rows written before migration 0005 have `nodes` NULL.

use events::schema::{
    BatchApprovalRecorded, BatchApproved, BatchCancelled, BatchCreated, BatchExpired, BatchLeaf,
};
use events::store::{LogTx, SqlValue, StoreError, StoreTx};
use events::RecordedEvent;

use crate::{BoxFuture, Projection, ProjectionError, TableSpec};

use super::inapplicable::inapplicable;

const BATCHES: TableSpec = TableSpec {
    name: "command_batches",
    columns: &[
        "batch_id",
        "tenant_id",
        "caller",
        "reason",
        "request_digest",
        "scope_root",
        "scope_size",
        "not_after_us",
        "required_approvals",
        "approvals_held",
        "approver_set_epoch",
        "status",
        "created_at_us",
        "status_at_us",
        "stream_version",
        "position",
    ],
    order_by: "batch_id",
};

const SCOPE: TableSpec = TableSpec {
    name: "command_batch_scope",
    columns: &[
        "batch_id",
        "leaf_index",
        "leaf_hash",
        "subject",
        "kind",
        "payload_sha256",
        "payload_type_url",
        "payload_value",
        "nodes",
        "position",
    ],
    order_by: "batch_id, leaf_index",
};

const APPROVALS: TableSpec = TableSpec {
    name: "command_batch_approvals",
    columns: &["batch_id", "kid", "sig", "recorded_at_us", "position"],
    order_by: "batch_id, kid",
};

/// A batch's scope tree as rows, in the event's leaf order: the root, each leaf's hash, and for
/// each index `i` the tree's nodes at index `i` of levels 1, 2, ... (as far as a level has an
/// index `i`), 32 bytes each, concatenated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopeIndex {
    pub root: [u8; 32],
    pub leaf_hashes: Vec<[u8; 32]>,
    pub nodes: Vec<Vec<u8>>,
}

/// Builds the scope tree of a batch's leaves (given in tree order). Pure.
pub type ScopeIndexer = fn(batch_id: &[u8], leaves: &[BatchLeaf]) -> Result<ScopeIndex, String>;

/// Destructive batches, their scopes and approvals.
#[derive(Debug, Clone, Copy)]
pub struct BatchProjection {
    indexer: ScopeIndexer,
}

impl BatchProjection {
    pub const fn new(indexer: ScopeIndexer) -> Self {
        BatchProjection { indexer }
    }
}

/// Rows per multi-row INSERT on SQLite (10 parameters a row, far below its 32,766 limit).
const SQLITE_ROWS_PER_INSERT: usize = 3000;

/// The scope rows of a `batch.created` event in PostgreSQL's binary COPY format: the signature
/// and header, per row a field count then each field as a big-endian i32 length (-1 for NULL)
/// and its bytes (bytea and text as they are, int8 as 8 big-endian bytes), then the trailer.
fn copy_rows(event: &RecordedEvent, created: &BatchCreated, index: &ScopeIndex) -> Vec<u8> {
    fn field(out: &mut Vec<u8>, value: Option<&[u8]>) {
        match value {
            Some(bytes) => {
                // Every field is far below 2 GiB: leaves are bounded (64 KiB payloads, 1 KiB
                // subjects and kinds) and the nodes of a row are at most 17 hashes.
                let len = i32::try_from(bytes.len()).unwrap_or(i32::MAX);
                out.extend_from_slice(&len.to_be_bytes());
                out.extend_from_slice(bytes);
            }
            None => out.extend_from_slice(&(-1i32).to_be_bytes()),
        }
    }
    let per_row = 2 + 10 * 4 + 32 + 8 + 32 + 32 + 8 + 64;
    let mut out = Vec::with_capacity(19 + created.leaves.len() * per_row + 2);
    out.extend_from_slice(b"PGCOPY\n\xff\r\n\0");
    out.extend_from_slice(&0i32.to_be_bytes());
    out.extend_from_slice(&0i32.to_be_bytes());
    let position = event.position.to_be_bytes();
    for (i, leaf) in created.leaves.iter().enumerate() {
        out.extend_from_slice(&10i16.to_be_bytes());
        field(&mut out, Some(&created.batch_id));
        field(&mut out, Some(&(i as i64).to_be_bytes()));
        field(&mut out, Some(&index.leaf_hashes[i]));
        field(&mut out, Some(leaf.subject.as_bytes()));
        field(&mut out, Some(leaf.kind.as_bytes()));
        field(
            &mut out,
            (!leaf.payload_sha256.is_empty()).then_some(leaf.payload_sha256.as_slice()),
        );
        field(
            &mut out,
            leaf.has_payload.then_some(leaf.payload_type_url.as_bytes()),
        );
        field(
            &mut out,
            leaf.has_payload.then_some(leaf.payload_value.as_slice()),
        );
        field(&mut out, Some(&index.nodes[i]));
        field(&mut out, Some(&position));
    }
    out.extend_from_slice(&(-1i16).to_be_bytes());
    out
}

async fn insert_scope(
    tx: &mut StoreTx,
    event: &RecordedEvent,
    created: &BatchCreated,
    index: &ScopeIndex,
) -> Result<(), ProjectionError> {
    let n = created.leaves.len();
    match tx {
        StoreTx::Postgres(t) => {
            let data = copy_rows(event, created, index);
            let conn = t.connection();
            let mut copy = conn
                .copy_in_raw(
                    "COPY command_batch_scope (batch_id, leaf_index, leaf_hash, subject, kind, \
                     payload_sha256, payload_type_url, payload_value, nodes, position) \
                     FROM STDIN (FORMAT binary)",
                )
                .await
                .map_err(StoreError::from)?;
            match copy.send(data).await {
                Ok(_) => {
                    copy.finish().await.map_err(StoreError::from)?;
                }
                Err(e) => {
                    let _ = copy.abort("scope rows could not be sent").await;
                    return Err(StoreError::from(e).into());
                }
            }
        }
        StoreTx::Sqlite(t) => {
            let rows: Vec<usize> = (0..n).collect();
            for chunk in rows.chunks(SQLITE_ROWS_PER_INSERT) {
                let mut builder = sqlx::QueryBuilder::<sqlx::Sqlite>::new(
                    "INSERT INTO command_batch_scope (batch_id, leaf_index, leaf_hash, subject, \
                     kind, payload_sha256, payload_type_url, payload_value, nodes, position) ",
                );
                builder.push_values(chunk, |mut row, &i| {
                    let leaf = &created.leaves[i];
                    row.push_bind(created.batch_id.as_slice())
                        .push_bind(i as i64)
                        .push_bind(index.leaf_hashes[i].as_slice())
                        .push_bind(leaf.subject.as_str())
                        .push_bind(leaf.kind.as_str())
                        .push_bind(
                            (!leaf.payload_sha256.is_empty())
                                .then_some(leaf.payload_sha256.as_slice()),
                        )
                        .push_bind(leaf.has_payload.then_some(leaf.payload_type_url.as_str()))
                        .push_bind(leaf.has_payload.then_some(leaf.payload_value.as_slice()))
                        .push_bind(index.nodes[i].as_slice())
                        .push_bind(event.position);
                });
                builder
                    .build()
                    .execute(t.connection())
                    .await
                    .map_err(StoreError::from)?;
            }
        }
        StoreTx::Recorder(_) => {
            return Err(StoreError::RecordingOnly {
                op: "a COPY of batch scope rows",
            }
            .into())
        }
    }
    Ok(())
}

impl BatchProjection {
    async fn apply_created(
        &self,
        tx: &mut StoreTx,
        event: &RecordedEvent,
    ) -> Result<(), ProjectionError> {
        let created: BatchCreated = event.decode()?;
        let index = (self.indexer)(&created.batch_id, &created.leaves)
            .map_err(|why| inapplicable("command_batches", event, why))?;
        if index.root.as_slice() != created.scope_root.as_slice()
            || index.leaf_hashes.len() != created.scope_size as usize
            || index.leaf_hashes.len() != created.leaves.len()
            || index.nodes.len() != created.leaves.len()
        {
            return Err(inapplicable(
                "command_batches",
                event,
                "the leaves do not give the recorded scope root and size".to_string(),
            ));
        }
        tx.execute(
            "INSERT INTO command_batches (batch_id, tenant_id, caller, reason, request_digest, \
             scope_root, scope_size, not_after_us, required_approvals, approvals_held, \
             approver_set_epoch, status, created_at_us, status_at_us, stream_version, position) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 0, $10, 'pending', $11, $11, $12, $13)",
            &[
                SqlValue::Bytes(created.batch_id.clone()),
                SqlValue::Text(created.tenant_id.clone()),
                SqlValue::Text(created.caller.clone()),
                SqlValue::Text(created.reason.clone()),
                SqlValue::Bytes(created.request_digest.clone()),
                SqlValue::Bytes(created.scope_root.clone()),
                SqlValue::Int(i64::from(created.scope_size)),
                SqlValue::Int(created.not_after_us),
                SqlValue::Int(i64::from(created.required_approvals)),
                SqlValue::Int(i64::try_from(created.approver_set_epoch).unwrap_or(i64::MAX)),
                SqlValue::Int(event.occurred_at_us),
                SqlValue::Int(event.stream_version),
                SqlValue::Int(event.position),
            ],
        )
        .await?;
        insert_scope(tx, event, &created, &index).await
    }
}

async fn set_status(
    tx: &mut StoreTx,
    event: &RecordedEvent,
    batch_id: &[u8],
    status: &str,
) -> Result<(), ProjectionError> {
    let changed = tx
        .execute(
            "UPDATE command_batches SET status = $1, status_at_us = $2, stream_version = $3, \
             position = $4 WHERE batch_id = $5",
            &[
                SqlValue::Text(status.to_string()),
                SqlValue::Int(event.occurred_at_us),
                SqlValue::Int(event.stream_version),
                SqlValue::Int(event.position),
                SqlValue::Bytes(batch_id.to_vec()),
            ],
        )
        .await?;
    if changed != 1 {
        return Err(inapplicable(
            "command_batches",
            event,
            "no such batch".to_string(),
        ));
    }
    Ok(())
}

impl Projection for BatchProjection {
    fn name(&self) -> &'static str {
        "command_batches"
    }

    fn tables(&self) -> &'static [TableSpec] {
        &[BATCHES, SCOPE, APPROVALS]
    }

    fn handles(&self, event_type: &str) -> bool {
        matches!(
            event_type,
            "batch.created"
                | "batch.approval.recorded"
                | "batch.approved"
                | "batch.expired"
                | "batch.cancelled"
        )
    }

    fn apply<'a>(
        &'a self,
        tx: &'a mut StoreTx,
        events: &'a [&'a RecordedEvent],
    ) -> BoxFuture<'a, Result<(), ProjectionError>> {
        Box::pin(async move {
            for event in events {
                match event.event_type.as_str() {
                    "batch.created" => self.apply_created(tx, event).await?,
                    "batch.approval.recorded" => {
                        let recorded: BatchApprovalRecorded = event.decode()?;
                        let signature = recorded.signature.unwrap_or_default();
                        tx.execute(
                            "INSERT INTO command_batch_approvals (batch_id, kid, sig, \
                             recorded_at_us, position) VALUES ($1, $2, $3, $4, $5)",
                            &[
                                SqlValue::Bytes(recorded.batch_id.clone()),
                                SqlValue::Bytes(signature.kid),
                                SqlValue::Bytes(signature.sig),
                                SqlValue::Int(event.occurred_at_us),
                                SqlValue::Int(event.position),
                            ],
                        )
                        .await?;
                        tx.execute(
                            "UPDATE command_batches SET approvals_held = approvals_held + 1, \
                             stream_version = $1, position = $2 WHERE batch_id = $3",
                            &[
                                SqlValue::Int(event.stream_version),
                                SqlValue::Int(event.position),
                                SqlValue::Bytes(recorded.batch_id),
                            ],
                        )
                        .await?;
                    }
                    "batch.approved" => {
                        let approved: BatchApproved = event.decode()?;
                        set_status(tx, event, &approved.batch_id, "approved").await?;
                    }
                    "batch.expired" => {
                        let expired: BatchExpired = event.decode()?;
                        set_status(tx, event, &expired.batch_id, "expired").await?;
                    }
                    "batch.cancelled" => {
                        let cancelled: BatchCancelled = event.decode()?;
                        set_status(tx, event, &cancelled.batch_id, "cancelled").await?;
                    }
                    other => {
                        return Err(inapplicable(
                            "command_batches",
                            event,
                            format!("unexpected event type {other}"),
                        ))
                    }
                }
            }
            Ok(())
        })
    }
}
