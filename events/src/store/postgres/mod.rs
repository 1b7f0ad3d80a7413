//! The Postgres log store.
//!
//! An append is one statement: it inserts the events at the versions the caller expects, guarded
//! so that a stream behind that expectation or an already-appended event id inserts nothing.
//! Each guard is left out where it cannot matter: the version check for a version this store has
//! seen committed ([`known_versions`]), and the event-id check for one event appended first in
//! its transaction (a retry then fails on the unique key, and nothing having run yet, the
//! transaction is begun again and the append made with the check). The
//! unique `(stream_id, stream_version)` key orders appends to one stream, and only to that
//! stream: the loser of a race waits for the winner's commit and gets a typed conflict (its
//! transaction is then aborted, and the command layer retries from a fresh read). `Any` appends
//! first take a per-stream advisory lock, so that they never race each other. Positions come
//! from an identity column at insert; each row also carries its writing transaction's id
//! (`xid8`), which is what the tailer follows (see [`super::tailer`]).

mod copy;
mod errors;
mod known_versions;
mod multi_append;
mod probe;
mod replica_snapshot;
mod rows;
mod statements;
mod tx;
pub mod wake;

use std::str::FromStr;
use std::sync::Arc;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgPool, Row};
use tokio::sync::watch;
use wake::CommitWake;

use super::cursor::TailCursor;
use super::deferred::DeferredQueue;
use super::{
    append_one_by_one, map_append_error, Appended, Backend, DeferredWrite, ExpectedVersion,
    LogStore, LogTx, Result, SqlValue, StoreError, StreamAppend,
};
use crate::actor::Actor;
use crate::envelope::{NewEvent, RecordedEvent};
use errors::{collided_key, is_dead_connection, is_stream_version_race, is_unique_violation};
use known_versions::KnownVersions;
use probe::probe;
pub use probe::CONNECT_TIMEOUT;
pub(crate) use rows::already_appended;
use rows::row_to_event;
use statements::{
    append_sql, bind_events, tail_sql, version_param, AppendShape, Base, EventArrays, TailPage,
    ANY_APPEND_LOCK, APPEND_COLUMNS, EVENT_COLUMNS,
};
pub use tx::PgStoreTx;
use tx::{stream_version, CONFLICT_READ_WAIT};

/// A snapshot before every transaction: a tailer from it reads the whole log.
pub(crate) const ORIGIN_SNAPSHOT: &str = "1:1:";

/// The Postgres backend.
#[derive(Clone, Debug)]
pub struct PgLogStore {
    pool: PgPool,
    /// The commit signal, shared with a replica store reading for this one.
    wake: Arc<CommitWake>,
    /// This store reads a streaming replica (writes go to the primary's store).
    replica: bool,
    known: Arc<KnownVersions>,
    /// Stamped on every event this store's transactions append ([`PgLogStore::acting_as`]).
    actor: Option<Actor>,
}

/// How long a command waits for a pooled connection: past it, the store error is returned (the
/// gateway answers UNAVAILABLE). Long enough for a burst that holds every connection, short
/// enough that an agent's call (30 s) gets the answer rather than its own timeout.
pub const POOL_ACQUIRE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

impl PgLogStore {
    /// Connects with a pool sized for concurrent commands (`max_connections` in the URL's
    /// `pool_max` is not standard, so the size is a parameter of [`PgLogStore::with_pool_size`]).
    pub async fn connect(url: &str) -> Result<Self> {
        Self::with_pool_size(url, 32).await
    }

    pub async fn with_pool_size(url: &str, max_connections: u32) -> Result<Self> {
        let pool = Self::open_pool(url, max_connections).await?;
        Ok(Self::from_pool(pool))
    }

    /// A store reading the streaming replica at `url` for `primary`: its reads (and tailers)
    /// go to the replica, its commit signal is the primary's (a hot standby cannot `LISTEN`).
    /// It is for reading: a transaction begun on it fails on the standby's first write.
    pub async fn replica_of(primary: &PgLogStore, url: &str, max_connections: u32) -> Result<Self> {
        let pool = Self::open_pool(url, max_connections).await?;
        Ok(PgLogStore {
            pool,
            wake: primary.wake.clone(),
            replica: true,
            known: Arc::default(),
            actor: None,
        })
    }

