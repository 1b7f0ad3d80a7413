//! SQL of the audit tables, for both backends.
//!
//! Every function takes a [`Conn`]: the connection of a [`StoreTx`] (the sequencer's and the
//! sealer's transactions) or one taken from the store's read pool (exports and proofs). Statements
//! use `$n` parameters, which both databases accept; only bulk inserts differ (`UNNEST` arrays on
//! Postgres, multi-row `VALUES` on SQLite).

use domain::audit::tree::ProofPlan;
use domain::audit::{Hash, NodeCoord};
use events::store::{EventStore, StoreError, StoreTx};
use sqlx::pool::PoolConnection;
use sqlx::{PgConnection, Postgres, Row, Sqlite, SqliteConnection};

use super::{to_hash, to_i64, to_u64, AuditError};

/// A connection to either backend.
pub(crate) enum Conn<'a> {
    Pg(&'a mut PgConnection),
    Lite(&'a mut SqliteConnection),
}

/// A connection held from a pool (reads outside any transaction).
pub(crate) enum Pooled {
    Pg(PoolConnection<Postgres>),
    Lite(PoolConnection<Sqlite>),
}

impl Pooled {
    pub(crate) async fn acquire(store: &EventStore) -> Result<Pooled, AuditError> {
        Ok(match store {
            EventStore::Postgres(s) => Pooled::Pg(s.pool().acquire().await?),
            EventStore::Sqlite(s) => Pooled::Lite(s.reader().acquire().await?),
        })
    }

    pub(crate) fn conn(&mut self) -> Conn<'_> {
        match self {
            Pooled::Pg(c) => Conn::Pg(c),
            Pooled::Lite(c) => Conn::Lite(c),
        }
    }
}

/// The connection of a store transaction.
pub(crate) fn tx_conn(tx: &mut StoreTx) -> Result<Conn<'_>, StoreError> {
    match tx {
        StoreTx::Postgres(t) => Ok(Conn::Pg(t.connection())),
        StoreTx::Sqlite(t) => Ok(Conn::Lite(t.connection())),
        StoreTx::Recorder(_) => Err(StoreError::RecordingOnly {
            op: "an audit read",
        }),
    }
}

/// Runs the same sqlx code on whichever connection `conn` holds.
macro_rules! on {
    ($conn:expr, $c:ident => $body:expr) => {
        match $conn {
            Conn::Pg($c) => $body,
            Conn::Lite($c) => $body,
        }
    };
}

/// Postgres advisory lock key of the sequencer ("bcaudseq").
const SEQUENCER_LOCK: i64 = 0x6263_6175_6473_6571;

/// Takes the sequencer's lock for this transaction, without waiting. SQLite has one writer, so the
/// write transaction itself is the lock there.
pub(crate) async fn try_sequencer_lock(conn: &mut Conn<'_>) -> Result<bool, AuditError> {
    match conn {
        Conn::Pg(c) => Ok(
            sqlx::query_scalar::<_, bool>("SELECT pg_try_advisory_xact_lock($1)")
                .bind(SEQUENCER_LOCK)
                .fetch_one(&mut **c)
                .await?,
        ),
        Conn::Lite(_) => Ok(true),
    }
}

/// The stored sequencer cursor and the number of events sequenced so far.
pub(crate) async fn read_cursor(conn: &mut Conn<'_>) -> Result<Option<(String, u64)>, AuditError> {
    let row = on!(conn, c => sqlx::query("SELECT cursor, sequenced FROM audit_sequencer WHERE id = 1")
        .fetch_optional(&mut **c)
        .await?.map(|r| Ok::<_, sqlx::Error>((r.try_get::<String, _>(0)?, r.try_get::<i64, _>(1)?))));
    match row {
        None => Ok(None),
        Some(r) => {
            let (cursor, n) = r?;
            Ok(Some((cursor, to_u64(n, "audit_sequencer.sequenced")?)))
        }
    }
}

pub(crate) async fn write_cursor(
    conn: &mut Conn<'_>,
    cursor: &str,
    sequenced: u64,
) -> Result<(), AuditError> {
    let n = to_i64(sequenced, "sequenced events")?;
    on!(conn, c => sqlx::query(
        "INSERT INTO audit_sequencer (id, cursor, sequenced) VALUES (1, $1, $2) \
         ON CONFLICT (id) DO UPDATE SET cursor = excluded.cursor, sequenced = excluded.sequenced")
        .bind(cursor).bind(n).execute(&mut **c).await.map(|_| ())?);
    Ok(())
}

