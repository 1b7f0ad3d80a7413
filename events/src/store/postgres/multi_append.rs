//! Appending to several streams in one statement: one round trip for a command that writes two
//! streams (a join writes its node's and its token's), and all of the streams or none of them.
//!
//! Each event carries its stream and the version it takes; the statement inserts them only when
//! every stream expected at a version is at it, and the unique `(stream_id, stream_version)` key
//! decides races exactly as for one stream ([`super::append_sql`]).

use std::sync::LazyLock;

use sqlx::Row;

use super::{
    already_appended, collided_key, is_stream_version_race, stream_version, version_param,
    EventArrays, PgStoreTx, APPEND_COLUMNS, CONFLICT_READ_WAIT,
};
use crate::actor::Actor;
use crate::store::{map_append_error, Appended, ExpectedVersion, Result, StoreError, StreamAppend};

/// `$1..$9`: per event, its stream, its version and its columns, in append order; `$10`/`$11`:
/// each stream expected at a version (`Exact`) and that version; `$12`/`$13`: the actor's id and
/// role, the same for every event (NULL for none). A `NoStream` stream has no
/// guard row: the unique key refuses its version 1 when the stream exists.
///
/// The guard's lookup sits under `LIMIT 1` so that Postgres keeps it a per-row index probe: a
/// plain correlated `NOT EXISTS` may be turned into an anti-join, and a generic plan made while
/// the table was small would keep a sequential scan of the log. The idempotency probe looks up
/// the first event id only, as the single-stream statement does.
static MULTI_APPEND_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "INSERT INTO events ({APPEND_COLUMNS}) \
         SELECT e.stream, e.version, e.id, e.ty, e.sv, e.tenant, e.at, e.payload, e.sha, \
                $12::text, $13::text \
         FROM unnest($1::text[], $2::int8[], $3::bytea[], $4::text[], $5::int4[], $6::text[], \
                     $7::int8[], $8::bytea[], $9::bytea[]) \
              WITH ORDINALITY AS e(stream, version, id, ty, sv, tenant, at, payload, sha, ord) \
         WHERE NOT EXISTS ( \
                 SELECT 1 FROM unnest($10::text[], $11::int8[]) AS g(stream, base) \
                 WHERE NOT EXISTS (SELECT 1 FROM (SELECT 1 FROM events \
                                                  WHERE stream_id = g.stream \
                                                    AND stream_version = g.base \
                                                  LIMIT 1) AS at_base)) \
           AND NOT EXISTS (SELECT 1 FROM events WHERE event_id = ($3::bytea[])[1]) \
         ORDER BY e.ord \
         RETURNING position, stream_id, stream_version"
    )
});

