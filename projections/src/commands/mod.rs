//! The command queue's projection (issue 21): `commands` (one row per command: the signed body,
//! signature and worker certificate exactly as enqueued, the scope leaf it uses, its dispatches
//! and the node's answer) and `command_workers` (one row per worker certificate).
//!
//! Built only from `command.*` events. A held command stays `held` in its row when its batch is
//! approved: the reads join `command_batches` and treat a held command of an approved batch as
//! runnable, released at the batch's `batch.approved` position. So this projection never reads
//! another projection's rows while applying, and a rebuild gives the same rows.
//!
//! - [`read`]: every read of these tables (and of the scope leaves enqueue checks).

pub mod read;

use events::schema::{
    CommandCancelled, CommandDispatched, CommandEnqueued, CommandRejected, CommandResultRecorded,
    WorkerCertified,
};
use events::store::{LogTx, SqlValue, StoreTx};
use events::RecordedEvent;

use crate::{BoxFuture, Projection, ProjectionError, TableSpec};

pub use read::{
    command_by_id, command_by_id_outside, commands_of_batch_to_cancel, list_commands,
    ready_nodes_since, runnable_of_node, scope_leaves_for, tenants_of_nodes, CommandListFilter,
    CommandRow, ScopeLeafRow,
};

const COMMANDS: TableSpec = TableSpec {
    name: "commands",
    columns: &[
        "command_id",
        "node_id",
        "tenant_id",
        "kind",
        "destructive",
        "payload_type_url",
        "payload",
        "batch_id",
        "leaf_hash",
        "body",
        "signature",
        "worker_certificate",
        "caller",
        "status",
        "enqueued_at_us",
        "not_after_us",
        "ready_position",
        "dispatch_count",
        "last_dispatch_cause",
        "reject_reason",
        "exit_code",
        "detail",
        "output_tail",
        "started_at_ms",
        "finished_at_ms",
        "answered_at_us",
        "cancel_reason",
        "enqueued_position",
        "stream_version",
        "position",
    ],
    order_by: "command_id",
};

const WORKERS: TableSpec = TableSpec {
    name: "command_workers",
    columns: &[
        "certificate_sha256",
        "certificate_der",
        "root_sha256",
        "holder",
        "not_before_us",
        "not_after_us",
        "position",
    ],
    order_by: "certificate_sha256",
};

/// The most output a row keeps: the last 4 KiB.
pub const OUTPUT_TAIL_MAX: usize = 4096;

/// The command queue and its worker certificates.
#[derive(Debug, Clone, Copy, Default)]
pub struct CommandProjection;

fn inapplicable(event: &RecordedEvent, why: impl Into<String>) -> ProjectionError {
    ProjectionError::Inapplicable {
        projection: "commands",
        position: event.position,
        event_type: event.event_type.clone(),
        why: why.into(),
    }
}

fn opt_bytes(b: &[u8]) -> SqlValue {
    if b.is_empty() {
        SqlValue::NullBytes
    } else {
        SqlValue::Bytes(b.to_vec())
    }
}

async fn insert_enqueued(tx: &mut StoreTx, event: &RecordedEvent) -> Result<(), ProjectionError> {
    let e: CommandEnqueued = event.decode()?;
    let status = if e.held { "held" } else { "queued" };
    let ready = if e.held {
        SqlValue::NullInt
    } else {
        SqlValue::Int(event.position)
    };
    tx.execute(
        "INSERT INTO commands (command_id, node_id, tenant_id, kind, destructive, \
         payload_type_url, payload, batch_id, leaf_hash, body, signature, worker_certificate, \
         caller, status, enqueued_at_us, not_after_us, ready_position, dispatch_count, \
         enqueued_position, stream_version, position) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, \
         $9, $10, $11, $12, $13, $14, $15, $16, $17, 0, $18, $19, $18)",
        &[
            SqlValue::Text(e.command_id),
            SqlValue::Text(e.node_id),
            SqlValue::Text(e.tenant_id),
            SqlValue::Text(e.kind),
            SqlValue::Bool(e.destructive),
            SqlValue::Text(e.payload_type_url),
            SqlValue::Bytes(e.payload),
            opt_bytes(&e.batch_id),
            opt_bytes(&e.leaf_hash),
            SqlValue::Bytes(e.body),
            SqlValue::Bytes(e.signature),
            SqlValue::Bytes(e.worker_certificate),
            SqlValue::Text(e.caller),
            SqlValue::Text(status.to_string()),
            SqlValue::Int(event.occurred_at_us),
            SqlValue::Int(e.not_after_us),
            ready,
            SqlValue::Int(event.position),
            SqlValue::Int(event.stream_version),
        ],
    )
    .await?;
    Ok(())
}

/// Runs one UPDATE of a command row that must change exactly that row.
async fn update_one(
    tx: &mut StoreTx,
    event: &RecordedEvent,
    sql: &str,
    args: &[SqlValue],
) -> Result<(), ProjectionError> {
    if tx.execute(sql, args).await? != 1 {
        return Err(inapplicable(event, "no such command"));
    }
    Ok(())
}

