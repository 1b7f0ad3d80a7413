//! The append-only log store.
//!
//! [`LogStore`] is the contract both backends keep: append to a stream with an expected version,
//! atomically with the caller's projection writes in the same transaction; idempotent by event
//! id; read one stream; read everything from a position in batches; tail. [`postgres`] and
//! [`sqlite`] implement it; [`EventStore`] picks one from a URL and is what the rest of the
//! workspace holds. The exact tailer lives in [`tailer`].

mod deferred;
mod error;
pub mod hub;
mod insert;
pub mod leader;
pub mod postgres;
mod query;
pub mod recorder;
pub mod sqlite;
mod status;
pub mod tailer;
#[cfg(feature = "testkit")]
pub mod testkit;
#[cfg(feature = "testkit")]
pub mod testkit_tamper;
mod value;

use std::future::Future;

use crate::actor::Actor;
use crate::envelope::{NewEvent, RecordedEvent};

pub use deferred::{DeferredWrite, ExpectRows};
pub(crate) use error::map_append_error;
pub use error::{Result, StoreError};
pub use hub::{HubOptions, HubReceiver, LogHub};
pub use insert::push_groups;
pub(crate) use insert::{insert_rows_by_statements, insert_statements};
pub use leader::{LeaderError, LeaderLock, Leading};
pub use postgres::{PgLogStore, PgStoreTx};
pub use query::BothBackendsRow;
pub use recorder::{RecordedWrite, WriteRecorder};
pub use sqlite::{SqliteLogStore, SqliteStoreTx};
pub use status::StoreStatus;
pub use tailer::{TailCursor, Tailer, TailerOptions};
pub use value::SqlValue;

/// What the caller believes about the stream it appends to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpectedVersion {
    /// Append whatever the stream holds.
    Any,
    /// The stream must not exist yet.
    NoStream,
    /// The stream must hold exactly this many events (its last version).
    Exact(u64),
}

impl std::fmt::Display for ExpectedVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExpectedVersion::Any => f.write_str("any"),
            ExpectedVersion::NoStream => f.write_str("no stream"),
            ExpectedVersion::Exact(v) => write!(f, "version {v}"),
        }
    }
}

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
    /// The actor the events were stamped with (the store's, [`EventStore::acting_as`]); for a
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
    /// reads a log in bounded memory; see [`AllEvents`] for a consistent pass over everything.
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

/// The store the rest of the workspace holds: one of the two backends, chosen by URL.
#[derive(Clone, Debug)]
pub enum EventStore {
    Postgres(PgLogStore),
    Sqlite(SqliteLogStore),
}

/// A transaction on an [`EventStore`], or a stand-in that records projection writes for one
/// ([`WriteRecorder`]: a rebuild applies the next page into it while the last page is stored).
pub enum StoreTx {
    Postgres(PgStoreTx),
    Sqlite(SqliteStoreTx),
    Recorder(WriteRecorder),
}

/// The pool size a Postgres store opens with unless told otherwise ([`EventStore::open_with`]).
pub const DEFAULT_POOL_SIZE: u32 = 32;