/// Whether `appends` can be one statement: two or more distinct streams, none of them `Any`
/// (those serialise on a lock of their own first), none empty.
pub(super) fn fits_one_statement(appends: &[StreamAppend<'_>]) -> bool {
    appends.len() > 1
        && appends
            .iter()
            .all(|a| !a.events.is_empty() && a.expected != ExpectedVersion::Any)
        && appends
            .iter()
            .enumerate()
            .all(|(i, a)| appends[..i].iter().all(|b| b.stream != a.stream))
}

/// The version a stream must be at for its events to follow (0: no stream).
fn base(expected: ExpectedVersion) -> u64 {
    match expected {
        ExpectedVersion::Exact(v) => v,
        _ => 0,
    }
}

impl PgStoreTx {
    /// The one-statement append of [`fits_one_statement`] appends.
    pub(super) async fn append_streams_at_once(
        &mut self,
        appends: &[StreamAppend<'_>],
    ) -> Result<Vec<Appended>> {
        let n: usize = appends.iter().map(|a| a.events.len()).sum();
        let mut streams = Vec::with_capacity(n);
        let mut versions = Vec::with_capacity(n);
        let mut guard_streams = Vec::new();
        let mut guard_bases = Vec::new();
        for a in appends {
            let b = base(a.expected);
            // A version this store has seen committed needs no guard row ([`super::known_versions`]).
            if b > 0 && !self.known.covers(a.stream, b) {
                guard_streams.push(a.stream);
                guard_bases.push(version_param(b));
            }
            for (i, _) in (1u64..).zip(a.events) {
                streams.push(a.stream);
                versions.push(version_param(b + i));
            }
        }
        let columns = EventArrays::of(appends.iter().flat_map(|a| a.events));
        let result = columns
            .bind(sqlx::query(&MULTI_APPEND_SQL).bind(streams).bind(versions))
            .bind(guard_streams)
            .bind(guard_bases)
            .bind(self.actor.as_ref().map(Actor::id))
            .bind(self.actor.as_ref().map(Actor::role))
            .fetch_all(&mut *self.tx)
            .await;
        let rows = match result {
            Ok(rows) => rows,
            Err(e) if is_stream_version_race(&e) => {
                return Err(self.lost_race(appends, collided_key(&e)).await)
            }
            Err(e) => return Err(map_append_error(e)),
        };
        if !rows.is_empty() {
            let placed: Vec<(String, i64, i64)> = rows
                .iter()
                .map(|r| Ok((r.try_get(1)?, r.try_get(2)?, r.try_get(0)?)))
                .collect::<Result<_>>()?;
            return Ok(appends
                .iter()
                .map(|a| {
                    let mut mine: Vec<(i64, i64)> = placed
                        .iter()
                        .filter(|p| p.0 == a.stream)
                        .map(|p| (p.1, p.2))
                        .collect();
                    mine.sort_unstable();
                    Appended {
                        stream_version: mine.last().map_or(0, |p| u64::try_from(p.0).unwrap_or(0)),
                        positions: mine.into_iter().map(|p| p.1).collect(),
                        already_appended: false,
                        actor: self.actor.clone(),
                    }
                })
                .collect());
        }
        // Nothing was inserted: the events are already in the log (a retry), or a stream is
        // behind what the caller expected.
        let all_ids: Vec<Vec<u8>> = appends
            .iter()
            .flat_map(|a| a.events.iter().map(|e| e.event_id.to_vec()))
            .collect();
        let existing = self.existing(&all_ids).await?;
        if !existing.is_empty() {
            return appends
                .iter()
                .map(|a| {
                    let mine = existing
                        .iter()
                        .filter(|x| x.2 == a.stream)
                        .cloned()
                        .collect();
                    already_appended(a.stream, a.events, mine, self.actor.as_ref())
                })
                .collect();
        }
        for a in appends {
            let actual = stream_version(&mut *self.tx, a.stream).await?;
            if actual != base(a.expected) {
                return Err(conflict(a, actual));
            }
        }
        // Every stream is where it was expected and yet nothing went in: only a concurrent
        // change between the statement and these reads explains it; the caller retries.
        Err(conflict(&appends[0], base(appends[0].expected)))
    }

    /// The conflict of a lost race: this transaction is aborted, so the streams are read on a
    /// second connection, waited for briefly (see [`super::PgStoreTx`]'s single-stream append);
    /// the first stream found past its expectation is the one reported. Without a connection,
    /// the stream the unique key named (`collided`) is reported with the version its append
    /// collided with, a lower bound (the first stream, when the key could not be read).
    async fn lost_race(
        &self,
        appends: &[StreamAppend<'_>],
        collided: Option<(String, u64)>,
    ) -> StoreError {
        if let Ok(Ok(mut conn)) =
            tokio::time::timeout(CONFLICT_READ_WAIT, self.pool.acquire()).await
        {
            for a in appends {
                match stream_version(&mut *conn, a.stream).await {
                    Ok(actual) if actual != base(a.expected) => return conflict(a, actual),
                    Ok(_) => {}
                    Err(e) => return e,
                }
            }
        }
        if let Some((stream, version)) = collided {
            if let Some(a) = appends.iter().find(|a| a.stream == stream) {
                return conflict(a, version);
            }
        }
        conflict(&appends[0], base(appends[0].expected) + 1)
    }
}

fn conflict(a: &StreamAppend<'_>, actual: u64) -> StoreError {
    StoreError::Conflict {
        stream: a.stream.to_string(),
        expected: a.expected,
        actual,
    }
}