    async fn open_pool(url: &str, max_connections: u32) -> Result<PgPool> {
        let options = PgConnectOptions::from_str(url)?.application_name("bc-events");
        probe(&options).await?;
        // No ping when a connection is handed out: that is a round trip per transaction (about
        // a tenth of a join's). A connection that died while idle fails at its first statement
        // instead: `begin` replaces it (see there), and the readers (tailers, the gateway's
        // feed) already retry their steps.
        let pool = PgPoolOptions::new()
            .max_connections(max_connections)
            .test_before_acquire(false)
            // While Postgres is down a command fails within this (UNAVAILABLE to an agent)
            // instead of after sqlx's default 30 s, which is bcd's whole call timeout.
            .acquire_timeout(POOL_ACQUIRE_TIMEOUT)
            .connect_with(options)
            .await?;
        Ok(pool)
    }

    pub fn from_pool(pool: PgPool) -> Self {
        let options = (*pool.connect_options()).clone();
        PgLogStore {
            pool,
            wake: CommitWake::new(options),
            replica: false,
            known: Arc::default(),
            actor: None,
        }
    }

    /// The commit signal's state: whether other processes' commits reach it, what WAL position
    /// they were notified at.
    pub fn wake(&self) -> &CommitWake {
        &self.wake
    }

    /// Whether this store reads a streaming replica ([`PgLogStore::replica_of`]).
    pub fn is_replica(&self) -> bool {
        self.replica
    }

    /// The WAL position this server has replayed (`None` on a primary, which replays nothing).
    pub async fn replay_lsn(&self) -> Result<Option<u64>> {
        let text: Option<String> = sqlx::query_scalar("SELECT pg_last_wal_replay_lsn()::text")
            .fetch_one(&self.pool)
            .await?;
        Ok(text.as_deref().and_then(wake::parse_lsn))
    }

    /// The WAL position this server (a primary) has flushed: what a replica must replay to have
    /// every commit made so far.
    pub async fn wal_flush_lsn(&self) -> Result<u64> {
        let text: String = sqlx::query_scalar("SELECT pg_current_wal_flush_lsn()::text")
            .fetch_one(&self.pool)
            .await?;
        wake::parse_lsn(&text).ok_or(StoreError::BadLsn(text))
    }

    /// The snapshot a tail step compares with: `pg_current_snapshot()`, rebuilt on a standby,
    /// whose own leaves out the transactions in progress (`replica_snapshot`).
    async fn tail_snapshot(&self) -> Result<String> {
        if !self.replica {
            let snapshot: String = sqlx::query_scalar("SELECT pg_current_snapshot()::text")
                .fetch_one(&self.pool)
                .await?;
            return Ok(snapshot);
        }
        let (xmin, xmax, visible): (String, String, Vec<String>) =
            sqlx::query_as(replica_snapshot::SNAPSHOT_SQL)
                .fetch_one(&self.pool)
                .await?;
        replica_snapshot::rebuild(&xmin, &xmax, &visible)
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The same store (pool, commit signal, known versions) stamping `actor` on what its
    /// transactions append.
    pub fn acting_as(&self, actor: Option<Actor>) -> Self {
        PgLogStore {
            actor,
            ..self.clone()
        }
    }

    /// The actor this store stamps, if any.
    pub fn actor(&self) -> Option<&Actor> {
        self.actor.as_ref()
    }
}

impl LogStore for PgLogStore {
    type Tx = PgStoreTx;

    fn backend(&self) -> Backend {
        Backend::Postgres
    }

    async fn migrate(&self) -> Result<()> {
        migrations::POSTGRES.run(&self.pool).await?;
        Ok(())
    }

    async fn begin(&self) -> Result<PgStoreTx> {
        // The pool does not test connections before handing them out, so BEGIN is where a
        // connection that died while idle (a Postgres restart, an idle-session timeout, a
        // terminated backend) shows: it is dropped and the next one tried. Every idle
        // connection may be dead after a restart, hence one more try than the pool holds;
        // a fresh connection that fails is a real error.
        let mut tries = self.pool.size() + 1;
        let tx = loop {
            match self.pool.begin().await {
                Ok(tx) => break tx,
                Err(e) if tries > 1 && is_dead_connection(&e) => tries -= 1,
                Err(e) => return Err(e.into()),
            }
        };
        Ok(PgStoreTx {
            tx,
            deferred: DeferredQueue::default(),
            pool: self.pool.clone(),
            wake: self.wake.clone(),
            known: self.known.clone(),
            appended: Vec::new(),
            fresh: true,
            actor: self.actor.clone(),
        })
    }