fn tail(bytes: &[u8]) -> Vec<u8> {
    bytes[bytes.len().saturating_sub(OUTPUT_TAIL_MAX)..].to_vec()
}

async fn apply_one(tx: &mut StoreTx, event: &RecordedEvent) -> Result<(), ProjectionError> {
    let (pos, ver, at) = (
        SqlValue::Int(event.position),
        SqlValue::Int(event.stream_version),
        SqlValue::Int(event.occurred_at_us),
    );
    match event.event_type.as_str() {
        "command.worker.certified" => {
            let w: WorkerCertified = event.decode()?;
            tx.execute(
                "INSERT INTO command_workers (certificate_sha256, certificate_der, root_sha256, \
                 holder, not_before_us, not_after_us, position) VALUES ($1, $2, $3, $4, $5, $6, $7)",
                &[
                    SqlValue::Bytes(w.certificate_sha256),
                    SqlValue::Bytes(w.certificate_der),
                    SqlValue::Bytes(w.root_sha256),
                    SqlValue::Text(w.holder),
                    SqlValue::Int(w.not_before_us),
                    SqlValue::Int(w.not_after_us),
                    pos,
                ],
            )
            .await?;
        }
        "command.enqueued" => insert_enqueued(tx, event).await?,
        "command.dispatched" => {
            let d: CommandDispatched = event.decode()?;
            update_one(
                tx,
                event,
                "UPDATE commands SET status = CASE WHEN status IN ('held', 'queued', \
                 'dispatched') THEN 'dispatched' ELSE status END, dispatch_count = \
                 dispatch_count + 1, last_dispatch_cause = $1, stream_version = $2, position = $3 \
                 WHERE command_id = $4",
                &[
                    SqlValue::Text(d.cause),
                    ver,
                    pos,
                    SqlValue::Text(d.command_id),
                ],
            )
            .await?;
        }
        "command.result.recorded" => {
            let r: CommandResultRecorded = event.decode()?;
            if r.outcome != "succeeded" && r.outcome != "failed" {
                return Err(inapplicable(event, format!("outcome {:?}", r.outcome)));
            }
            let exit = if r.has_exit_code {
                SqlValue::Int(i64::from(r.exit_code))
            } else {
                SqlValue::NullInt
            };
            update_one(
                tx,
                event,
                "UPDATE commands SET status = $1, exit_code = $2, detail = $3, output_tail = $4, \
                 started_at_ms = $5, finished_at_ms = $6, answered_at_us = $7, \
                 stream_version = $8, position = $9 WHERE command_id = $10",
                &[
                    SqlValue::Text(r.outcome),
                    exit,
                    SqlValue::Text(r.detail),
                    SqlValue::Bytes(tail(&r.output_tail)),
                    SqlValue::Int(r.started_at_ms),
                    SqlValue::Int(r.finished_at_ms),
                    at,
                    ver,
                    pos,
                    SqlValue::Text(r.command_id),
                ],
            )
            .await?;
        }
        "command.rejected" => {
            let r: CommandRejected = event.decode()?;
            update_one(
                tx,
                event,
                "UPDATE commands SET status = 'rejected', reject_reason = $1, detail = $2, \
                 answered_at_us = $3, stream_version = $4, position = $5 WHERE command_id = $6",
                &[
                    SqlValue::Text(r.reason),
                    SqlValue::Text(r.detail),
                    at,
                    ver,
                    pos,
                    SqlValue::Text(r.command_id),
                ],
            )
            .await?;
        }
        "command.cancelled" => {
            let c: CommandCancelled = event.decode()?;
            update_one(
                tx,
                event,
                "UPDATE commands SET status = 'cancelled', cancel_reason = $1, \
                 stream_version = $2, position = $3 WHERE command_id = $4",
                &[
                    SqlValue::Text(c.reason),
                    ver,
                    pos,
                    SqlValue::Text(c.command_id),
                ],
            )
            .await?;
        }
        other => {
            return Err(inapplicable(
                event,
                format!("unexpected event type {other}"),
            ))
        }
    }
    Ok(())
}

impl Projection for CommandProjection {
    fn name(&self) -> &'static str {
        "commands"
    }

    fn tables(&self) -> &'static [TableSpec] {
        &[COMMANDS, WORKERS]
    }

    fn handles(&self, event_type: &str) -> bool {
        matches!(
            event_type,
            "command.worker.certified"
                | "command.enqueued"
                | "command.dispatched"
                | "command.result.recorded"
                | "command.rejected"
                | "command.cancelled"
        )
    }

    fn apply<'a>(
        &'a self,
        tx: &'a mut StoreTx,
        events: &'a [&'a RecordedEvent],
    ) -> BoxFuture<'a, Result<(), ProjectionError>> {
        Box::pin(async move {
            for event in events {
                apply_one(tx, event).await?;
            }
            Ok(())
        })
    }
}

/// The command projection, for registries.
pub static COMMAND_PROJECTION: CommandProjection = CommandProjection;

/// Its tables (for digests).
pub fn tables() -> Vec<TableSpec> {
    COMMAND_PROJECTION.tables().to_vec()
}
