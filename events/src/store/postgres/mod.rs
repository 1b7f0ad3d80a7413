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
mod known_versions;
mod multi_append;

use std::str::FromStr;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use sqlx::postgres::{PgArguments, PgConnectOptions, PgPoolOptions, PgRow};
use sqlx::query::Query;
use sqlx::{PgConnection, PgPool, Postgres, Row, Transaction};
use tokio::sync::watch;

use super::deferred::{self, DeferredQueue};
use super::tailer::TailCursor;
use super::value::bind_all;
use super::{
    append_one_by_one, map_append_error, recorded, Appended, Backend, DeferredWrite,
    ExpectedVersion, LogStore, LogTx, Result, SqlValue, StoreError, StreamAppend,
};
use crate::envelope::{NewEvent, RecordedEvent};
use known_versions::KnownVersions;

/// The columns every read selects, in the order [`row_to_event`] takes them.
const EVENT_COLUMNS: &str = "position, stream_id, stream_version, event_id, event_type, \
     schema_version, tenant_id, occurred_at_us, payload, payload_sha256, tx_id::text";

/// How long the loser of an append race waits for a second connection to read the version the
/// stream is at (see [`PgStoreTx::append`]).
const CONFLICT_READ_WAIT: Duration = Duration::from_millis(100);

/// A snapshot before every transaction: a tailer from it reads the whole log.
pub(crate) const ORIGIN_SNAPSHOT: &str = "1:1:";

/// The Postgres backend.
#[derive(Clone, Debug)]
pub struct PgLogStore {
    pool: PgPool,
    commits: watch::Sender<u64>,
    known: Arc<KnownVersions>,
}

/// A transaction on the Postgres backend.
pub struct PgStoreTx {
    tx: Transaction<'static, Postgres>,
    /// Projection writes waiting to go out as one statement (see `store::deferred`).
    deferred: DeferredQueue,
    /// For what must be read outside the transaction once it is aborted.
    pool: PgPool,
    commits: watch::Sender<u64>,
    known: Arc<KnownVersions>,
    /// Stream versions this transaction appended, recorded in `known` once it has committed.
    appended: Vec<(String, u64)>,
    /// Nothing has run in this transaction since BEGIN: it can be begun again unnoticed.
    fresh: bool,
}

impl PgLogStore {
    /// Connects with a pool sized for concurrent commands (`max_connections` in the URL's
    /// `pool_max` is not standard, so the size is a parameter of [`PgLogStore::with_pool_size`]).
    pub async fn connect(url: &str) -> Result<Self> {
        Self::with_pool_size(url, 32).await
    }

    pub async fn with_pool_size(url: &str, max_connections: u32) -> Result<Self> {
        let options = PgConnectOptions::from_str(url)?.application_name("bc-events");
        // No ping when a connection is handed out: that is a round trip per transaction (about
        // a tenth of a join's). A connection that died while idle fails at its first statement
        // instead: `begin` replaces it (see there), and the readers (tailers, the gateway's
        // feed) already retry their steps.
        let pool = PgPoolOptions::new()
            .max_connections(max_connections)
            .test_before_acquire(false)
            .connect_with(options)
            .await?;
        Ok(Self::from_pool(pool))
    }