    async fn read_stream(&self, stream: &str) -> Result<Vec<RecordedEvent>> {
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM events WHERE stream_id = $1 ORDER BY stream_version"
        );
        let rows = sqlx::query(&sql).bind(stream).fetch_all(&self.pool).await?;
        let events: Vec<RecordedEvent> = rows.iter().map(row_to_event).collect::<Result<_>>()?;
        // Read outside any transaction: committed, so known for good.
        if let Some(last) = events.last() {
            self.known
                .record(stream, u64::try_from(last.stream_version).unwrap_or(0));
        }
        Ok(events)
    }

    async fn read_batch(&self, after: i64, limit: u32) -> Result<Vec<RecordedEvent>> {
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM events WHERE position > $1 ORDER BY position LIMIT $2"
        );
        let rows = sqlx::query(&sql)
            .bind(after)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(row_to_event).collect()
    }

    async fn head_position(&self) -> Result<i64> {
        let head: Option<i64> = sqlx::query_scalar("SELECT max(position) FROM events")
            .fetch_one(&self.pool)
            .await?;
        Ok(head.unwrap_or(0))
    }

    fn start_cursor(&self) -> TailCursor {
        TailCursor::Postgres {
            floor: ORIGIN_SNAPSHOT.to_string(),
            ceiling: None,
            after: (0, 0),
        }
    }

    async fn now_cursor(&self) -> Result<TailCursor> {
        Ok(TailCursor::Postgres {
            floor: self.tail_snapshot().await?,
            ceiling: None,
            after: (0, 0),
        })
    }

    async fn tail_step(
        &self,
        cursor: &TailCursor,
        limit: u32,
    ) -> Result<(Vec<RecordedEvent>, TailCursor)> {
        let TailCursor::Postgres {
            floor,
            ceiling,
            after,
        } = cursor
        else {
            return Err(StoreError::CursorBackend {
                cursor: cursor.backend_name(),
                store: "postgres",
            });
        };
        let ceiling = match ceiling {
            Some(c) => c.clone(),
            None => self.tail_snapshot().await?,
        };
        // Rows of transactions invisible in `floor` and visible in `ceiling`: exactly the ones
        // that committed between the two snapshots, whatever their positions.
        let rows = if *after == (0, 0) {
            sqlx::query(tail_sql(TailPage::First))
                .bind(floor)
                .bind(&ceiling)
                .bind(i64::from(limit))
                .fetch_all(&self.pool)
                .await?
        } else {
            sqlx::query(tail_sql(TailPage::After))
                .bind(floor)
                .bind(&ceiling)
                .bind(i64::from(limit))
                .bind(after.0.to_string())
                .bind(after.1)
                .fetch_all(&self.pool)
                .await?
        };
        let events = rows.iter().map(row_to_event).collect::<Result<Vec<_>>>()?;
        let next = if (events.len() as u64) < u64::from(limit) {
            // Everything between the two snapshots is delivered: the ceiling becomes the floor.
            TailCursor::Postgres {
                floor: ceiling,
                ceiling: None,
                after: (0, 0),
            }
        } else {
            let last = events
                .last()
                .map_or(*after, |e| (e.tx_id.unwrap_or_default(), e.position));
            TailCursor::Postgres {
                floor: floor.clone(),
                ceiling: Some(ceiling),
                after: last,
            }
        };
        Ok((events, next))
    }

    fn commit_signal(&self) -> watch::Receiver<u64> {
        self.wake.subscribe()
    }
}

