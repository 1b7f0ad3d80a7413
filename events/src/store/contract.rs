//! The contract both log-store backends keep ([`LogStore`], [`LogTx`]) and what they share:
//! the types of an append, the defaults of the trait's methods, and the check that turns a row's
//! columns into a [`RecordedEvent`].

use std::future::Future;

use super::cursor::TailCursor;
use super::deferred::DeferredWrite;
use super::error::{Result, StoreError};
use super::insert::insert_statements;
use super::value::SqlValue;
use super::version::ExpectedVersion;
use crate::actor::Actor;
use crate::envelope::{NewEvent, RecordedEvent};

/// One stream's part of an append to several streams ([`LogTx::append_streams`]).
#[derive(Clone, Copy, Debug)]
pub struct StreamAppend<'a> {
    pub stream: &'a str,
    pub expected: ExpectedVersion,
    pub events: &'a [NewEvent],
}

/// The outcome of an append.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Appended {
    /// The positions given to the events, in the order they were passed.
    pub positions: Vec<i64>,
    /// The stream's version after the append.
    pub stream_version: u64,
    /// True when every event id was already in the log (a retried append): nothing was written
    /// and `positions` are the ones the first append got.
    pub already_appended: bool,
    /// The actor the events were stamped with (the store's, [`super::EventStore::acting_as`]); for a
    /// retried append, the actor of the retry.
    pub actor: Option<Actor>,
}

impl Appended {
    /// The appended events as the log now holds them (positions and versions filled in), for
    /// applying inline projections in the same transaction: projections always see
    /// [`RecordedEvent`]s, whether fed by a command or by a rebuild from the log. `tx_id` is left
    /// empty: it is only known to readers after commit.
    pub fn recorded(&self, stream: &str, events: &[NewEvent]) -> Vec<RecordedEvent> {
        let first_version = self.stream_version as i64 - events.len() as i64 + 1;
        events
            .iter()
            .zip(&self.positions)
            .enumerate()
            .map(|(i, (e, &position))| RecordedEvent {
                position,
                stream_id: stream.to_string(),
                stream_version: first_version + i as i64,
                event_id: e.event_id,
                event_type: e.event_type.clone(),
                schema_version: e.schema_version,
                tenant_id: e.tenant_id.clone(),
                occurred_at_us: e.occurred_at_us,
                payload: e.payload().to_vec(),
                payload_sha256: *e.payload_sha256(),
                tx_id: None,
                actor: self.actor.clone(),
            })
            .collect()
    }
}

/// Which database a store runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Postgres,
    Sqlite,
}

/// A transaction on a log store: appends and the caller's projection writes commit together.
pub trait LogTx: Send {
    /// Appends `events` to `stream` if the stream is where `expected` says.
    fn append(
        &mut self,
        stream: &str,
        expected: ExpectedVersion,
        events: &[NewEvent],
    ) -> impl Future<Output = Result<Appended>> + Send;

