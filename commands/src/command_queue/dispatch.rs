//! What a gateway reads and records for a node's session: its runnable commands, which nodes
//! have newly runnable ones, dispatches, and the node's answers.

use domain::command::SignedCommand;
use domain::quorum::{BatchApproval, ScopeProof};
use events::store::EventStore;

use super::CommandQueueError;
use crate::clock::Clock;

/// A command ready to send, exactly as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunnableCommand {
    /// Its id.
    pub command_id: String,
    /// The signed body, signature and worker certificate.
    pub signed: SignedCommand,
    /// For a batched command: the batch's approval (its recorded signatures).
    pub approval: Option<BatchApproval>,
    /// For a batched command: the proof of its own leaf, decoded from the stored bytes.
    pub proof: Option<ScopeProof>,
    /// Whether it was dispatched before (a resend after a reconnect).
    pub dispatched_before: bool,
}

/// Every command `node_id` may run now that has no answer yet, oldest first, at most `limit`:
/// queued ones, ones dispatched before without an answer, and held ones whose batch is approved.
pub async fn pending_for_node(
    _store: &EventStore,
    _node_id: &str,
    _limit: u32,
) -> Result<Vec<RunnableCommand>, CommandQueueError> {
    Err(CommandQueueError::Unimplemented("pending_for_node"))
}

/// The nodes with commands that became runnable (enqueued unheld, or released by their batch's
/// approval) at a log position after `after`, and the position to ask from next time. One query
/// a gateway runs on a timer to wake the sessions of those nodes.
pub async fn ready_since(
    _store: &EventStore,
    _after: i64,
    _limit: u32,
) -> Result<(Vec<String>, i64), CommandQueueError> {
    Err(CommandQueueError::Unimplemented("ready_since"))
}

/// Why a gateway sent a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DispatchCause {
    /// Its first send.
    Ready,
    /// Again after a reconnect's Hello.
    Hello,
}

/// Records `command.dispatched` for each of `command_ids` sent to `node_id`.
pub async fn record_dispatched(
    _store: &EventStore,
    _clock: &dyn Clock,
    _node_id: &str,
    _command_ids: &[String],
    _cause: DispatchCause,
) -> Result<(), CommandQueueError> {
    Err(CommandQueueError::Unimplemented("record_dispatched"))
}

/// What a node answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeAnswerOutcome {
    /// It ran and succeeded.
    Succeeded,
    /// It ran and failed.
    Failed,
    /// It refused before running anything; the reason is the wire enum's name
    /// (`BATCH_UNAPPROVED`).
    Rejected {
        /// `CommandRejectReason` name.
        reason: String,
    },
}

/// A node's `CommandResult`, as the gateway decoded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeAnswer {
    /// The command.
    pub command_id: String,
    /// What happened.
    pub outcome: NodeAnswerOutcome,
    /// The node's words.
    pub detail: String,
    /// The program's exit status.
    pub exit_code: Option<i32>,
    /// The output's tail (at most 4 KiB kept).
    pub output_tail: Vec<u8>,
    /// Node clock, Unix ms.
    pub started_at_ms: i64,
    /// Node clock, Unix ms.
    pub finished_at_ms: i64,
}

/// Records a node's answer (`command.result.recorded` or `command.rejected`). An answer for a
/// command of another node, or one already answered, records nothing and answers `false`.
pub async fn record_node_answer(
    _store: &EventStore,
    _clock: &dyn Clock,
    _node_id: &str,
    _answer: &NodeAnswer,
) -> Result<bool, CommandQueueError> {
    Err(CommandQueueError::Unimplemented("record_node_answer"))
}