    pub fn from_pool(pool: PgPool) -> Self {
        PgLogStore {
            pool,
            commits: watch::channel(0).0,
            known: Arc::default(),
        }
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
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
            commits: self.commits.clone(),
            known: self.known.clone(),
            appended: Vec::new(),
            fresh: true,
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
        let snapshot: String = sqlx::query_scalar("SELECT pg_current_snapshot()::text")
            .fetch_one(&self.pool)
            .await?;
        Ok(TailCursor::Postgres {
            floor: snapshot,
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
            None => {
                sqlx::query_scalar("SELECT pg_current_snapshot()::text")
                    .fetch_one(&self.pool)
                    .await?
            }
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
        self.commits.subscribe()
    }
}

impl PgStoreTx {
    /// The connection of this transaction, for reads and backend-specific SQL. Nothing may be
    /// queued then: a read would not see the queued writes ([`LogTx::flush`] sends them; the
    /// projections runner does after every run).
    pub fn connection(&mut self) -> &mut PgConnection {
        debug_assert!(
            self.deferred.is_empty(),
            "the connection was taken with deferred writes queued; flush them first"
        );
        self.fresh = false;
        &mut self.tx
    }

    /// Sends the queued writes: one as itself, several as one statement ([`deferred::merge`]),
    /// and checks the row counts they expect.
    /// One statement with `$n` arguments in this transaction; the rows it changed.
    async fn run_statement(&mut self, sql: &str, args: &[SqlValue]) -> Result<u64> {
        self.fresh = false;
        let query = bind_all!(sqlx::query(sql), args);
        Ok(query.execute(&mut *self.tx).await?.rows_affected())
    }

    /// Called before every other statement of the transaction, so an empty queue costs one
    /// length check.
    async fn send_deferred(&mut self) -> Result<()> {
        if self.deferred.is_empty() {
            return Ok(());
        }
        let writes = self.deferred.take();
        match writes.as_slice() {
            [] => Ok(()),
            [one] => one.check(self.run_statement(&one.sql, &one.args).await?),
            many => {
                self.fresh = false;
                let (sql, args, counted) = deferred::merge(many);
                let row = bind_all!(sqlx::query(&sql), &args)
                    .fetch_one(&mut *self.tx)
                    .await?;
                for (column, &i) in counted.iter().enumerate() {
                    let changed: i64 = row.try_get(column)?;
                    many[i].check(u64::try_from(changed).unwrap_or(0))?;
                }
                Ok(())
            }
        }
    }

    /// The events of `ids` already in the log. One index lookup per id: the `LIMIT 1` keeps
    /// the lateral subquery from being flattened into a join, which a generic plan made while
    /// the table was small would run as a sequential scan (as `event_id = ANY($1)` would).
    async fn existing(&mut self, ids: &[Vec<u8>]) -> Result<Vec<(Vec<u8>, i64, String, i64)>> {
        self.fresh = false;
        let rows = sqlx::query(
            "SELECT e.event_id, e.position, e.stream_id, e.stream_version \
             FROM unnest($1::bytea[]) AS i(id) \
             CROSS JOIN LATERAL (SELECT event_id, position, stream_id, stream_version \
                                 FROM events WHERE event_id = i.id LIMIT 1) AS e \
             ORDER BY e.position",
        )
        .bind(ids)
        .fetch_all(&mut *self.tx)
        .await?;
        rows.iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, r.try_get(3)?)))
            .collect()
    }
}

/// The version `stream` is at (0 when it has no events), read through `conn`.
async fn stream_version<'c, E>(conn: E, stream: &str) -> Result<u64>
where
    E: sqlx::Executor<'c, Database = Postgres>,
{
    let v: Option<i64> =
        sqlx::query_scalar("SELECT max(stream_version) FROM events WHERE stream_id = $1")
            .bind(stream)
            .fetch_one(conn)
            .await?;
    Ok(v.map_or(0, |v| u64::try_from(v).unwrap_or(0)))
}

/// True when `err` says the connection was dead before anything ran on it: the socket is gone,
/// or the server had ended the session (SQLSTATE class 57P: operator intervention, as sent by
/// `pg_terminate_backend`, a shutdown or a restart).
fn is_dead_connection(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Io(_) => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|c| c.starts_with("57P")),
        _ => false,
    }
}

/// True when an append lost a race for its stream versions: the unique `(stream_id,
/// stream_version)` key refused its insert after the winner committed.
/// True when `err` is a unique violation on either unique key of the log.
fn is_unique_violation(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Database(db) => {
            db.code().as_deref() == Some("23505")
                && matches!(
                    db.constraint(),
                    Some("events_stream_version_key" | "events_event_id_key")
                )
        }
        _ => false,
    }
}

fn is_stream_version_race(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(db) if db.constraint() == Some("events_stream_version_key"))
}

/// Binds an append's `$3..$9`: one event's columns as plain values, several events' as arrays
/// (the two shapes of [`append_sql`]).
fn bind_events<'q>(
    query: Query<'q, Postgres, PgArguments>,
    events: &'q [NewEvent],
) -> Query<'q, Postgres, PgArguments> {
    if let [event] = events {
        return query
            .bind(&event.event_id[..])
            .bind(&event.event_type)
            .bind(schema_param(event))
            .bind(&event.tenant_id)
            .bind(event.occurred_at_us)
            .bind(event.payload())
            .bind(&event.payload_sha256()[..]);
    }
    EventArrays::of(events).bind(query)
}

