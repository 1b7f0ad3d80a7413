//! [`EventStore`]: the store the rest of the workspace holds, one of the two backends chosen by
//! URL, and its transaction [`StoreTx`].

use super::contract::{Appended, Backend, LogStore, LogTx, StreamAppend};
use super::cursor::TailCursor;
use super::deferred::DeferredWrite;
use super::error::{Result, StoreError};
use super::postgres::{PgLogStore, PgStoreTx};
use super::recorder::{RecordedWrite, WriteRecorder};
use super::sqlite::{SqliteLogStore, SqliteStoreTx};
use super::tailer::{Tailer, TailerOptions};
use super::value::SqlValue;
use super::version::ExpectedVersion;
use crate::actor::Actor;
use crate::envelope::{NewEvent, RecordedEvent};

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
