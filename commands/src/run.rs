//! The transaction boundary every handler goes through: begin, let the body load, decide, append
//! and project, commit; on an expected-version conflict start again from a fresh read.

use events::store::{EventStore, LogStore, LogTx, StoreError, StoreTx, StreamAppend};
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
    #[error(
        "gave up after {attempts} attempts: the stream kept changing under the command ({last})"
    )]
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

/// Runs a body in a transaction and commits what it did; retries the whole body from a fresh
/// transaction when it fails with an expected-version conflict. `$err` is the handler's error
/// type, which must implement `From<RunError>` and [`AsConflict`]:
///
/// ```ignore
/// transaction!(store, QuorumError, |tx| {
///     let state = load(tx).await?;
///     append_and_project(tx, &projections, stream, expected, &events).await?;
///     Ok(state)
/// })
/// ```
///
/// A macro rather than a function taking an async closure: the futures of async closures are not
/// `Send` today, and the gateway spawns handler futures on a multi-threaded runtime. `return`
/// inside the body leaves the body (the attempt), as in a closure.
#[macro_export]
macro_rules! transaction {
    ($store:expr, $err:ty, |$tx:ident| $body:block) => {{
        let mut attempt = 0usize;
        loop {
            attempt += 1;
            let mut owned_tx = match $crate::run::begin($store).await {
                Ok(t) => t,
                Err(e) => break Err(<$err>::from(e)),
            };
            let result: ::std::result::Result<_, $err> = async {
                let $tx: &mut ::events::store::StoreTx = &mut owned_tx;
                $body
            }
            .await;
            match result {
                Ok(value) => match $crate::run::commit(owned_tx).await {
                    Ok(()) => break Ok(value),
                    Err(e) => break Err(<$err>::from(e)),
                },
                Err(e) => {
                    $crate::run::rollback(owned_tx).await;
                    match $crate::run::AsConflict::into_conflict(e) {
                        Ok(_) if attempt < $crate::run::MAX_ATTEMPTS => continue,
                        Ok(last) => {
                            break Err(<$err>::from($crate::run::RunError::TooManyConflicts {
                                attempts: attempt,
                                last,
                            }))
                        }
                        Err(other) => break Err(other),
                    }
                }
            }
        }
    }};
}

/// Opens a transaction (for [`transaction!`]).
pub async fn begin(store: &EventStore) -> Result<StoreTx, RunError> {
    Ok(store.begin().await?)
}

/// Commits (for [`transaction!`]).
pub async fn commit(tx: StoreTx) -> Result<(), RunError> {
    Ok(tx.commit().await?)
}

/// Rolls back, ignoring errors: the connection is gone or the transaction is already over
/// (for [`transaction!`]).
pub async fn rollback(tx: StoreTx) {
    let _ = tx.rollback().await;
}

/// Lets [`transaction!`] tell a retryable conflict from a final error.
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

/// Appends to several streams in `tx` ([`LogTx::append_streams`]: one statement on Postgres)
/// and applies the new events to `projections` in log order. Returns the events as recorded,
/// in log order.
pub async fn append_streams_and_project(
    tx: &mut StoreTx,
    projections: &[&dyn Projection],
    appends: &[StreamAppend<'_>],
) -> Result<Vec<RecordedEvent>, RunError> {
    let appended = tx.append_streams(appends).await?;
    let mut recorded = Vec::new();
    for (a, done) in appends.iter().zip(&appended) {
        recorded.extend(done.recorded(a.stream, a.events));
    }
    recorded.sort_by_key(|e| e.position);
    if appended.iter().all(|a| !a.already_appended) {
        apply_all(projections, tx, &recorded).await?;
    } else {
        let retried: Vec<&str> = appends
            .iter()
            .zip(&appended)
            .filter(|(_, done)| done.already_appended)
            .map(|(a, _)| a.stream)
            .collect();
        let fresh: Vec<RecordedEvent> = recorded
            .iter()
            .filter(|e| !retried.contains(&e.stream_id.as_str()))
            .cloned()
            .collect();
        apply_all(projections, tx, &fresh).await?;
    }
    Ok(recorded)
}