impl LogTx for PgStoreTx {
    async fn append(
        &mut self,
        stream: &str,
        expected: ExpectedVersion,
        events: &[NewEvent],
    ) -> Result<Appended> {
        if events.is_empty() {
            return Err(StoreError::EmptyAppend);
        }
        self.send_deferred().await?;
        let expected = match expected {
            ExpectedVersion::Exact(0) => ExpectedVersion::NoStream,
            other => other,
        };
        let base = match expected {
            ExpectedVersion::Exact(v) => version_param(v),
            _ => 0,
        };
        let mut shape = AppendShape {
            base: match expected {
                ExpectedVersion::Any => Base::Any,
                ExpectedVersion::NoStream => Base::Known,
                ExpectedVersion::Exact(v) if self.known.covers(stream, v) => Base::Known,
                ExpectedVersion::Exact(_) => Base::Checked,
            },
            // One event first in its transaction: a retry fails on the unique key instead, and
            // the transaction is begun again (below).
            probe_id: !(self.fresh && events.len() == 1 && expected != ExpectedVersion::Any),
            many: events.len() > 1,
        };
        self.fresh = false;
        if shape.base == Base::Any {
            sqlx::query(ANY_APPEND_LOCK)
                .bind(stream)
                .execute(&mut *self.tx)
                .await?;
        }
        let rows = loop {
            let query = bind_events(
                sqlx::query(append_sql(shape)).bind(stream).bind(base),
                events,
                self.actor.as_ref(),
            );
            match query.fetch_all(&mut *self.tx).await {
                Ok(rows) => break rows,
                Err(e) if !shape.probe_id && is_unique_violation(&e) => {
                    // A retry of an append already in the log, or the loser of a race. Nothing
                    // else ran in this transaction, so it is begun again, unnoticed, and the
                    // append made with the id check, which tells the two apart as always.
                    sqlx::query("ROLLBACK").execute(&mut *self.tx).await?;
                    sqlx::query("BEGIN").execute(&mut *self.tx).await?;
                    shape.probe_id = true;
                }
                Err(e) if is_stream_version_race(&e) => {
                    // The loser of a race: this transaction is aborted, so the version the
                    // stream is at now is read outside it (the winner has committed, or we
                    // would still be waiting on it), on a second connection. That connection
                    // is waited for only briefly: when every connection of the pool is held by
                    // a loser like this one, each would otherwise wait for another's until the
                    // pool's acquire timeout. Without one, the version we collided with is
                    // reported: a lower bound.
                    let at_least = u64::try_from(base).unwrap_or(0) + 1;
                    let actual =
                        match tokio::time::timeout(CONFLICT_READ_WAIT, self.pool.acquire()).await {
                            Ok(Ok(mut conn)) => {
                                let actual = stream_version(&mut *conn, stream).await?;
                                self.known.record(stream, actual);
                                actual
                            }
                            _ => at_least,
                        };
                    return Err(StoreError::Conflict {
                        stream: stream.to_string(),
                        expected,
                        actual,
                    });
                }
                Err(e) => return Err(map_append_error(e)),
            }
        };
        if !rows.is_empty() {
            let mut placed: Vec<(i64, i64)> = rows
                .iter()
                .map(|r| Ok((r.try_get::<i64, _>(1)?, r.try_get::<i64, _>(0)?)))
                .collect::<Result<_>>()?;
            placed.sort_unstable();
            let stream_version = placed.last().map_or(0, |p| u64::try_from(p.0).unwrap_or(0));
            self.appended.push((stream.to_string(), stream_version));
            return Ok(Appended {
                positions: placed.into_iter().map(|p| p.1).collect(),
                stream_version,
                already_appended: false,
                actor: self.actor.clone(),
            });
        }
        // Nothing was inserted: either the events are already in the log (a retry) or the
        // stream is behind what the caller expected.
        let ids: Vec<Vec<u8>> = events.iter().map(|e| e.event_id.to_vec()).collect();
        let existing = self.existing(&ids).await?;
        if !existing.is_empty() {
            return already_appended(stream, events, existing, self.actor.as_ref());
        }
        Err(StoreError::Conflict {
            stream: stream.to_string(),
            expected,
            actual: stream_version(&mut *self.tx, stream).await?,
        })
    }

    async fn append_streams(&mut self, appends: &[StreamAppend<'_>]) -> Result<Vec<Appended>> {
        self.send_deferred().await?;
        self.fresh = false;
        if multi_append::fits_one_statement(appends) {
            let done = self.append_streams_at_once(appends).await?;
            for (a, d) in appends.iter().zip(&done) {
                if !d.already_appended {
                    self.appended.push((a.stream.to_string(), d.stream_version));
                }
            }
            return Ok(done);
        }
        append_one_by_one(self, appends).await
    }

    async fn insert_rows(
        &mut self,
        table: &str,
        columns: &[&str],
        rows: Vec<Vec<SqlValue>>,
    ) -> Result<u64> {
        self.copy_rows(table, columns, &rows).await
    }

    async fn execute(&mut self, sql: &str, args: &[SqlValue]) -> Result<u64> {
        self.send_deferred().await?;
        self.run_statement(sql, args).await
    }

    async fn defer(&mut self, write: DeferredWrite) -> Result<()> {
        if self.deferred.must_send_before(&write) {
            self.send_deferred().await?;
        }
        self.deferred.push(write);
        Ok(())
    }

    async fn flush(&mut self) -> Result<()> {
        self.send_deferred().await
    }

    async fn commit(mut self) -> Result<()> {
        self.send_deferred().await?;
        self.tx.commit().await?;
        for (stream, version) in &self.appended {
            self.known.record(stream, *version);
        }
        self.wake.committed(!self.appended.is_empty()).await;
        Ok(())
    }

    async fn rollback(self) -> Result<()> {
        self.tx.rollback().await?;
        Ok(())
    }
}
