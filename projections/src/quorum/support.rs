//! Named statements that tests and benchmarks run on the quorum tables, so no SQL text lives
//! outside this crate. The server never calls them: two of them change projection rows other
//! than through events (to stand for rows written before migration 0005, or for a corrupted
//! row), and the others are the scope benchmark's raw-SQL reference on a scratch table.

use events::store::{EventStore, LogStore, LogTx, SqlValue, StoreError, StoreTx};

/// Sets `nodes` to NULL on a batch's scope rows (all of them, or the one at `leaf_index`), as
/// rows written before migration 0005 have it.
pub async fn forget_stored_nodes(
    store: &EventStore,
    batch_id: &[u8],
    leaf_index: Option<u32>,
) -> Result<(), StoreError> {
    let mut tx = store.begin().await?;
    match leaf_index {
        Some(index) => {
            tx.execute(
                "UPDATE command_batch_scope SET nodes = NULL WHERE batch_id = $1 \
                 AND leaf_index = $2",
                &[
                    SqlValue::Bytes(batch_id.to_vec()),
                    SqlValue::Int(i64::from(index)),
                ],
            )
            .await?
        }
        None => {
            tx.execute(
                "UPDATE command_batch_scope SET nodes = NULL WHERE batch_id = $1",
                &[SqlValue::Bytes(batch_id.to_vec())],
            )
            .await?
        }
    };
    tx.commit().await
}

/// Overwrites the tree nodes stored with one scope row (to test that corruption is reported).
pub async fn overwrite_stored_nodes(
    store: &EventStore,
    batch_id: &[u8],
    leaf_index: u32,
    nodes: &[u8],
) -> Result<(), StoreError> {
    let mut tx = store.begin().await?;
    tx.execute(
        "UPDATE command_batch_scope SET nodes = $1 WHERE batch_id = $2 AND leaf_index = $3",
        &[
            SqlValue::Bytes(nodes.to_vec()),
            SqlValue::Bytes(batch_id.to_vec()),
            SqlValue::Int(i64::from(leaf_index)),
        ],
    )
    .await?;
    tx.commit().await
}

/// Creates the benchmark's scratch table `bench_scope_raw` (the scope table's columns and keys,
/// no projection behind it), if it is not there yet.
pub async fn create_raw_scope_table(store: &EventStore) -> Result<(), StoreError> {
    let mut tx = store.begin().await?;
    tx.execute(
        "CREATE TABLE IF NOT EXISTS bench_scope_raw (batch_id BYTEA NOT NULL, \
         leaf_index BIGINT NOT NULL, leaf_hash BYTEA NOT NULL, subject TEXT NOT NULL, kind TEXT \
         NOT NULL, payload_sha256 BYTEA, payload_type_url TEXT, payload_value BYTEA, nodes BYTEA, \
         position BIGINT NOT NULL, PRIMARY KEY (batch_id, leaf_index))",
        &[],
    )
    .await?;
    tx.execute(
        "CREATE UNIQUE INDEX IF NOT EXISTS bench_scope_raw_leaf ON bench_scope_raw \
         (batch_id, leaf_hash)",
        &[],
    )
    .await?;
    tx.commit().await
}

/// The rows of the benchmark's raw reference insert: one per leaf, with the same nodes on each.
pub struct RawScopeRows<'a> {
    pub batch_id: &'a [u8],
    pub leaf_hashes: &'a [Vec<u8>],
    pub subjects: Vec<&'a str>,
    pub kinds: Vec<&'a str>,
    /// Empty for a leaf without a payload digest.
    pub digests: &'a [Vec<u8>],
    pub nodes: &'a [u8],
}

/// How the reference inserts on Postgres (SQLite always takes multi-row INSERTs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawInsert {
    /// One `INSERT ... SELECT FROM UNNEST(...)`.
    Unnest,
    /// One binary COPY.
    Copy,
}

/// Rows per multi-row INSERT on SQLite.
const SQLITE_ROWS_PER_INSERT: usize = 3000;

/// The benchmark's reference: the rows inserted into `bench_scope_raw` with raw SQL in `tx`
/// (on Postgres by `how`, on SQLite with multi-row INSERTs of 3,000 rows).
pub async fn insert_raw_scope_rows(
    tx: &mut StoreTx,
    rows: &RawScopeRows<'_>,
    how: RawInsert,
) -> Result<(), StoreError> {
    let n = rows.leaf_hashes.len();
    match tx {
        StoreTx::Postgres(t) if how == RawInsert::Copy => {
            let mut data = b"PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0".to_vec();
            let field = |out: &mut Vec<u8>, bytes: &[u8]| {
                out.extend_from_slice(&(bytes.len() as i32).to_be_bytes());
                out.extend_from_slice(bytes);
            };
            for i in 0..n {
                data.extend_from_slice(&8i16.to_be_bytes());
                field(&mut data, rows.batch_id);
                field(&mut data, &(i as i64).to_be_bytes());
                field(&mut data, &rows.leaf_hashes[i]);
                field(&mut data, rows.subjects[i].as_bytes());
                field(&mut data, rows.kinds[i].as_bytes());
                field(&mut data, &rows.digests[i]);
                field(&mut data, rows.nodes);
                field(&mut data, &1i64.to_be_bytes());
            }
            data.extend_from_slice(&(-1i16).to_be_bytes());
            let mut sink = t
                .connection()
                .copy_in_raw(
                    "COPY bench_scope_raw (batch_id, leaf_index, leaf_hash, subject, kind, \
                     payload_sha256, nodes, position) FROM STDIN (FORMAT binary)",
                )
                .await?;
            sink.send(data).await?;
            sink.finish().await?;
        }
        StoreTx::Postgres(t) => {
            let indexes: Vec<i64> = (0..n as i64).collect();
            let nodes: Vec<&[u8]> = (0..n).map(|_| rows.nodes).collect();
            sqlx::query(
                "INSERT INTO bench_scope_raw (batch_id, leaf_index, leaf_hash, subject, kind, \
                 payload_sha256, nodes, position) SELECT $1, i, h, s, k, d, n, 1 FROM \
                 UNNEST($2::int8[], $3::bytea[], $4::text[], $5::text[], $6::bytea[], \
                 $7::bytea[]) AS t(i, h, s, k, d, n)",
            )
            .bind(rows.batch_id)
            .bind(indexes)
            .bind(rows.leaf_hashes)
            .bind(&rows.subjects)
            .bind(&rows.kinds)
            .bind(rows.digests)
            .bind(nodes)
            .execute(t.connection())
            .await?;
        }
        StoreTx::Sqlite(t) => {
            let indexes: Vec<usize> = (0..n).collect();
            for chunk in indexes.chunks(SQLITE_ROWS_PER_INSERT) {
                let mut builder = sqlx::QueryBuilder::<sqlx::Sqlite>::new(
                    "INSERT INTO bench_scope_raw (batch_id, leaf_index, leaf_hash, subject, \
                     kind, payload_sha256, nodes, position) ",
                );
                builder.push_values(chunk, |mut row, &i| {
                    row.push_bind(rows.batch_id)
                        .push_bind(i as i64)
                        .push_bind(rows.leaf_hashes[i].as_slice())
                        .push_bind(rows.subjects[i])
                        .push_bind(rows.kinds[i])
                        .push_bind(rows.digests[i].as_slice())
                        .push_bind(rows.nodes)
                        .push_bind(1i64);
                });
                builder.build().execute(t.connection()).await?;
            }
        }
        StoreTx::Recorder(_) => {
            return Err(StoreError::RecordingOnly {
                op: "the raw scope reference insert",
            })
        }
    }
    Ok(())
}
