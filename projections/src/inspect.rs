//! Reads that look at tables as a whole rather than at one projection's rows: row counts (the
//! rebuild summary of `bcctl rebuild`, tests of the projections runner) and the audit trail's
//! coverage of the log (tests of the sequencer).
//!
//! Table names come from code ([`crate::TableSpec`] and the like), never from input.

use events::store::{EventStore, StoreError, StoreTx};

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
