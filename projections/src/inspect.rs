//! Reads that look at tables as a whole rather than at one projection's rows: row counts (the
//! rebuild summary of `bcctl rebuild`, tests of the projections runner) and the audit trail's
//! coverage of the log (tests of the sequencer).
//!
//! Table names come from code ([`crate::TableSpec`] and the like), never from input.

use events::store::{EventStore, LogStore, SqlValue, StoreError, StoreTx};

/// The number of rows of `table`, read inside `tx` (it sees the transaction's own writes).
pub async fn row_count(tx: &mut StoreTx, table: &str) -> Result<i64, StoreError> {
    let sql = format!("SELECT count(*) FROM {table}");
    let row: Option<(i64,)> = tx.fetch_optional(&sql, &[]).await?;
    Ok(row.map_or(0, |(n,)| n))
}

/// How the audit leaves cover the log; every count but `leaves` and `events` is zero when
/// each committed event is in its tenant's tree exactly once, with dense indexes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AuditCoverage {
    /// Events without a leaf.
    pub missing: i64,
    /// Events whose leaf is in another tenant's tree.
    pub wrong_tenant: i64,
    /// Tenants whose indexes are not 0..n, or whose recorded size is not n.
    pub not_dense: i64,
    pub leaves: i64,
    pub events: i64,
}

/// The audit trail's coverage of the log, read outside any transaction.
pub async fn audit_coverage(store: &EventStore) -> Result<AuditCoverage, StoreError> {
    let count = |sql: &'static str| async move {
        let row: Option<(i64,)> = store.fetch_optional(sql, &[]).await?;
        Ok::<_, StoreError>(row.map_or(0, |(n,)| n))
    };
    Ok(AuditCoverage {
        missing: count(
            "SELECT count(*) FROM events e LEFT JOIN audit_leaves l ON l.position = e.position \
             WHERE l.position IS NULL",
        )
        .await?,
        wrong_tenant: count(
            "SELECT count(*) FROM events e JOIN audit_leaves l ON l.position = e.position \
             WHERE l.tenant_id <> e.tenant_id",
        )
        .await?,
        not_dense: count(
            "SELECT count(*) FROM (SELECT tenant_id, count(*) AS n, max(leaf_index) AS m, \
             min(leaf_index) AS z FROM audit_leaves GROUP BY tenant_id) s \
             JOIN audit_trees t ON t.tenant_id = s.tenant_id \
             WHERE s.n <> s.m + 1 OR s.z <> 0 OR t.size <> s.n",
        )
        .await?,
        leaves: count("SELECT count(*) FROM audit_leaves").await?,
        events: count("SELECT count(*) FROM events").await?,
    })
}

/// How many missing events [`audit_gaps`] lists one by one (all of them are counted by
/// transaction).
const GAP_EVENTS_LISTED: i64 = 50;

/// Why events are missing from the audit trail, for a test (or an operator) that found
/// [`AuditCoverage::missing`] non-zero: the missing events grouped by the transaction that wrote
/// them, the stored sequencer cursor, every sequencer commit (on Postgres, the leaves grouped by
/// the transaction that inserted them: one group per committed step, in commit order) and each
/// tenant's tree and checkpoints. Its `Display` is the report.
#[derive(Clone, Debug, Default)]
pub struct AuditGaps {
    /// The missing events, grouped by writing transaction (Postgres; on SQLite one group per
    /// event): `(tx id, events, first position, last position, tenants)`.
    pub missing_by_tx: Vec<(String, i64, i64, i64, String)>,
    /// The first missing events one by one: `(position, tx id, row xmin, tenant, stream)`.
    pub missing: Vec<(i64, String, String, String, String)>,
    /// The stored sequencer cursor and its count of sequenced events.
    pub cursor: Option<(String, i64)>,
    /// One row per committed sequencer step (Postgres: per inserting transaction), in commit
    /// order: `(step xid, leaves, first position, last position, lowest event tx, highest event
    /// tx)`.
    pub steps: Vec<(String, i64, i64, i64, String, String)>,
    /// Every tenant's tree: `(tenant, recorded size, leaves, highest index)`.
    pub trees: Vec<(String, i64, i64, i64)>,
    /// Every checkpoint: `(tenant, seq, tree size, position of its event)`.
    pub checkpoints: Vec<(String, i64, i64, i64)>,
    /// The events' range: `(count, lowest position, highest position, lowest tx, highest tx)`.
    pub events: (i64, i64, i64, String, String),
}

