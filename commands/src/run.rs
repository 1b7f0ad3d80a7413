//! The transaction boundary every handler goes through: [`run`] a [`Command`] (begin, load,
//! decide, append and project, commit; on an expected-version conflict start again from a fresh
//! read). The few writers that decide nothing (the refusal counts' flush) use the same retrying
//! boundary as [`transaction!`].

use async_trait::async_trait;
use domain::decision::{Decision, Refused};
use events::store::{EventStore, LogStore, LogTx, StoreError, StoreTx, StreamAppend};
use events::{NewEvent, RecordedEvent};
use projections::{apply_all, Projection, ProjectionError};
use rand_core::CryptoRngCore;
use time::OffsetDateTime;

use crate::clock::Clock;

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

/// The time of one attempt, read once from the handler's clock: what the load, the decision
/// and the events see.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct At {
    /// Now.
    pub now: OffsetDateTime,
    /// Now, µs since the Unix epoch.
    pub now_us: i64,
}

impl At {
    /// The time `clock` reads now.
    pub fn of(clock: &dyn Clock) -> At {
        At::at_us(clock.now_us())
    }

    /// `now_us` µs since the Unix epoch.
    pub fn at_us(now_us: i64) -> At {
        At {
            now: OffsetDateTime::from_unix_timestamp_nanos(i128::from(now_us) * 1000)
                .unwrap_or(OffsetDateTime::UNIX_EPOCH),
            now_us,
        }
    }

    /// The decision time of the transaction `tx`: the database's (Postgres `now()`) when
    /// `clock` decides on it ([`crate::clock::DatabaseClock`]), else `clock`'s (a test's
    /// simulated clock; SQLite).
    pub async fn read(tx: &mut StoreTx, clock: &dyn Clock) -> Result<At, RunError> {
        if clock.decides_on_database_time() {
            if let Some(us) = tx.database_now_us().await? {
                return Ok(At::at_us(us));
            }
        }
        Ok(At::of(clock))
    }

    /// [`At::read`] by one statement outside a transaction, for a handler whose decision
    /// spans steps before its transaction (the join: its attestor's plan, then its verdict).
    pub async fn read_from(store: &EventStore, clock: &dyn Clock) -> Result<At, RunError> {
        if clock.decides_on_database_time() {
            if let Some(us) = store.database_now_us().await? {
                return Ok(At::at_us(us));
            }
        }
        Ok(At::of(clock))
    }
}

/// What a command's decision answers: the domain's [`Decision`], or a refusal (the handler's
/// error) with the events the log records all the same (committed before the refusal is
/// returned).
pub type Decided<C> = Result<
    Decision<<C as Command>::Event, <C as Command>::Outcome>,
    Refused<<C as Command>::Error, <C as Command>::Event>,
>;

/// One command of the control plane, as the runner ([`run`]) drives it: `load` the state in
/// the transaction, `decide` (pure: the domain's decider, given the time and entropy), `append`
/// the events and apply the inline projections, then `answer` (in the same transaction: a row
/// read back, a refusal counted), and commit.
#[async_trait]
pub trait Command: Sync {
    /// What the decision reads.
    type State: Send;
    /// What it appends.
    type Event: Send + Sync;
    /// What it decides to tell the caller.
    type Outcome: Send;
    /// What the handler returns.
    type Answer: Send;
    /// The handler's error; a refusal is one of its values.
    type Error: From<RunError> + AsConflict + Send;

    /// Loads the state, in the transaction.
    async fn load(&self, tx: &mut StoreTx, at: &At) -> Result<Self::State, Self::Error>;

    /// Decides: a pure call of the domain's decider.
    fn decide(&self, state: &Self::State, at: &At, rng: &mut dyn CryptoRngCore) -> Decided<Self>;

    /// Appends the decided events (at the versions `state` was read at) and applies the
    /// inline projections. Called only with events.
    async fn append(
        &self,
        tx: &mut StoreTx,
        state: &Self::State,
        events: Vec<Self::Event>,
        at: &At,
    ) -> Result<(), Self::Error>;

    /// What the handler answers, in the transaction after the append.
    async fn answer(
        &self,
        tx: &mut StoreTx,
        state: Self::State,
        outcome: Self::Outcome,
        at: &At,
    ) -> Result<Self::Answer, Self::Error>;
}

/// A decider's answer as a command's: its refusal made the handler's error (with no events).
pub fn decided<E, O, R, Err: From<R>>(
    result: Result<Decision<E, O>, R>,
) -> Result<Decision<E, O>, Refused<Err, E>> {
    result.map_err(|r| Refused::from(Err::from(r)))
}

/// What one attempt ended with: an answer to commit, or a refusal whose events are to commit.
enum Attempt<A, E> {
    Answer(A),
    Refused(E),
}

async fn attempt<C: Command + ?Sized>(
    tx: &mut StoreTx,
    clock: &dyn Clock,
    command: &C,
) -> Result<Attempt<C::Answer, C::Error>, C::Error> {
    let at = At::read(tx, clock).await?;
    let state = command.load(tx, &at).await?;
    match command.decide(&state, &at, &mut rand_core::OsRng) {
        Ok(Decision { events, outcome }) => {
            if !events.is_empty() {
                command.append(tx, &state, events, &at).await?;
            }
            Ok(Attempt::Answer(
                command.answer(tx, state, outcome, &at).await?,
            ))
        }
        Err(Refused { reason, events }) if !events.is_empty() => {
            command.append(tx, &state, events, &at).await?;
            Ok(Attempt::Refused(reason))
        }
        Err(Refused { reason, .. }) => Err(reason),
    }
}

/// Runs `command` in one transaction on `store` at `clock`'s time: load, decide, append and
/// project, answer, commit. An expected-version conflict starts it again from a fresh read (at
/// most [`MAX_ATTEMPTS`] times); a refusal rolls back, unless it carries events, which are
/// committed before the refusal is returned.
pub async fn run<C: Command + ?Sized>(
    store: &EventStore,
    clock: &dyn Clock,
    command: &C,
) -> Result<C::Answer, C::Error> {
    let mut tries = 0usize;
    loop {
        tries += 1;
        let mut tx = begin(store).await?;
        match attempt(&mut tx, clock, command).await {
            Ok(done) => {
                commit(tx).await?;
                return match done {
                    Attempt::Answer(answer) => Ok(answer),
                    Attempt::Refused(reason) => Err(reason),
                };
            }
            Err(e) => {
                rollback(tx).await;
                match e.into_conflict() {
                    Ok(_) if tries < MAX_ATTEMPTS => continue,
                    Ok(last) => {
                        return Err(C::Error::from(RunError::TooManyConflicts {
                            attempts: tries,
                            last,
                        }))
                    }
                    Err(other) => return Err(other),
                }
            }
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
