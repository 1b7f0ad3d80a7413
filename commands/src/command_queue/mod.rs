//! The command queue (issue 21): enqueue signed commands, hand a gateway the commands a node may
//! run, and record what was sent and what the node answered. Every step is an event on the
//! command's stream (`command/<id>`); the `commands` projection is the queue's state.
//!
//! - [`worker`]: the process's worker key, certified by the command-signing root for at most 24
//!   hours and replaced after 60% of its lifetime (each certification a `command.worker.certified`
//!   event).
//! - [`enqueue`]: `bcctl command run`: load the node, its certificate's allowed kinds, the batch
//!   and the published quorum, decide (`domain::command::enqueue`), sign, append.
//! - [`dispatch`]: what the gateway reads and records: the runnable commands of a node (held ones
//!   only once their batch is approved, with the approval and the member's own leaf's proof from
//!   the stored bytes), which nodes have newly runnable commands, dispatches, results and
//!   rejections.
//! - [`views`]: `bcctl command list | show`.
//!
//! - `cancel`: the held commands of a batch that is cancelled or expires, cancelled in the same
//!   transaction.

pub(crate) mod cancel;
pub mod dispatch;
pub mod enqueue;
pub mod views;
pub mod worker;

pub use dispatch::{
    pending_for_node, ready_since, record_dispatched, record_node_answer, DispatchCause,
    NodeAnswer, NodeAnswerOutcome, RunnableCommand,
};
pub use enqueue::{enqueue_command, EnqueueAnswer, EnqueueRequest};
pub use views::{command_list, command_show, CommandFilter, CommandView};
pub use worker::{worker_stream, WorkerSigner, WorkerSignerError};

use crate::run::RunError;

/// Why a queue command failed.
#[derive(Debug, thiserror::Error)]
pub enum CommandQueueError {
    /// A refusal the operator can act on (its message says what to do).
    #[error("{0}")]
    Refused(#[from] domain::command::enqueue::EnqueueRefusal),
    /// The command does not exist.
    #[error("no command {0}")]
    NotFound(String),
    /// Signing failed (the worker key).
    #[error(transparent)]
    Worker(#[from] WorkerSignerError),
    /// The store failed.
    #[error(transparent)]
    Run(#[from] RunError),
    /// Stored queue state that cannot be read back (a bug or a corrupt row).
    #[error("stored command queue state is unreadable: {0}")]
    Corrupt(String),
}

impl From<events::store::StoreError> for CommandQueueError {
    fn from(e: events::store::StoreError) -> Self {
        CommandQueueError::Run(RunError::Store(e))
    }
}

impl From<crate::quorum::QuorumError> for CommandQueueError {
    fn from(e: crate::quorum::QuorumError) -> Self {
        match e {
            crate::quorum::QuorumError::Run(run) => CommandQueueError::Run(run),
            other => CommandQueueError::Corrupt(other.to_string()),
        }
    }
}

impl crate::run::AsConflict for CommandQueueError {
    fn into_conflict(self) -> Result<events::store::StoreError, Self> {
        match self {
            CommandQueueError::Run(run) => run.into_conflict().map_err(CommandQueueError::Run),
            CommandQueueError::Worker(WorkerSignerError::Run(run)) => run
                .into_conflict()
                .map_err(|r| CommandQueueError::Worker(WorkerSignerError::Run(r))),
            other => Err(other),
        }
    }
}

impl CommandQueueError {
    /// The code the CLI and the API name it by (`NOT_FOUND`, `INVALID_INPUT`, ...); `INTERNAL`
    /// for failures that are not refusals.
    pub fn code(&self) -> &'static str {
        match self {
            CommandQueueError::Refused(r) => r.code(),
            CommandQueueError::NotFound(_) => "NOT_FOUND",
            _ => "INTERNAL",
        }
    }
}

/// The projection the queue applies inline (also in [`crate::every_projection`]).
pub fn projections() -> [&'static dyn projections::Projection; 1] {
    [&projections::commands::COMMAND_PROJECTION]
}

/// A stored value that cannot be read back.
pub(crate) fn corrupt(what: &str, e: impl std::fmt::Display) -> CommandQueueError {
    CommandQueueError::Corrupt(format!("{what}: {e}"))
}