/// Reads [`AuditGaps`] outside any transaction.
pub async fn audit_gaps(store: &EventStore) -> Result<AuditGaps, StoreError> {
    let postgres = store.backend() == events::store::Backend::Postgres;
    let (missing_by_tx, missing, steps, events) = if postgres {
        (
            store
                .fetch_all(
                    "SELECT e.tx_id::text, count(*), min(e.position), max(e.position), \
                     string_agg(DISTINCT e.tenant_id, ',') \
                     FROM events e LEFT JOIN audit_leaves l ON l.position = e.position \
                     WHERE l.position IS NULL GROUP BY e.tx_id ORDER BY e.tx_id",
                    &[],
                )
                .await?,
            store
                .fetch_all(
                    "SELECT e.position, e.tx_id::text, e.xmin::text, e.tenant_id, e.stream_id \
                     FROM events e LEFT JOIN audit_leaves l ON l.position = e.position \
                     WHERE l.position IS NULL ORDER BY e.tx_id, e.position LIMIT $1",
                    &[SqlValue::Int(GAP_EVENTS_LISTED)],
                )
                .await?,
            store
                .fetch_all(
                    "SELECT l.xmin::text, count(*), min(l.position), max(l.position), \
                     min(e.tx_id)::text, max(e.tx_id)::text \
                     FROM audit_leaves l LEFT JOIN events e ON e.position = l.position \
                     GROUP BY l.xmin ORDER BY l.xmin::text::bigint",
                    &[],
                )
                .await?,
            store
                .fetch_optional(
                    "SELECT count(*), coalesce(min(position), 0), coalesce(max(position), 0), \
                     coalesce(min(tx_id)::text, ''), coalesce(max(tx_id)::text, '') FROM events",
                    &[],
                )
                .await?
                .unwrap_or_default(),
        )
    } else {
        (
            store
                .fetch_all(
                    "SELECT CAST(e.position AS TEXT), 1, e.position, e.position, e.tenant_id \
                     FROM events e LEFT JOIN audit_leaves l ON l.position = e.position \
                     WHERE l.position IS NULL ORDER BY e.position",
                    &[],
                )
                .await?,
            store
                .fetch_all(
                    "SELECT e.position, '', '', e.tenant_id, e.stream_id \
                     FROM events e LEFT JOIN audit_leaves l ON l.position = e.position \
                     WHERE l.position IS NULL ORDER BY e.position LIMIT $1",
                    &[SqlValue::Int(GAP_EVENTS_LISTED)],
                )
                .await?,
            Vec::new(),
            store
                .fetch_optional(
                    "SELECT count(*), coalesce(min(position), 0), coalesce(max(position), 0), \
                     '', '' FROM events",
                    &[],
                )
                .await?
                .unwrap_or_default(),
        )
    };
    Ok(AuditGaps {
        missing_by_tx,
        missing,
        cursor: store
            .fetch_optional(
                "SELECT cursor, sequenced FROM audit_sequencer WHERE id = 1",
                &[],
            )
            .await?,
        steps,
        trees: store
            .fetch_all(
                "SELECT t.tenant_id, t.size, count(l.leaf_index), coalesce(max(l.leaf_index), -1) \
                 FROM audit_trees t LEFT JOIN audit_leaves l ON l.tenant_id = t.tenant_id \
                 GROUP BY t.tenant_id, t.size ORDER BY t.tenant_id",
                &[],
            )
            .await?,
        checkpoints: store
            .fetch_all(
                "SELECT tenant_id, seq, tree_size, position FROM audit_checkpoints \
                 ORDER BY tenant_id, seq",
                &[],
            )
            .await?,
        events,
    })
}

impl std::fmt::Display for AuditGaps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (n, lo, hi, tx_lo, tx_hi) = &self.events;
        writeln!(
            f,
            "events: {n}, positions {lo}..={hi}, tx ids {tx_lo}..={tx_hi}"
        )?;
        let missing: i64 = self.missing_by_tx.iter().map(|m| m.1).sum();
        writeln!(
            f,
            "missing: {missing} events in {} transactions (tx id: events, positions, tenants):",
            self.missing_by_tx.len()
        )?;
        for (tx, count, first, last, tenants) in &self.missing_by_tx {
            writeln!(f, "  tx {tx}: {count}, {first}..={last}, {tenants}")?;
        }
        writeln!(
            f,
            "first missing (position, tx id, row xmin, tenant, stream):"
        )?;
        for (position, tx, xmin, tenant, stream) in &self.missing {
            writeln!(f, "  {position} tx {tx} xmin {xmin} {tenant} {stream}")?;
        }
        match &self.cursor {
            Some((cursor, sequenced)) => {
                writeln!(f, "stored cursor: {cursor} (sequenced {sequenced})")?
            }
            None => writeln!(f, "stored cursor: none")?,
        }
        writeln!(
            f,
            "sequencer commits (step xid: leaves, positions, event tx ids), in commit order:"
        )?;
        for (xid, leaves, first, last, tx_lo, tx_hi) in &self.steps {
            writeln!(
                f,
                "  step {xid}: {leaves}, {first}..={last}, tx {tx_lo}..={tx_hi}"
            )?;
        }
        writeln!(f, "trees (tenant: size, leaves, highest index):")?;
        for (tenant, size, leaves, highest) in &self.trees {
            writeln!(f, "  {tenant}: {size}, {leaves}, {highest}")?;
        }
        writeln!(f, "checkpoints (tenant: seq, tree size, position):")?;
        for (tenant, seq, size, position) in &self.checkpoints {
            writeln!(f, "  {tenant}: {seq}, {size}, {position}")?;
        }
        Ok(())
    }
}
