//! [`PgStoreTx`]: a transaction on the Postgres backend, its queue of deferred writes, and the
//! reads an append makes inside it.

use std::sync::Arc;
use std::time::Duration;

use sqlx::{PgConnection, PgPool, Postgres, Row, Transaction};

use super::known_versions::KnownVersions;
use super::wake::CommitWake;
use crate::actor::Actor;
use crate::store::deferred::{self, DeferredQueue};
use crate::store::value::bind_all;
use crate::store::{Result, SqlValue};

/// How long the loser of an append race waits for a second connection to read the version the
/// stream is at (see [`PgStoreTx::append`]).
pub(super) const CONFLICT_READ_WAIT: Duration = Duration::from_millis(100);

/// A transaction on the Postgres backend.
pub struct PgStoreTx {
    pub(super) tx: Transaction<'static, Postgres>,
    /// Projection writes waiting to go out as one statement (see `store::deferred`).
    pub(super) deferred: DeferredQueue,
    /// For what must be read outside the transaction once it is aborted.
    pub(super) pool: PgPool,
    pub(super) wake: Arc<CommitWake>,
    pub(super) known: Arc<KnownVersions>,
    /// Stream versions this transaction appended, recorded in `known` once it has committed.
    pub(super) appended: Vec<(String, u64)>,
    /// Nothing has run in this transaction since BEGIN: it can be begun again unnoticed.
    pub(super) fresh: bool,
    /// Who the appended events are stamped with.
    pub(super) actor: Option<Actor>,
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
    pub(super) async fn run_statement(&mut self, sql: &str, args: &[SqlValue]) -> Result<u64> {
        self.fresh = false;
        let query = bind_all!(sqlx::query(sql), args);
        Ok(query.execute(&mut *self.tx).await?.rows_affected())
    }

    /// Called before every other statement of the transaction, so an empty queue costs one
    /// length check.
    pub(super) async fn send_deferred(&mut self) -> Result<()> {
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
    pub(super) async fn existing(
        &mut self,
        ids: &[Vec<u8>],
    ) -> Result<Vec<(Vec<u8>, i64, String, i64)>> {
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
pub(super) async fn stream_version<'c, E>(conn: E, stream: &str) -> Result<u64>
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