    /// Appends to several streams, each at its own expected version, and returns one
    /// [`Appended`] per stream in the order given. On an error the caller rolls the transaction
    /// back: some of the streams may have been appended to. This default appends one stream
    /// after the other; Postgres appends them all in one statement (one round trip, all or
    /// nothing) when no stream expects [`ExpectedVersion::Any`].
    fn append_streams(
        &mut self,
        appends: &[StreamAppend<'_>],
    ) -> impl Future<Output = Result<Vec<Appended>>> + Send {
        append_one_by_one(self, appends)
    }

    /// Runs one SQL statement with `$1`-style parameters (both backends accept them) inside this
    /// transaction; how projections write their tables. Returns rows affected.
    fn execute(&mut self, sql: &str, args: &[SqlValue])
        -> impl Future<Output = Result<u64>> + Send;

    /// Queues a projection write to be sent with the other queued ones (see [`DeferredWrite`]
    /// for what it may be): on Postgres at the latest before this transaction's next statement
    /// of another kind, its commit, or [`LogTx::flush`]; its errors, and a row count other than
    /// the one it expects, surface there. SQLite runs it at once.
    fn defer(&mut self, write: DeferredWrite) -> impl Future<Output = Result<()>> + Send {
        run_deferred_now(self, write)
    }

    /// Sends the queued writes (one statement on Postgres). A no-op when none are queued.
    fn flush(&mut self) -> impl Future<Output = Result<()>> + Send {
        std::future::ready(Ok(()))
    }

    /// Inserts `rows` (values in the order of `columns`) into `table` inside this transaction,
    /// for bulk writes such as rebuilds. Postgres streams many rows with one binary `COPY`
    /// (`Int` values must then go to `BIGINT` columns, as every integer column of this schema
    /// does) and queues a few as a deferred write ([`LogTx::defer`]: its errors surface when
    /// the queue is sent); SQLite runs multi-row `INSERT`s. Table and column names come from
    /// code, never from input. Returns the rows inserted (or queued).
    fn insert_rows(
        &mut self,
        table: &str,
        columns: &[&str],
        rows: Vec<Vec<SqlValue>>,
    ) -> impl Future<Output = Result<u64>> + Send {
        async move { insert_rows_by_statements(self, table, columns, &rows).await }
    }

    /// Commits and wakes the tailers of this process.
    fn commit(self) -> impl Future<Output = Result<()>> + Send;

    /// Rolls back (dropping the transaction does too).
    fn rollback(self) -> impl Future<Output = Result<()>> + Send;
}

/// Appends stream after stream: [`LogTx::append_streams`]'s default, and what Postgres does when
/// the streams cannot go in one statement.
pub(crate) async fn append_one_by_one<T: LogTx + ?Sized>(
    tx: &mut T,
    appends: &[StreamAppend<'_>],
) -> Result<Vec<Appended>> {
    let mut out = Vec::with_capacity(appends.len());
    for a in appends {
        out.push(tx.append(a.stream, a.expected, a.events).await?);
    }
    Ok(out)
}

/// [`LogTx::defer`]'s default: the write runs at once and its row count is checked.
pub(crate) async fn run_deferred_now<T: LogTx + ?Sized>(
    tx: &mut T,
    write: DeferredWrite,
) -> Result<()> {
    let changed = tx.execute(&write.sql, &write.args).await?;
    write.check(changed)
}

/// The operations every log-store backend provides.
pub trait LogStore: Clone + Send + Sync + 'static {
    type Tx: LogTx;

    fn backend(&self) -> Backend;

    /// Applies this backend's migrations (idempotent).
    fn migrate(&self) -> impl Future<Output = Result<()>> + Send;

    /// Opens a write transaction.
    fn begin(&self) -> impl Future<Output = Result<Self::Tx>> + Send;

    /// Every event of one stream, in version order.
    fn read_stream(&self, stream: &str) -> impl Future<Output = Result<Vec<RecordedEvent>>> + Send;

    /// Up to `limit` events with a position above `after`, in position order. Paging with this
    /// reads a log in bounded memory; see [`super::AllEvents`] for a consistent pass over everything.
    fn read_batch(
        &self,
        after: i64,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<RecordedEvent>>> + Send;

    /// The highest position committed so far (0 for an empty log).
    fn head_position(&self) -> impl Future<Output = Result<i64>> + Send;

    /// A cursor at the start of the log: a tailer from it delivers every event.
    fn start_cursor(&self) -> TailCursor;

    /// A cursor at "now": a tailer from it delivers every event committed after this call.
    fn now_cursor(&self) -> impl Future<Output = Result<TailCursor>> + Send;

    /// One tail step: events that became visible past `cursor`, at most `limit`, and the cursor
    /// to resume from. Never skips a late commit, never waits.
    fn tail_step(
        &self,
        cursor: &TailCursor,
        limit: u32,
    ) -> impl Future<Output = Result<(Vec<RecordedEvent>, TailCursor)>> + Send;

    /// Resolves when a transaction of this process committed since `seen`; the tailer also polls,
    /// for commits from other processes.
    fn commit_signal(&self) -> tokio::sync::watch::Receiver<u64>;
}

/// [`LogTx::insert_rows`] as multi-row `INSERT` statements.
pub(crate) async fn insert_rows_by_statements<T: LogTx + ?Sized>(
    tx: &mut T,
    table: &str,
    columns: &[&str],
    rows: &[Vec<SqlValue>],
) -> Result<u64> {
    let mut inserted = 0;
    for (sql, args) in insert_statements(table, columns, rows) {
        inserted += tx.execute(&sql, &args).await?;
    }
    Ok(inserted)
}

/// Builds a [`RecordedEvent`] from the column values, checking fixed-size fields.
#[allow(clippy::too_many_arguments)]
pub(crate) fn recorded(
    position: i64,
    stream_id: String,
    stream_version: i64,
    event_id: Vec<u8>,
    event_type: String,
    schema_version: i64,
    tenant_id: String,
    occurred_at_us: i64,
    payload: Vec<u8>,
    payload_sha256: Vec<u8>,
    tx_id: Option<u64>,
    actor: (Option<String>, Option<String>),
) -> Result<RecordedEvent> {
    let event_id: [u8; 16] = event_id.try_into().map_err(|_| StoreError::Corrupt {
        position,
        why: "event_id is not 16 bytes".into(),
    })?;
    let payload_sha256: [u8; 32] = payload_sha256.try_into().map_err(|_| StoreError::Corrupt {
        position,
        why: "payload_sha256 is not 32 bytes".into(),
    })?;
    let schema_version = u32::try_from(schema_version).map_err(|_| StoreError::Corrupt {
        position,
        why: format!("schema version {schema_version} out of range"),
    })?;
    let actor = match actor {
        (None, None) => None,
        (Some(id), Some(role)) => Some(Actor::new(id, role).map_err(|e| StoreError::Corrupt {
            position,
            why: format!("actor: {e}"),
        })?),
        (id, _) => {
            return Err(StoreError::Corrupt {
                position,
                why: format!(
                    "actor_{} is set without actor_{}",
                    if id.is_some() { "id" } else { "role" },
                    if id.is_some() { "role" } else { "id" }
                ),
            })
        }
    };
    Ok(RecordedEvent {
        position,
        stream_id,
        stream_version,
        event_id,
        event_type,
        schema_version,
        tenant_id,
        occurred_at_us,
        payload,
        payload_sha256,
        tx_id,
        actor,
    })
}
