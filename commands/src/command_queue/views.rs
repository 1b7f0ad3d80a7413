//! `bcctl command list | show`.

use events::store::EventStore;

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
}

/// The commands `filter` selects, newest first.
pub async fn command_list(
    _store: &EventStore,
    _filter: &CommandFilter,
) -> Result<Vec<CommandView>, CommandQueueError> {
    Err(CommandQueueError::Unimplemented("command_list"))
}

/// One command.
pub async fn command_show(
    _store: &EventStore,
    _command_id: &str,
) -> Result<CommandView, CommandQueueError> {
    Err(CommandQueueError::Unimplemented("command_show"))
}
