//! The SQLite log store, the embedded default.
//!
//! One file in WAL mode. Writes go through a single connection and start with `BEGIN IMMEDIATE`,
//! so there is one writer at a time: the position a transaction takes is also its place in commit
//! order, which makes the position itself an exact tail cursor. Reads use a separate pool and
//! never wait for the writer.
//!
//! A full disk (`SQLITE_FULL`) fails the statement with [`StoreError::DiskFull`]; SQLite rolls
//! the transaction back, the dropped transaction queues its `ROLLBACK` on the writer, and the
//! next `BEGIN` waits that out (see `begin`), so the store takes commands again as soon as
//! there is room, without a restart.

use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow, SqliteSynchronous,
};
use sqlx::{Row, Sqlite, SqliteConnection, SqlitePool, Transaction};
use tokio::sync::watch;

use super::cursor::TailCursor;
use super::postgres::already_appended;
use super::value::bind_all;
use super::{
    map_append_error, recorded, Appended, Backend, ExpectedVersion, LogStore, LogTx, Result,
    SqlValue, StoreError,
};
use crate::actor::Actor;
use crate::envelope::{NewEvent, RecordedEvent};

const EVENT_COLUMNS: &str = "position, stream_id, stream_version, event_id, event_type, \
     schema_version, tenant_id, occurred_at_us, payload, payload_sha256, actor_id, actor_role";

/// Events per `INSERT` statement of an append: one statement (one round trip to sqlx's SQLite
/// worker thread) per hundred events rather than one per event, at 11 parameters a row far under
/// SQLite's limit of 32,766 parameters a statement.
const ROWS_PER_INSERT: usize = 100;

/// `INSERT INTO events ... VALUES (...), (...) RETURNING position, stream_version` for `rows`
/// events, with 11 positional parameters a row in [`SqliteStoreTx::append`]'s bind order.
fn insert_events_sql(rows: usize) -> String {
    let row = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
    let mut sql = String::with_capacity(220 + rows * (row.len() + 2));
    sql.push_str(
        "INSERT INTO events (stream_id, stream_version, event_id, event_type, schema_version, \
         tenant_id, occurred_at_us, payload, payload_sha256, actor_id, actor_role) VALUES ",
    );
    for i in 0..rows {
        if i > 0 {
            sql.push_str(", ");
        }
        sql.push_str(row);
    }
    sql.push_str(" RETURNING position, stream_version");
    sql
}

/// The SQLite backend.
#[derive(Clone, Debug)]
pub struct SqliteLogStore {
    writer: SqlitePool,
    reader: SqlitePool,
    commits: watch::Sender<u64>,
    /// Stamped on every event this store's transactions append ([`SqliteLogStore::acting_as`]).
    actor: Option<Actor>,
}

/// A write transaction on the SQLite backend (it holds the one writer connection).
pub struct SqliteStoreTx {
    tx: Transaction<'static, Sqlite>,
    commits: watch::Sender<u64>,
    actor: Option<Actor>,
}

impl SqliteLogStore {
    /// Opens (creating if missing) the database file named by `sqlite://PATH`.
    pub async fn connect(url: &str) -> Result<Self> {
        let options = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // FULL: a commit that returned survives a power cut, not only a process crash.
            .synchronous(SqliteSynchronous::Full)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(10));
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(60))
            .connect_with(options.clone())
            .await
            .map_err(|e| match e {
                // A full disk stays DiskFull; any other failure to open names the file.
                sqlx::Error::Database(_) | sqlx::Error::Io(_) => {
                    let typed = StoreError::from(e);
                    match typed {
                        StoreError::DiskFull { .. } => typed,
                        other => StoreError::SqliteOpen {
                            path: options.get_filename().display().to_string(),
                            why: other
                                .to_string()
                                .trim_start_matches("database error: ")
                                .to_string(),
                        },
                    }
                }
                other => StoreError::from(other),
            })?;
        let reader = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options.read_only(true))
            .await?;
        Ok(SqliteLogStore {
            writer,
            reader,
            commits: watch::channel(0).0,
            actor: None,
        })
    }

    /// The same store (both pools, the commit signal) stamping `actor` on what its
    /// transactions append.
    pub fn acting_as(&self, actor: Option<Actor>) -> Self {
        SqliteLogStore {
            actor,
            ..self.clone()
        }
    }

    /// The actor this store stamps, if any.
    pub fn actor(&self) -> Option<&Actor> {
        self.actor.as_ref()
    }

    /// The writer pool (one connection), for maintenance statements.
    pub fn writer(&self) -> &SqlitePool {
        &self.writer
    }

    /// The reader pool, for projection queries outside a transaction.
    pub fn reader(&self) -> &SqlitePool {
        &self.reader
    }

    /// SQLite's own check of the file (`PRAGMA integrity_check`): `"ok"`, or the problems it
    /// found, joined with `; `. For the checks after a crash or a full disk.
    pub async fn integrity_check(&self) -> Result<String> {
        let rows: Vec<String> = sqlx::query_scalar("PRAGMA integrity_check")
            .fetch_all(&self.reader)
            .await?;
        Ok(rows.join("; "))
    }

    /// Closes both pools (waits for their connections to close), so the file can be reopened
    /// or moved.
    pub async fn close(&self) {
        self.writer.close().await;
        self.reader.close().await;
    }
}

