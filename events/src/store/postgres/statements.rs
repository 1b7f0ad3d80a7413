//! The SQL statements of the Postgres log store, built once: the append in each of its shapes
//! (how the base version is found, whether the first event id is probed, one event or several),
//! the binding of an append's event columns, and the tail step's pages.

use std::sync::LazyLock;

use sqlx::postgres::PgArguments;
use sqlx::query::Query;
use sqlx::Postgres;

use crate::actor::Actor;
use crate::envelope::NewEvent;

/// The columns every read selects, in the order [`super::rows::row_to_event`] takes them. The
/// transaction id is selected as text under a name of its own: named `tx_id`, that text column
/// is what an unqualified `ORDER BY tx_id` sorts by (an output column's name wins over an input
/// column's there), in text order, where "10" comes before "9".
pub(super) const EVENT_COLUMNS: &str =
    "position, stream_id, stream_version, event_id, event_type, \
     schema_version, tenant_id, occurred_at_us, payload, payload_sha256, \
     tx_id::text AS tx_id_text, actor_id, actor_role";

/// Binds an append's `$3..$11`: one event's columns as plain values, several events' as arrays
/// (the two shapes of [`append_sql`]), then the actor's id and role (NULL for none), which are
/// the same for every event of the append.
pub(super) fn bind_events<'q>(
    query: Query<'q, Postgres, PgArguments>,
    events: &'q [NewEvent],
    actor: Option<&'q Actor>,
) -> Query<'q, Postgres, PgArguments> {
    let query = bind_event_columns(query, events);
    query
        .bind(actor.map(Actor::id))
        .bind(actor.map(Actor::role))
}

fn bind_event_columns<'q>(
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
pub(super) struct EventArrays<'e> {
    ids: Vec<&'e [u8]>,
    types: Vec<&'e str>,
    schemas: Vec<i32>,
    tenants: Vec<&'e str>,
    times: Vec<i64>,
    payloads: Vec<&'e [u8]>,
    hashes: Vec<&'e [u8]>,
}

impl<'e> EventArrays<'e> {
    pub(super) fn of(events: impl IntoIterator<Item = &'e NewEvent>) -> EventArrays<'e> {
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

    pub(super) fn bind<'q>(
        self,
        query: Query<'q, Postgres, PgArguments>,
    ) -> Query<'q, Postgres, PgArguments>
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
pub(super) fn version_param(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// An event's schema version as its `int4` column.
pub(super) fn schema_param(event: &NewEvent) -> i32 {
    i32::try_from(event.schema_version).unwrap_or(i32::MAX)
}

/// Which page of a tail step a query reads.
#[derive(Clone, Copy)]
pub(super) enum TailPage {
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
///
/// The order is the `xid8` column's, named with its table so that it can never be the selected
/// text: the `LIMIT` cuts a page in this order and the next page starts after its last row by
/// the same `(tx_id, position)` comparison, so the two must agree. Sorted as text, a page whose
/// ids straddle a power of ten ended at "100338" while "99741" was still to come, and the next
/// page, after `(100338, ...)` as numbers, skipped it for good (the audit trail's "events not in
/// any tree" under load).
pub(super) fn tail_sql(page: TailPage) -> &'static str {
    static SQL: LazyLock<[String; 2]> = LazyLock::new(|| {
        ["", "AND (tx_id, position) > ($4::text::xid8, $5::bigint) "].map(|after| {
            format!(
                "SELECT {EVENT_COLUMNS} FROM events \
                 WHERE tx_id >= pg_snapshot_xmin($1::pg_snapshot) \
                   AND tx_id < pg_snapshot_xmax($2::pg_snapshot) \
                   AND NOT pg_visible_in_snapshot(tx_id, $1::pg_snapshot) \
                   AND pg_visible_in_snapshot(tx_id, $2::pg_snapshot) \
                   {after}\
                 ORDER BY events.tx_id, events.position LIMIT $3"
            )
        })
    });
    match page {
        TailPage::First => &SQL[0],
        TailPage::After => &SQL[1],
    }
}

/// The columns an append writes, in the order of its parameters.
pub(super) const APPEND_COLUMNS: &str =
    "stream_id, stream_version, event_id, event_type, schema_version, \
     tenant_id, occurred_at_us, payload, payload_sha256, actor_id, actor_role";

/// The shapes of the append statement: how the base version is found and checked, whether the
/// first event id is looked up first, and one event (plain parameters) or several (arrays,
/// unnested in order).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) struct AppendShape {
    pub(super) base: Base,
    /// Look the first event id up, so that a retried append inserts nothing instead of failing
    /// on the unique key (which would abort the transaction).
    pub(super) probe_id: bool,
    /// Several events, as arrays in `$3..$9`; else one event in plain parameters.
    pub(super) many: bool,
}

/// Where an append's first version comes from.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Base {
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
pub(super) const ANY_APPEND_LOCK: &str = "SELECT pg_advisory_xact_lock(25187, hashtext($1))";

/// The append statement for a shape, built once. `$1` stream, `$2` the expected version (the
/// `Any` shapes read the base from the table instead; `$2` is still bound, typed, and unused),
/// `$3..$9` the event columns, `$10`/`$11` the actor's id and role (NULL for none).
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
pub(super) fn append_sql(shape: AppendShape) -> &'static str {
    static SQL: LazyLock<Vec<String>> =
        LazyLock::new(|| AppendShape::ALL.map(append_statement).to_vec());
    &SQL[shape.index()]
}

impl AppendShape {
    /// Every shape, in the order of [`AppendShape::index`].
    pub(super) const ALL: [AppendShape; 12] = {
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
    pub(super) fn index(self) -> usize {
        let base = match self.base {
            Base::Checked => 0,
            Base::Known => 1,
            Base::Any => 2,
        };
        base * 4 + usize::from(self.probe_id) * 2 + usize::from(self.many)
    }
}

/// The text of [`append_sql`]'s statement for `shape`.
pub(super) fn append_statement(shape: AppendShape) -> String {
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
             SELECT $1, b.base + e.ord, e.id, e.ty, e.sv, e.tenant, e.at, e.payload, e.sha, \
                    $10::text, $11::text \
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
             VALUES ($1, {base} + 1, $3, $4, $5, $6, $7, $8, $9, $10::text, $11::text) \
             RETURNING position, stream_version"
        )
    } else {
        format!(
            "INSERT INTO events ({APPEND_COLUMNS}) \
             SELECT $1, {base} + 1, $3, $4, $5, $6, $7, $8, $9, $10::text, $11::text \
             WHERE {guard} \
             RETURNING position, stream_version"
        )
    }
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