fn is_postgres_url(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

impl EventStore {
    /// Connects to `postgres://...` or `sqlite://PATH` (the file is created, in WAL mode).
    /// Does not migrate: call [`LogStore::migrate`] or use [`EventStore::open`].
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with_pool(url, DEFAULT_POOL_SIZE).await
    }

    /// [`EventStore::connect`] with at most `pool_size` Postgres connections (SQLite has its
    /// own fixed pool: one writer and its readers).
    pub async fn connect_with_pool(url: &str, pool_size: u32) -> Result<Self> {
        if is_postgres_url(url) {
            Ok(EventStore::Postgres(
                PgLogStore::with_pool_size(url, pool_size.max(1)).await?,
            ))
        } else if url.starts_with("sqlite:") {
            Ok(EventStore::Sqlite(SqliteLogStore::connect(url).await?))
        } else {
            Err(StoreError::UnsupportedUrl(url.to_string()))
        }
    }

    /// Connects and applies the migrations.
    pub async fn open(url: &str) -> Result<Self> {
        Self::open_with_pool(url, DEFAULT_POOL_SIZE).await
    }

    /// [`EventStore::open`] with at most `pool_size` Postgres connections.
    pub async fn open_with_pool(url: &str, pool_size: u32) -> Result<Self> {
        let store = Self::connect_with_pool(url, pool_size).await?;
        store.migrate().await?;
        Ok(store)
    }

    /// A store reading the Postgres streaming replica at `url` for this (primary) store, with
    /// at most `pool_size` connections: reads and tailers go to the replica, the commit signal
    /// is this store's ([`PgLogStore::replica_of`]). Not migrated (a standby is read-only; the
    /// primary's migrations reach it by replication).
    pub async fn replica(&self, url: &str, pool_size: u32) -> Result<Self> {
        match self {
            EventStore::Postgres(primary) if is_postgres_url(url) => Ok(EventStore::Postgres(
                PgLogStore::replica_of(primary, url, pool_size.max(1)).await?,
            )),
            _ => Err(StoreError::ReplicaNeedsPostgres(url.to_string())),
        }
    }

    /// The Postgres store, for what only Postgres has (WAL positions, the listener's state).
    pub fn as_postgres(&self) -> Option<&PgLogStore> {
        match self {
            EventStore::Postgres(s) => Some(s),
            EventStore::Sqlite(_) => None,
        }
    }

    /// The same store (the same pool), whose transactions stamp every event they append with
    /// `actor` ([`crate::Actor`]); the store as it was keeps appending events without one.
    ///
    /// Both backends write it into the event's `actor_id` and `actor_role` columns, and every
    /// read gives it back ([`RecordedEvent::actor`]). Acting as another actor replaces the
    /// first: a store stamps one actor or none.
    pub fn acting_as(&self, actor: Actor) -> EventStore {
        match self {
            EventStore::Postgres(s) => EventStore::Postgres(s.acting_as(Some(actor))),
            EventStore::Sqlite(s) => EventStore::Sqlite(s.acting_as(Some(actor))),
        }
    }

    /// The actor this store stamps on what it appends (`None` for the plain store).
    pub fn actor(&self) -> Option<&Actor> {
        match self {
            EventStore::Postgres(s) => s.actor(),
            EventStore::Sqlite(s) => s.actor(),
        }
    }

    /// Appends in a transaction of its own (no projection writes).
    pub async fn append(
        &self,
        stream: &str,
        expected: ExpectedVersion,
        events: &[NewEvent],
    ) -> Result<Appended> {
        let mut tx = self.begin().await?;
        let appended = tx.append(stream, expected, events).await?;
        tx.commit().await?;
        Ok(appended)
    }

    /// Pages through every event from position `after` on, `batch` at a time.
    pub fn read_all(&self, after: i64, batch: u32) -> AllEvents {
        AllEvents {
            store: self.clone(),
            after,
            batch: batch.max(1),
            done: false,
        }
    }

    /// A tailer from `cursor`.
    pub fn tailer(&self, cursor: TailCursor, options: TailerOptions) -> Tailer<EventStore> {
        Tailer::new(self.clone(), cursor, options)
    }
}

macro_rules! dispatch {
    ($self:expr, $s:ident => $body:expr) => {
        match $self {
            EventStore::Postgres($s) => $body,
            EventStore::Sqlite($s) => $body,
        }
    };
}

macro_rules! dispatch_tx {
    ($self:expr, $s:ident => $body:expr) => {
        match $self {
            StoreTx::Postgres($s) => $body,
            StoreTx::Sqlite($s) => $body,
            StoreTx::Recorder($s) => $body,
        }
    };
}

impl LogStore for EventStore {
    type Tx = StoreTx;

    fn backend(&self) -> Backend {
        dispatch!(self, s => s.backend())
    }

    async fn migrate(&self) -> Result<()> {
        dispatch!(self, s => s.migrate().await)
    }

    async fn begin(&self) -> Result<StoreTx> {
        match self {
            EventStore::Postgres(s) => Ok(StoreTx::Postgres(s.begin().await?)),
            EventStore::Sqlite(s) => Ok(StoreTx::Sqlite(s.begin().await?)),
        }
    }

    async fn read_stream(&self, stream: &str) -> Result<Vec<RecordedEvent>> {
        dispatch!(self, s => s.read_stream(stream).await)
    }

    async fn read_batch(&self, after: i64, limit: u32) -> Result<Vec<RecordedEvent>> {
        dispatch!(self, s => s.read_batch(after, limit).await)
    }