/// The event columns of an append as arrays, one element per event, bound in the order of the
/// statements' event parameters (id, type, schema version, tenant, time, payload, digest).
struct EventArrays<'e> {
    ids: Vec<&'e [u8]>,
    types: Vec<&'e str>,
    schemas: Vec<i32>,
    tenants: Vec<&'e str>,
    times: Vec<i64>,
    payloads: Vec<&'e [u8]>,
    hashes: Vec<&'e [u8]>,
}

impl<'e> EventArrays<'e> {
    fn of(events: impl IntoIterator<Item = &'e NewEvent>) -> EventArrays<'e> {
        let mut a = EventArrays {
            ids: Vec::new(),
            types: Vec::new(),
            schemas: Vec::new(),
            tenants: Vec::new(),
            times: Vec::new(),
            payloads: Vec::new(),
            hashes: Vec::new(),
        };
        for e in events {
            a.ids.push(&e.event_id[..]);
            a.types.push(e.event_type.as_str());
            a.schemas.push(schema_param(e));
            a.tenants.push(e.tenant_id.as_str());
            a.times.push(e.occurred_at_us);
            a.payloads.push(e.payload());
            a.hashes.push(&e.payload_sha256()[..]);
        }
        a
    }

    fn bind<'q>(self, query: Query<'q, Postgres, PgArguments>) -> Query<'q, Postgres, PgArguments>
    where
        'e: 'q,
    {
        query
            .bind(self.ids)
            .bind(self.types)
            .bind(self.schemas)
            .bind(self.tenants)
            .bind(self.times)
            .bind(self.payloads)
            .bind(self.hashes)
    }
}

/// An expected version as the statement's `$2`.
fn version_param(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// An event's schema version as its `int4` column.
fn schema_param(event: &NewEvent) -> i32 {
    i32::try_from(event.schema_version).unwrap_or(i32::MAX)
}

/// Which page of a tail step a query reads.
#[derive(Clone, Copy)]
enum TailPage {
    /// The first page between two snapshots: from the floor's xmin.
    First,
    /// A later page: strictly after the last delivered `(tx_id, position)`.
    After,
}

/// The tail query, built once per page kind. `$1` floor, `$2` ceiling, `$3` limit, and for later
/// pages `$4`/`$5` the last delivered `(tx_id, position)`.
///
/// The first page carries no row comparison: given both `tx_id >= xmin` and a row comparison
/// from `(0, 0)`, Postgres started the index scan at the row comparison, that is at the start
/// of the index, and read every entry below the floor on every step.
fn tail_sql(page: TailPage) -> &'static str {
    static SQL: LazyLock<[String; 2]> = LazyLock::new(|| {
        ["", "AND (tx_id, position) > ($4::text::xid8, $5::bigint) "].map(|after| {
            format!(
                "SELECT {EVENT_COLUMNS} FROM events \
                 WHERE tx_id >= pg_snapshot_xmin($1::pg_snapshot) \
                   AND tx_id < pg_snapshot_xmax($2::pg_snapshot) \
                   AND NOT pg_visible_in_snapshot(tx_id, $1::pg_snapshot) \
                   AND pg_visible_in_snapshot(tx_id, $2::pg_snapshot) \
                   {after}\
                 ORDER BY tx_id, position LIMIT $3"
            )
        })
    });
    match page {
        TailPage::First => &SQL[0],
        TailPage::After => &SQL[1],
    }
}

/// The columns an append writes, in the order of its parameters.
const APPEND_COLUMNS: &str = "stream_id, stream_version, event_id, event_type, schema_version, \
     tenant_id, occurred_at_us, payload, payload_sha256";

/// The shapes of the append statement: how the base version is found and checked, whether the
/// first event id is looked up first, and one event (plain parameters) or several (arrays,
/// unnested in order).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct AppendShape {
    base: Base,
    /// Look the first event id up, so that a retried append inserts nothing instead of failing
    /// on the unique key (which would abort the transaction).
    probe_id: bool,
    /// Several events, as arrays in `$3..$9`; else one event in plain parameters.
    many: bool,
}

