//! `bcctl command list | show`.

use events::store::EventStore;
use projections::commands::{command_by_id_outside, list_commands, CommandListFilter, CommandRow};

use super::CommandQueueError;

/// Which commands to list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommandFilter {
    /// Only this node's.
    pub node_id: Option<String>,
    /// Only this batch's (hex).
    pub batch_id: Option<String>,
    /// Only in this status (`queued`, `held`, `dispatched`, `succeeded`, `failed`, `rejected`,
    /// `cancelled`).
    pub status: Option<String>,
    /// At most this many (newest first).
    pub limit: u32,
}

/// One command as the operator sees it (JSON keys camelCase).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CommandView {
    pub command_id: String,
    pub node_id: String,
    pub tenant_id: String,
    pub kind: String,
    pub destructive: bool,
    pub batch_id: Option<String>,
    /// queued, held, dispatched, succeeded, failed, rejected, cancelled.
    pub status: String,
    pub caller: String,
    pub enqueued_at_us: i64,
    pub not_after_us: i64,
    pub dispatch_count: u32,
    pub reject_reason: Option<String>,
    pub exit_code: Option<i32>,
    pub detail: Option<String>,
    /// The output's tail, lossy UTF-8.
    pub output_tail: Option<String>,
    /// Why it was cancelled: its batch ended, or at dispatch its node's certificate no longer
    /// allowed its kind.
    pub cancel_reason: Option<String>,
}

/// The commands `filter` selects, newest first.
/// A batch id that is not 64 hex characters selects nothing (no batch has it).
pub async fn command_list(
    store: &EventStore,
    filter: &CommandFilter,
) -> Result<Vec<CommandView>, CommandQueueError> {
    let batch_id = match &filter.batch_id {
        Some(hex_id) => match hex::decode(hex_id) {
            Ok(bytes) if bytes.len() == 32 => Some(bytes),
            _ => return Ok(Vec::new()),
        },
        None => None,
    };
    let rows = list_commands(
        store,
        &CommandListFilter {
            node_id: filter.node_id.clone(),
            batch_id,
            status: filter.status.clone(),
            limit: filter.limit,
        },
    )
    .await?;
    Ok(rows.into_iter().map(view).collect())
}

/// One command.
pub async fn command_show(
    store: &EventStore,
    command_id: &str,
) -> Result<CommandView, CommandQueueError> {
    command_by_id_outside(store, command_id)
        .await?
        .map(view)
        .ok_or_else(|| CommandQueueError::NotFound(command_id.to_string()))
}

fn view(row: CommandRow) -> CommandView {
    CommandView {
        command_id: row.command_id,
        node_id: row.node_id,
        tenant_id: row.tenant_id,
        kind: row.kind,
        destructive: row.destructive,
        batch_id: row.batch_id.map(hex::encode),
        status: row.status,
        caller: row.caller,
        enqueued_at_us: row.enqueued_at_us,
        not_after_us: row.not_after_us,
        dispatch_count: u32::try_from(row.dispatch_count).unwrap_or(u32::MAX),
        reject_reason: row.reject_reason,
        exit_code: row.exit_code.and_then(|c| i32::try_from(c).ok()),
        detail: row.detail,
        output_tail: row
            .output_tail
            .map(|t| String::from_utf8_lossy(&t).into_owned()),
        cancel_reason: row.cancel_reason,
    }
}