/// A tenant's tree size (0 when it has no leaves yet).
pub(crate) async fn tree_size(conn: &mut Conn<'_>, tenant: &str) -> Result<u64, AuditError> {
    let size = on!(conn, c => sqlx::query_scalar::<_, i64>("SELECT size FROM audit_trees WHERE tenant_id = $1")
        .bind(tenant).fetch_optional(&mut **c).await?);
    to_u64(size.unwrap_or(0), "audit_trees.size")
}

/// Every tenant's tree size.
pub(crate) async fn tree_sizes(conn: &mut Conn<'_>) -> Result<Vec<(String, u64)>, AuditError> {
    let rows = on!(conn, c => sqlx::query("SELECT tenant_id, size FROM audit_trees ORDER BY tenant_id")
        .fetch_all(&mut **c).await?.into_iter()
        .map(|r| Ok::<_, sqlx::Error>((r.try_get::<String, _>(0)?, r.try_get::<i64, _>(1)?)))
        .collect::<Result<Vec<_>, _>>()?);
    rows.into_iter()
        .map(|(t, s)| Ok((t, to_u64(s, "audit_trees.size")?)))
        .collect()
}

/// Stored node hashes, in the order asked: level 0 from `audit_leaves`, the rest from
/// `audit_nodes`. One query per level-0 run and one per node; proofs need O(log n) of them.
pub(crate) async fn nodes(
    conn: &mut Conn<'_>,
    tenant: &str,
    ids: &[NodeCoord],
) -> Result<Vec<Hash>, AuditError> {
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        let index = to_i64(id.index, "node index")?;
        let hash: Option<Vec<u8>> = if id.level == 0 {
            on!(conn, c => sqlx::query_scalar("SELECT leaf_hash FROM audit_leaves WHERE tenant_id = $1 AND leaf_index = $2")
                .bind(tenant).bind(index).fetch_optional(&mut **c).await?)
        } else {
            let level = i32::try_from(id.level).unwrap_or(i32::MAX);
            on!(conn, c => sqlx::query_scalar("SELECT hash FROM audit_nodes WHERE tenant_id = $1 AND level = $2 AND node_index = $3")
                .bind(tenant).bind(level).bind(index).fetch_optional(&mut **c).await?)
        };
        let Some(hash) = hash else {
            return Err(AuditError::Corrupt(format!(
                "tenant {tenant}: node (level {}, index {}) is missing from the audit tables",
                id.level, id.index
            )));
        };
        out.push(to_hash(&hash, "stored node hash")?);
    }
    Ok(out)
}

/// Reads the nodes a plan needs and folds them.
pub(crate) async fn read_plan(
    conn: &mut Conn<'_>,
    tenant: &str,
    plan: &ProofPlan,
) -> Result<Vec<Hash>, AuditError> {
    let hashes = nodes(conn, tenant, plan.node_ids()).await?;
    plan.assemble(&hashes).map_err(|source| AuditError::Tree {
        tenant: tenant.to_string(),
        source,
    })
}

/// A leaf row to store.
pub(crate) struct NewLeaf<'a> {
    pub tenant: &'a str,
    pub index: i64,
    pub position: i64,
    pub hash: Hash,
}

/// An interior node row to store (level >= 1).
pub(crate) struct NewNode<'a> {
    pub tenant: &'a str,
    pub level: i32,
    pub index: i64,
    pub hash: Hash,
}

const SQLITE_CHUNK: usize = 400;