/// Where an append's first version comes from.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Base {
    /// `$2`, the version the caller expects, after checking that the stream has it.
    Checked,
    /// `$2`, known to be committed already (no stream, or [`KnownVersions`]): not checked.
    Known,
    /// The stream's current version, read after [`ANY_APPEND_LOCK`].
    Any,
}

/// Serialises `Any` appends to one stream within their transactions, so that each reads the
/// version the previous one committed (the statement after it takes a fresh snapshot). The
/// first key is a constant class for this use; the second the stream's hash (a collision only
/// makes two streams' `Any` appends wait for each other).
const ANY_APPEND_LOCK: &str = "SELECT pg_advisory_xact_lock(25187, hashtext($1))";

/// The append statement for a shape, built once. `$1` stream, `$2` the expected version (the
/// `Any` shapes read the base from the table instead; `$2` is still bound, typed, and unused),
/// `$3..$9` the event columns.
///
/// The versions come from the caller's expectation, and the unique `(stream_id,
/// stream_version)` key is what decides a race: the loser's insert waits for the winner's
/// transaction and then fails with a unique violation, which [`PgStoreTx::append`] reports as
/// [`StoreError::Conflict`]. An expectation that does not hold without a race (the stream is
/// behind it) inserts nothing. There is no per-stream row to update: that row cost about 13% of
/// the server's time per single-event append (see DECISIONS.md).
///
/// Each guard is left out where it cannot matter ([`Base::Known`], `probe_id: false`): the two
/// index probes were about a fifth of the server's time per one-event append (pgbench, see
/// DECISIONS.md); without them the statement is a plain `INSERT … VALUES`.
///
/// The idempotency probe looks up the batch's *first* id only, by equality on the unique index:
/// that is all a retried append needs (nothing is inserted, and [`PgStoreTx::append`] then checks
/// every id). A batch that shares a later id with the log fails on the unique index instead, as
/// [`StoreError::DuplicateEventId`]. The probe is an equality rather than `= ANY($3)` because
/// Postgres caches one generic plan per prepared statement: planned while the table was small,
/// `= ANY` chose a sequential scan and kept it as the table grew. A unique-key equality is an
/// index lookup at every table size.
fn append_sql(shape: AppendShape) -> &'static str {
    static SQL: LazyLock<Vec<String>> =
        LazyLock::new(|| AppendShape::ALL.map(append_statement).to_vec());
    &SQL[shape.index()]
}

impl AppendShape {
    /// Every shape, in the order of [`AppendShape::index`].
    const ALL: [AppendShape; 12] = {
        let bases = [Base::Checked, Base::Known, Base::Any];
        let mut all = [AppendShape {
            base: Base::Checked,
            probe_id: false,
            many: false,
        }; 12];
        let mut i = 0;
        while i < 12 {
            all[i] = AppendShape {
                base: bases[i / 4],
                probe_id: i % 4 >= 2,
                many: i % 2 == 1,
            };
            i += 1;
        }
        all
    };

    /// This shape's place in [`AppendShape::ALL`].
    fn index(self) -> usize {
        let base = match self.base {
            Base::Checked => 0,
            Base::Known => 1,
            Base::Any => 2,
        };
        base * 4 + usize::from(self.probe_id) * 2 + usize::from(self.many)
    }
}

