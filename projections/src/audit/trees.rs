//! The sequencer's writes: its leader lock, its cursor (`audit_sequencer`), and per batch the
//! leaf rows (`audit_leaves`), the interior nodes they complete (`audit_nodes`) and every touched
//! tenant's size (`audit_trees`). All of them run inside the sequencer's one transaction per
//! batch, so a crash resumes exactly where the last commit left off.
//!
//! Bulk inserts differ by backend: one `UNNEST` of four arrays on Postgres, multi-row `VALUES`
//! on SQLite.

use events::store::{LogTx, SqlValue, StoreTx};

use super::error::{to_i64, to_u64, AuditTableError, Hash};

/// A leaf row to store.
pub struct NewLeaf<'a> {
    pub tenant: &'a str,
    pub index: i64,
    pub position: i64,
    pub hash: Hash,
}

/// An interior node row to store (level >= 1).
pub struct NewNode<'a> {
    pub tenant: &'a str,
    pub level: i32,
    pub index: i64,
    pub hash: Hash,
}

/// Postgres advisory lock key of the sequencer ("bcaudseq").
const SEQUENCER_LOCK: i64 = 0x6263_6175_6473_6571;

/// Takes the sequencer's lock for this transaction, without waiting: false when another
/// sequencer holds it. SQLite has one writer, so the write transaction itself is the lock there.
pub async fn try_sequencer_lock(tx: &mut StoreTx) -> Result<bool, AuditTableError> {
    match tx.backend() {
        events::store::Backend::Sqlite => Ok(true),
        events::store::Backend::Postgres => {
            let held: Option<(bool,)> = tx
                .fetch_optional(
                    "SELECT pg_try_advisory_xact_lock($1)",
                    &[SqlValue::Int(SEQUENCER_LOCK)],
                )
                .await?;
            Ok(held.is_some_and(|(h,)| h))
        }
    }
}

/// The stored sequencer cursor and the number of events sequenced so far.
pub async fn read_cursor(tx: &mut StoreTx) -> Result<Option<(String, u64)>, AuditTableError> {
    let row: Option<(String, i64)> = tx
        .fetch_optional(
            "SELECT cursor, sequenced FROM audit_sequencer WHERE id = 1",
            &[],
        )
        .await?;
    match row {
        None => Ok(None),
        Some((cursor, n)) => Ok(Some((cursor, to_u64(n, "audit_sequencer.sequenced")?))),
    }
}

/// Stores the cursor to resume from and the number of events sequenced up to it.
pub async fn write_cursor(
    tx: &mut StoreTx,
    cursor: &str,
    sequenced: u64,
) -> Result<(), AuditTableError> {
    let n = to_i64(sequenced, "sequenced events")?;
    tx.execute(
        "INSERT INTO audit_sequencer (id, cursor, sequenced) VALUES (1, $1, $2) \
         ON CONFLICT (id) DO UPDATE SET cursor = excluded.cursor, sequenced = excluded.sequenced",
        &[SqlValue::from(cursor), SqlValue::Int(n)],
    )
    .await?;
    Ok(())
}

/// Sets a tenant's tree size.
pub async fn set_tree_size(
    tx: &mut StoreTx,
    tenant: &str,
    size: u64,
) -> Result<(), AuditTableError> {
    let size = to_i64(size, "tree size")?;
    tx.execute(
        "INSERT INTO audit_trees (tenant_id, size) VALUES ($1, $2) \
         ON CONFLICT (tenant_id) DO UPDATE SET size = excluded.size",
        &[SqlValue::from(tenant), SqlValue::Int(size)],
    )
    .await?;
    Ok(())
}

const LEAF_COLUMNS: &[&str] = &["tenant_id", "leaf_index", "position", "leaf_hash"];
const NODE_COLUMNS: &[&str] = &["tenant_id", "level", "node_index", "hash"];

/// Inserts leaf rows.
pub async fn insert_leaves(
    tx: &mut StoreTx,
    leaves: &[NewLeaf<'_>],
) -> Result<(), AuditTableError> {
    if leaves.is_empty() {
        return Ok(());
    }
    if let Some(c) = tx.postgres() {
        sqlx::query(
            "INSERT INTO audit_leaves (tenant_id, leaf_index, position, leaf_hash) \
             SELECT * FROM UNNEST($1::text[], $2::bigint[], $3::bigint[], $4::bytea[])",
        )
        .bind(leaves.iter().map(|l| l.tenant).collect::<Vec<_>>())
        .bind(leaves.iter().map(|l| l.index).collect::<Vec<_>>())
        .bind(leaves.iter().map(|l| l.position).collect::<Vec<_>>())
        .bind(leaves.iter().map(|l| l.hash.to_vec()).collect::<Vec<_>>())
        .execute(c)
        .await
        .map_err(events::store::StoreError::from)?;
        return Ok(());
    }
    let rows = leaves
        .iter()
        .map(|l| {
            vec![
                SqlValue::from(l.tenant),
                SqlValue::Int(l.index),
                SqlValue::Int(l.position),
                SqlValue::Bytes(l.hash.to_vec()),
            ]
        })
        .collect();
    tx.insert_rows("audit_leaves", LEAF_COLUMNS, rows).await?;
    Ok(())
}

/// Inserts interior node rows.
pub async fn insert_nodes(tx: &mut StoreTx, nodes: &[NewNode<'_>]) -> Result<(), AuditTableError> {
    if nodes.is_empty() {
        return Ok(());
    }
    if let Some(c) = tx.postgres() {
        sqlx::query(
            "INSERT INTO audit_nodes (tenant_id, level, node_index, hash) \
             SELECT * FROM UNNEST($1::text[], $2::int[], $3::bigint[], $4::bytea[])",
        )
        .bind(nodes.iter().map(|n| n.tenant).collect::<Vec<_>>())
        .bind(nodes.iter().map(|n| n.level).collect::<Vec<_>>())
        .bind(nodes.iter().map(|n| n.index).collect::<Vec<_>>())
        .bind(nodes.iter().map(|n| n.hash.to_vec()).collect::<Vec<_>>())
        .execute(c)
        .await
        .map_err(events::store::StoreError::from)?;
        return Ok(());
    }
    let rows = nodes
        .iter()
        .map(|n| {
            vec![
                SqlValue::from(n.tenant),
                SqlValue::Int(i64::from(n.level)),
                SqlValue::Int(n.index),
                SqlValue::Bytes(n.hash.to_vec()),
            ]
        })
        .collect();
    tx.insert_rows("audit_nodes", NODE_COLUMNS, rows).await?;
    Ok(())
}