pub(crate) async fn insert_leaves(
    conn: &mut Conn<'_>,
    leaves: &[NewLeaf<'_>],
) -> Result<(), AuditError> {
    match conn {
        Conn::Pg(c) => {
            sqlx::query(
                "INSERT INTO audit_leaves (tenant_id, leaf_index, position, leaf_hash) \
                 SELECT * FROM UNNEST($1::text[], $2::bigint[], $3::bigint[], $4::bytea[])",
            )
            .bind(leaves.iter().map(|l| l.tenant).collect::<Vec<_>>())
            .bind(leaves.iter().map(|l| l.index).collect::<Vec<_>>())
            .bind(leaves.iter().map(|l| l.position).collect::<Vec<_>>())
            .bind(leaves.iter().map(|l| l.hash.to_vec()).collect::<Vec<_>>())
            .execute(&mut **c)
            .await?;
        }
        Conn::Lite(c) => {
            for chunk in leaves.chunks(SQLITE_CHUNK) {
                let sql = values_sql(
                    "INSERT INTO audit_leaves (tenant_id, leaf_index, position, leaf_hash) VALUES ",
                    4,
                    chunk.len(),
                );
                let mut q = sqlx::query(&sql);
                for l in chunk {
                    q = q
                        .bind(l.tenant)
                        .bind(l.index)
                        .bind(l.position)
                        .bind(l.hash.to_vec());
                }
                q.execute(&mut **c).await?;
            }
        }
    }
    Ok(())
}

pub(crate) async fn insert_nodes(
    conn: &mut Conn<'_>,
    nodes: &[NewNode<'_>],
) -> Result<(), AuditError> {
    if nodes.is_empty() {
        return Ok(());
    }
    match conn {
        Conn::Pg(c) => {
            sqlx::query(
                "INSERT INTO audit_nodes (tenant_id, level, node_index, hash) \
                 SELECT * FROM UNNEST($1::text[], $2::int[], $3::bigint[], $4::bytea[])",
            )
            .bind(nodes.iter().map(|n| n.tenant).collect::<Vec<_>>())
            .bind(nodes.iter().map(|n| n.level).collect::<Vec<_>>())
            .bind(nodes.iter().map(|n| n.index).collect::<Vec<_>>())
            .bind(nodes.iter().map(|n| n.hash.to_vec()).collect::<Vec<_>>())
            .execute(&mut **c)
            .await?;
        }
        Conn::Lite(c) => {
            for chunk in nodes.chunks(SQLITE_CHUNK) {
                let sql = values_sql(
                    "INSERT INTO audit_nodes (tenant_id, level, node_index, hash) VALUES ",
                    4,
                    chunk.len(),
                );
                let mut q = sqlx::query(&sql);
                for n in chunk {
                    q = q
                        .bind(n.tenant)
                        .bind(n.level)
                        .bind(n.index)
                        .bind(n.hash.to_vec());
                }
                q.execute(&mut **c).await?;
            }
        }
    }
    Ok(())
}

pub(crate) async fn set_tree_size(
    conn: &mut Conn<'_>,
    tenant: &str,
    size: u64,
) -> Result<(), AuditError> {
    let size = to_i64(size, "tree size")?;
    on!(conn, c => sqlx::query(
        "INSERT INTO audit_trees (tenant_id, size) VALUES ($1, $2) \
         ON CONFLICT (tenant_id) DO UPDATE SET size = excluded.size")
        .bind(tenant).bind(size).execute(&mut **c).await.map(|_| ())?);
    Ok(())
}

/// `prefix ($1, $2, ...), (...)` for `rows` rows of `cols` columns.
fn values_sql(prefix: &str, cols: usize, rows: usize) -> String {
    let mut sql = String::with_capacity(prefix.len() + rows * cols * 6);
    sql.push_str(prefix);
    let mut n = 1;
    for r in 0..rows {
        if r > 0 {
            sql.push(',');
        }
        sql.push('(');
        for k in 0..cols {
            if k > 0 {
                sql.push(',');
            }
            sql.push('$');
            sql.push_str(&n.to_string());
            n += 1;
        }
        sql.push(')');
    }
    sql
}

/// The last checkpoint of a tenant: (seq, size, root, SHA-256 of its signed note).
pub(crate) struct LastCheckpoint {
    pub seq: u64,
    pub size: u64,
    pub root: Hash,
    pub note_sha256: Hash,
}

pub(crate) async fn last_checkpoint(
    conn: &mut Conn<'_>,
    tenant: &str,
) -> Result<Option<LastCheckpoint>, AuditError> {
    let row = on!(conn, c => sqlx::query(
        "SELECT seq, tree_size, root_hash, note_sha256 FROM audit_checkpoints \
         WHERE tenant_id = $1 ORDER BY seq DESC LIMIT 1")
        .bind(tenant).fetch_optional(&mut **c).await?
        .map(|r| Ok::<_, sqlx::Error>((r.try_get::<i64, _>(0)?, r.try_get::<i64, _>(1)?,
            r.try_get::<Vec<u8>, _>(2)?, r.try_get::<Vec<u8>, _>(3)?))));
    let Some(row) = row else { return Ok(None) };
    let (seq, size, root, note) = row?;
    Ok(Some(LastCheckpoint {
        seq: to_u64(seq, "audit_checkpoints.seq")?,
        size: to_u64(size, "audit_checkpoints.tree_size")?,
        root: to_hash(&root, "audit_checkpoints.root_hash")?,
        note_sha256: to_hash(&note, "audit_checkpoints.note_sha256")?,
    }))
}

/// Tenants whose tree is larger than their last checkpoint (or who have none).
pub(crate) async fn grown_tenants(conn: &mut Conn<'_>) -> Result<Vec<String>, AuditError> {
    Ok(on!(conn, c => sqlx::query_scalar::<_, String>(
        "SELECT t.tenant_id FROM audit_trees t \
         LEFT JOIN (SELECT tenant_id, MAX(tree_size) AS s FROM audit_checkpoints GROUP BY tenant_id) k \
         ON k.tenant_id = t.tenant_id \
         WHERE t.size > COALESCE(k.s, 0) ORDER BY t.tenant_id")
        .fetch_all(&mut **c).await?))
}