impl LogStore for SqliteLogStore {
    type Tx = SqliteStoreTx;

    fn backend(&self) -> Backend {
        Backend::Sqlite
    }

    async fn migrate(&self) -> Result<()> {
        migrations::SQLITE.run(&self.writer).await?;
        Ok(())
    }

    async fn begin(&self) -> Result<SqliteStoreTx> {
        // The BEGIN runs in its own task, so that a caller cancelled while it is in flight
        // cannot strand it: sqlx's SQLite worker would have opened the transaction with no
        // `Transaction` left to roll it back, and every later BEGIN on the writer would be
        // refused. A task that finishes for a caller who is gone drops its transaction, which
        // queues the rollback.
        let writer = self.writer.clone();
        let tx = tokio::spawn(async move {
            // sqlx refuses a custom BEGIN (`InvalidSavePointStatement`) on a connection it
            // believes is inside a transaction. Two causes: a transaction dropped mid-statement
            // left its rollback queued on the writer (it clears once the worker ran it), or a
            // failed COMMIT that SQLite had already rolled back (`SQLITE_FULL`): sqlx's ROLLBACK
            // then fails with "no transaction is active" and the connection stays marked as in
            // a transaction for good. `unstick_writer` tells them apart and replaces the second.
            let mut tries = 0;
            loop {
                match writer.begin_with("BEGIN IMMEDIATE").await {
                    Err(sqlx::Error::InvalidSavePointStatement) if tries < 200 => {
                        tries += 1;
                        if !unstick_writer(&writer).await {
                            tokio::time::sleep(Duration::from_millis(5)).await;
                        }
                    }
                    other => break other,
                }
            }
        })
        .await
        .map_err(|_| sqlx::Error::WorkerCrashed)??;
        Ok(SqliteStoreTx {
            tx,
            commits: self.commits.clone(),
            actor: self.actor.clone(),
        })
    }

    async fn read_stream(&self, stream: &str) -> Result<Vec<RecordedEvent>> {
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM events WHERE stream_id = $1 ORDER BY stream_version"
        );
        let rows = sqlx::query(&sql)
            .bind(stream)
            .fetch_all(&self.reader)
            .await?;
        rows.iter().map(row_to_event).collect()
    }

    async fn read_batch(&self, after: i64, limit: u32) -> Result<Vec<RecordedEvent>> {
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM events WHERE position > $1 ORDER BY position LIMIT $2"
        );
        let rows = sqlx::query(&sql)
            .bind(after)
            .bind(i64::from(limit))
            .fetch_all(&self.reader)
            .await?;
        rows.iter().map(row_to_event).collect()
    }

    async fn head_position(&self) -> Result<i64> {
        let head: Option<i64> = sqlx::query_scalar("SELECT max(position) FROM events")
            .fetch_one(&self.reader)
            .await?;
        Ok(head.unwrap_or(0))
    }

    fn start_cursor(&self) -> TailCursor {
        TailCursor::Sqlite { after: 0 }
    }

    async fn now_cursor(&self) -> Result<TailCursor> {
        Ok(TailCursor::Sqlite {
            after: self.head_position().await?,
        })
    }

    async fn tail_step(
        &self,
        cursor: &TailCursor,
        limit: u32,
    ) -> Result<(Vec<RecordedEvent>, TailCursor)> {
        let TailCursor::Sqlite { after } = cursor else {
            return Err(StoreError::CursorBackend {
                cursor: cursor.backend_name(),
                store: "sqlite",
            });
        };
        let events = self.read_batch(*after, limit).await?;
        let next = TailCursor::Sqlite {
            after: events.last().map_or(*after, |e| e.position),
        };
        Ok((events, next))
    }

    fn commit_signal(&self) -> watch::Receiver<u64> {
        self.commits.subscribe()
    }
}

/// Replaces the writer connection when it is marked as inside a transaction that SQLite no
/// longer has (see `begin`); returns whether it did. A queued rollback runs first (the ping
/// waits for it), so a connection that is only catching up is kept.
async fn unstick_writer(writer: &SqlitePool) -> bool {
    use sqlx::Connection as _;
    let Ok(mut conn) = writer.acquire().await else {
        return false;
    };
    if conn.ping().await.is_err() || !conn.is_in_transaction() {
        return false;
    }
    tracing::warn!(
        "the SQLite writer connection is marked inside a transaction SQLite already rolled back \
         (a failed commit, such as on a full disk): replacing the connection"
    );
    conn.close_on_drop();
    true
}

