//! `bcctl command run`: enqueue one signed command.

use events::store::EventStore;

use super::worker::WorkerSigner;
use super::CommandQueueError;
use crate::clock::Clock;

/// What the operator asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnqueueRequest {
    /// The node.
    pub node_id: String,
    /// The kind (`node.reboot`).
    pub kind: String,
    /// The encoded payload (empty: the kind's empty message).
    pub payload: Vec<u8>,
    /// The batch (64 hex characters parsed), if any.
    pub batch_id: Option<domain::quorum::BatchId>,
    /// Who asks.
    pub caller: String,
    /// How long the command lives, µs (None: 24 hours, or the batch's end).
    pub lifetime_us: Option<i64>,
}

/// What enqueue answers.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct EnqueueAnswer {
    /// The new command's id (`cmd_…`).
    pub command_id: String,
    /// Held until its batch is approved.
    pub held: bool,
    /// Whether the kind is destructive.
    pub destructive: bool,
    /// The batch, hex.
    pub batch_id: Option<String>,
    /// The body's end, µs.
    pub not_after_us: i64,
}

/// Enqueues one command: decide, sign with `signer`, append `command.enqueued`.
pub async fn enqueue_command(
    _store: &EventStore,
    _clock: &dyn Clock,
    _signer: &WorkerSigner,
    _request: &EnqueueRequest,
) -> Result<EnqueueAnswer, CommandQueueError> {
    Err(CommandQueueError::Unimplemented("enqueue_command"))
}