    async fn head_position(&self) -> Result<i64> {
        dispatch!(self, s => s.head_position().await)
    }

    fn start_cursor(&self) -> TailCursor {
        dispatch!(self, s => s.start_cursor())
    }

    async fn now_cursor(&self) -> Result<TailCursor> {
        dispatch!(self, s => s.now_cursor().await)
    }

    async fn tail_step(
        &self,
        cursor: &TailCursor,
        limit: u32,
    ) -> Result<(Vec<RecordedEvent>, TailCursor)> {
        dispatch!(self, s => s.tail_step(cursor, limit).await)
    }

    fn commit_signal(&self) -> tokio::sync::watch::Receiver<u64> {
        dispatch!(self, s => s.commit_signal())
    }
}

impl StoreTx {
    pub fn backend(&self) -> Backend {
        match self {
            StoreTx::Postgres(_) => Backend::Postgres,
            StoreTx::Sqlite(_) => Backend::Sqlite,
            StoreTx::Recorder(r) => r.backend(),
        }
    }

    /// The writes a [`StoreTx::Recorder`] recorded since the last call (nothing for a real
    /// transaction, which makes its writes at once).
    pub fn take_recorded(&mut self) -> Vec<RecordedWrite> {
        match self {
            StoreTx::Recorder(r) => r.take(),
            StoreTx::Postgres(_) | StoreTx::Sqlite(_) => Vec::new(),
        }
    }

    /// The Postgres connection of this transaction, for backend-specific projection SQL.
    pub fn postgres(&mut self) -> Option<&mut sqlx::PgConnection> {
        match self {
            StoreTx::Postgres(t) => Some(t.connection()),
            StoreTx::Sqlite(_) | StoreTx::Recorder(_) => None,
        }
    }

    /// The SQLite connection of this transaction, for backend-specific projection SQL.
    pub fn sqlite(&mut self) -> Option<&mut sqlx::SqliteConnection> {
        match self {
            StoreTx::Sqlite(t) => Some(t.connection()),
            StoreTx::Postgres(_) | StoreTx::Recorder(_) => None,
        }
    }
}

impl LogTx for StoreTx {
    async fn append(
        &mut self,
        stream: &str,
        expected: ExpectedVersion,
        events: &[NewEvent],
    ) -> Result<Appended> {
        dispatch_tx!(self, t => t.append(stream, expected, events).await)
    }

    async fn append_streams(&mut self, appends: &[StreamAppend<'_>]) -> Result<Vec<Appended>> {
        dispatch_tx!(self, t => t.append_streams(appends).await)
    }

    async fn execute(&mut self, sql: &str, args: &[SqlValue]) -> Result<u64> {
        dispatch_tx!(self, t => t.execute(sql, args).await)
    }

    async fn defer(&mut self, write: DeferredWrite) -> Result<()> {
        dispatch_tx!(self, t => t.defer(write).await)
    }

    async fn flush(&mut self) -> Result<()> {
        dispatch_tx!(self, t => t.flush().await)
    }

    async fn insert_rows(
        &mut self,
        table: &str,
        columns: &[&str],
        rows: Vec<Vec<SqlValue>>,
    ) -> Result<u64> {
        dispatch_tx!(self, t => t.insert_rows(table, columns, rows).await)
    }

    async fn commit(self) -> Result<()> {
        dispatch_tx!(self, t => t.commit().await)
    }

    async fn rollback(self) -> Result<()> {
        dispatch_tx!(self, t => t.rollback().await)
    }
}

/// A pass over every event from a position on, one batch in memory at a time.
pub struct AllEvents {
    store: EventStore,
    after: i64,
    batch: u32,
    done: bool,
}

impl AllEvents {
    /// The next batch, or `None` once the log is read to its end.
    pub async fn next_batch(&mut self) -> Result<Option<Vec<RecordedEvent>>> {
        if self.done {
            return Ok(None);
        }
        let events = self.store.read_batch(self.after, self.batch).await?;
        if (events.len() as u64) < u64::from(self.batch) {
            self.done = true;
        }
        match events.last() {
            Some(last) => {
                self.after = last.position;
                Ok(Some(events))
            }
            None => Ok(None),
        }
    }

    /// The position of the last event handed out.
    pub fn position(&self) -> i64 {
        self.after
    }
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
