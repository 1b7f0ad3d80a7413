//! Why a queue command failed ([`CommandQueueError`]).

use super::worker::WorkerSignerError;
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

/// A stored value that cannot be read back.
pub(crate) fn corrupt(what: &str, e: impl std::fmt::Display) -> CommandQueueError {
    CommandQueueError::Corrupt(format!("{what}: {e}"))
}