impl SqliteStoreTx {
    /// The connection of this transaction, for projection SQL.
    pub fn connection(&mut self) -> &mut SqliteConnection {
        &mut self.tx
    }

    async fn existing(&mut self, ids: &[[u8; 16]]) -> Result<Vec<(Vec<u8>, i64, String, i64)>> {
        let mut found = Vec::new();
        for id in ids {
            let row = sqlx::query(
                "SELECT event_id, position, stream_id, stream_version FROM events \
                 WHERE event_id = $1",
            )
            .bind(&id[..])
            .fetch_optional(&mut *self.tx)
            .await?;
            if let Some(r) = row {
                found.push((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, r.try_get(3)?));
            }
        }
        found.sort_by_key(|f| f.1);
        Ok(found)
    }
}

impl LogTx for SqliteStoreTx {
    async fn append(
        &mut self,
        stream: &str,
        expected: ExpectedVersion,
        events: &[NewEvent],
    ) -> Result<Appended> {
        if events.is_empty() {
            return Err(StoreError::EmptyAppend);
        }
        let ids: Vec<[u8; 16]> = events.iter().map(|e| e.event_id).collect();
        let existing = self.existing(&ids).await?;
        if !existing.is_empty() {
            return already_appended(stream, events, existing, self.actor.as_ref());
        }
        let current: Option<i64> =
            sqlx::query_scalar("SELECT version FROM event_streams WHERE stream_id = $1")
                .bind(stream)
                .fetch_optional(&mut *self.tx)
                .await?;
        let actual = current.map_or(0, |v| u64::try_from(v).unwrap_or(0));
        let holds = match expected {
            ExpectedVersion::Any => true,
            ExpectedVersion::NoStream => current.is_none(),
            ExpectedVersion::Exact(v) => actual == v,
        };
        if !holds {
            return Err(StoreError::Conflict {
                stream: stream.to_string(),
                expected,
                actual,
            });
        }
        let mut positions = Vec::with_capacity(events.len());
        let mut version = actual as i64;
        for chunk in events.chunks(ROWS_PER_INSERT) {
            let sql = insert_events_sql(chunk.len());
            let mut query = sqlx::query_as::<_, (i64, i64)>(&sql);
            for event in chunk {
                version += 1;
                query = query
                    .bind(stream)
                    .bind(version)
                    .bind(&event.event_id[..])
                    .bind(&event.event_type)
                    .bind(i64::from(event.schema_version))
                    .bind(&event.tenant_id)
                    .bind(event.occurred_at_us)
                    .bind(event.payload())
                    .bind(&event.payload_sha256()[..])
                    .bind(self.actor.as_ref().map(Actor::id))
                    .bind(self.actor.as_ref().map(Actor::role));
            }
            let mut rows = query
                .fetch_all(&mut *self.tx)
                .await
                .map_err(map_append_error)?;
            // RETURNING reports rows in no promised order: put them back in stream order.
            rows.sort_by_key(|&(_, stream_version)| stream_version);
            positions.extend(rows.into_iter().map(|(position, _)| position));
        }
        sqlx::query(
            "INSERT INTO event_streams (stream_id, version) VALUES ($1, $2) \
             ON CONFLICT (stream_id) DO UPDATE SET version = excluded.version",
        )
        .bind(stream)
        .bind(version)
        .execute(&mut *self.tx)
        .await?;
        Ok(Appended {
            positions,
            stream_version: version as u64,
            already_appended: false,
            actor: self.actor.clone(),
        })
    }

    async fn execute(&mut self, sql: &str, args: &[SqlValue]) -> Result<u64> {
        let query = bind_all!(sqlx::query(sql), args);
        Ok(query.execute(&mut *self.tx).await?.rows_affected())
    }

    async fn commit(self) -> Result<()> {
        self.tx.commit().await?;
        self.commits.send_modify(|n| *n = n.wrapping_add(1));
        Ok(())
    }

    async fn rollback(self) -> Result<()> {
        self.tx.rollback().await?;
        Ok(())
    }
}

fn row_to_event(row: &SqliteRow) -> Result<RecordedEvent> {
    recorded(
        row.try_get(0)?,
        row.try_get(1)?,
        row.try_get(2)?,
        row.try_get(3)?,
        row.try_get(4)?,
        row.try_get(5)?,
        row.try_get(6)?,
        row.try_get(7)?,
        row.try_get(8)?,
        row.try_get(9)?,
        None,
        (row.try_get(10)?, row.try_get(11)?),
    )
}
