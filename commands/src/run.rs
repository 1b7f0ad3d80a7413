//! The transaction boundary every handler goes through: begin, let the body load, decide, append
//! and project, commit; on an expected-version conflict start again from a fresh read.

use events::store::{EventStore, LogStore, LogTx, StoreError, StoreTx};
use events::{NewEvent, RecordedEvent};
use projections::{apply_all, Projection, ProjectionError};

/// How many times a command is retried from a fresh read after conflicts before giving up.
pub const MAX_ATTEMPTS: usize = 16;

/// What the command layer can fail with, apart from refusals (which are outcomes, not errors).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("store: {0}")]
    Store(#[from] StoreError),
    #[error("{0}")]
    Projection(#[from] ProjectionError),
    #[error("gave up after {attempts} attempts: the stream kept changing under the command ({last})")]
    TooManyConflicts { attempts: usize, last: StoreError },
}

impl RunError {
    pub fn is_conflict(&self) -> bool {
        match self {
            RunError::Store(e) => e.is_conflict(),
            RunError::Projection(ProjectionError::Store(e)) => e.is_conflict(),
            _ => false,
        }
    }
}

/// Runs `body` in a transaction and commits what it did; retries the whole body from a fresh
/// transaction when it fails with an expected-version conflict. `E` is the handler's own error
/// type, which must be able to carry a [`RunError`].
pub async fn in_transaction<T, E>(
    store: &EventStore,
    mut body: impl AsyncFnMut(&mut StoreTx) -> Result<T, E>,
) -> Result<T, E>
where
    E: From<RunError> + AsConflict,
{
    let mut last = None;
    for _ in 0..MAX_ATTEMPTS {
        let mut tx = store.begin().await.map_err(|e| E::from(e.into()))?;
        match body(&mut tx).await {
            Ok(value) => {
                tx.commit().await.map_err(|e| E::from(e.into()))?;
                return Ok(value);
            }
            Err(e) => {
                let _ = tx.rollback().await;
                match e.into_conflict() {
                    Ok(conflict) => last = Some(conflict),
                    Err(other) => return Err(other),
                }
            }
        }
    }
    Err(E::from(RunError::TooManyConflicts {
        attempts: MAX_ATTEMPTS,
        last: last.unwrap_or(StoreError::EmptyAppend),
    }))
}

/// Lets [`in_transaction`] tell a retryable conflict from a final error.
pub trait AsConflict: Sized {
    /// `Ok(conflict)` when this error is an expected-version conflict, else `Err(self)`.
    fn into_conflict(self) -> Result<StoreError, Self>;
}

impl AsConflict for RunError {
    fn into_conflict(self) -> Result<StoreError, Self> {
        match self {
            RunError::Store(e) if e.is_conflict() => Ok(e),
            RunError::Projection(ProjectionError::Store(e)) if e.is_conflict() => Ok(e),
            other => Err(other),
        }
    }
}

/// Appends `events` to `stream` and applies them to `projections`, in `tx`. Returns the events
/// as recorded.
pub async fn append_and_project(
    tx: &mut StoreTx,
    projections: &[&dyn Projection],
    stream: &str,
    expected: events::store::ExpectedVersion,
    events: &[NewEvent],
) -> Result<Vec<RecordedEvent>, RunError> {
    let appended = tx.append(stream, expected, events).await?;
    let recorded = appended.recorded(stream, events);
    if !appended.already_appended {
        apply_all(projections, tx, &recorded).await?;
    }
    Ok(recorded)
}