/// The text of [`append_sql`]'s statement for `shape`.
fn append_statement(shape: AppendShape) -> String {
    let base = match shape.base {
        Base::Checked | Base::Known => "$2::int8",
        Base::Any => "coalesce((SELECT max(stream_version) FROM events WHERE stream_id = $1), 0)",
    };
    let mut guards = Vec::new();
    if shape.base == Base::Checked {
        guards.push(
            "($2::int8 = 0 OR EXISTS (SELECT 1 FROM events \
             WHERE stream_id = $1 AND stream_version = $2::int8))",
        );
    }
    if shape.probe_id {
        guards.push(if shape.many {
            "NOT EXISTS (SELECT 1 FROM events WHERE event_id = ($3::bytea[])[1])"
        } else {
            "NOT EXISTS (SELECT 1 FROM events WHERE event_id = $3)"
        });
    }
    let guard = if guards.is_empty() {
        "TRUE".to_string()
    } else {
        guards.join(" AND ")
    };
    if shape.many {
        format!(
            "INSERT INTO events ({APPEND_COLUMNS}) \
             SELECT $1, b.base + e.ord, e.id, e.ty, e.sv, e.tenant, e.at, e.payload, e.sha \
             FROM (SELECT {base} AS base) AS b, \
                  unnest($3::bytea[], $4::text[], $5::int4[], $6::text[], $7::int8[], \
                         $8::bytea[], $9::bytea[]) \
                  WITH ORDINALITY AS e(id, ty, sv, tenant, at, payload, sha, ord) \
             WHERE {guard} \
             ORDER BY e.ord \
             RETURNING position, stream_version"
        )
    } else if guard == "TRUE" {
        format!(
            "INSERT INTO events ({APPEND_COLUMNS}) \
             VALUES ($1, {base} + 1, $3, $4, $5, $6, $7, $8, $9) \
             RETURNING position, stream_version"
        )
    } else {
        format!(
            "INSERT INTO events ({APPEND_COLUMNS}) \
             SELECT $1, {base} + 1, $3, $4, $5, $6, $7, $8, $9 \
             WHERE {guard} \
             RETURNING position, stream_version"
        )
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
            });
        }
        // Nothing was inserted: either the events are already in the log (a retry) or the
        // stream is behind what the caller expected.
        let ids: Vec<Vec<u8>> = events.iter().map(|e| e.event_id.to_vec()).collect();
        let existing = self.existing(&ids).await?;
        if !existing.is_empty() {
            return already_appended(stream, events, existing);
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
        self.commits.send_modify(|n| *n = n.wrapping_add(1));
        Ok(())
    }

    async fn rollback(self) -> Result<()> {
        self.tx.rollback().await?;
        Ok(())
    }
}

/// A retried append: succeeds only when every id is there, in this stream, in this order.
pub(crate) fn already_appended(
    stream: &str,
    events: &[NewEvent],
    existing: Vec<(Vec<u8>, i64, String, i64)>,
) -> Result<Appended> {
    let mut positions = Vec::with_capacity(events.len());
    let mut last_version = 0;
    for event in events {
        let found = existing
            .iter()
            .find(|(id, _, s, _)| id.as_slice() == event.event_id && s == stream);
        match found {
            Some((_, position, _, version)) => {
                positions.push(*position);
                last_version = last_version.max(*version);
            }
            None => {
                return Err(StoreError::DuplicateEventId {
                    event_id: hex::encode(
                        existing
                            .first()
                            .map(|e| e.0.clone())
                            .unwrap_or_else(|| event.event_id.to_vec()),
                    ),
                })
            }
        }
    }
    Ok(Appended {
        positions,
        stream_version: u64::try_from(last_version).unwrap_or(0),
        already_appended: true,
    })
}

fn row_to_event(row: &PgRow) -> Result<RecordedEvent> {
    let position: i64 = row.try_get(0)?;
    let tx_text: String = row.try_get(10)?;
    let tx_id = tx_text.parse::<u64>().map_err(|_| StoreError::Corrupt {
        position,
        why: format!("tx_id {tx_text:?} is not a number"),
    })?;
    recorded(
        position,
        row.try_get(1)?,
        row.try_get(2)?,
        row.try_get(3)?,
        row.try_get(4)?,
        i64::from(row.try_get::<i32, _>(5)?),
        row.try_get(6)?,
        row.try_get(7)?,
        row.try_get(8)?,
        row.try_get(9)?,
        Some(tx_id),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_append_shape_has_its_own_statement() {
        for (i, shape) in AppendShape::ALL.into_iter().enumerate() {
            assert_eq!(shape.index(), i, "{shape:?}");
            assert_eq!(append_sql(shape), append_statement(shape), "{shape:?}");
        }
        let distinct: std::collections::HashSet<&str> =
            AppendShape::ALL.into_iter().map(append_sql).collect();
        assert_eq!(distinct.len(), 12);
    }
}
