//! The raw-SQL references and the seeding of the identity benchmarks
//! (`commands/benches/identity.rs`, `gateway/benches/gateway.rs`): a single-row insert and commit,
//! the floor a command's commit is compared with, and bulk-made revoked certificates for the
//! gateway's revocation feed. Postgres only; never used outside benchmarks.

use events::store::{EventStore, LogStore, LogTx, StoreError};

/// Creates `bench_raw_commits`, the table [`raw_commit`] writes.
pub async fn create_raw_commit_table(store: &EventStore) -> Result<(), StoreError> {
    let mut tx = store.begin().await?;
    tx.execute(
        "CREATE TABLE bench_raw_commits (id BIGSERIAL PRIMARY KEY, payload BYTEA NOT NULL)",
        &[],
    )
    .await?;
    tx.commit().await
}

/// One single-row `INSERT` into `bench_raw_commits` and its `COMMIT`.
pub async fn raw_commit(store: &EventStore, payload: Vec<u8>) -> Result<(), StoreError> {
    let mut tx = store.begin().await?;
    tx.execute(
        "INSERT INTO bench_raw_commits (payload) VALUES ($1)",
        &[payload.into()],
    )
    .await?;
    tx.commit().await
}

/// Inserts `n` revoked certificates of `n` made-up nodes, valid until `not_after_us`, straight
/// into `node_certs` (no events: the feed's start-up load is what is measured). Postgres only.
pub async fn seed_revoked_certs(
    store: &EventStore,
    n: u64,
    not_after_us: i64,
) -> Result<(), StoreError> {
    let mut tx = store.begin().await?;
    tx.execute(
        "INSERT INTO node_certs (serial, node_id, identity_generation, der, not_before_us, \
         not_after_us, revoked_at_us, revoke_reason, issued_position, revoked_position) \
         SELECT lpad(to_hex(g), 32, '0'), 'bench_' || g, 1, '\\x00'::bytea, 0, $1, 1, 'bench', g, g \
         FROM generate_series(1, $2) AS g",
        &[not_after_us.into(), i64::try_from(n).unwrap_or(i64::MAX).into()],
    )
    .await?;
    tx.commit().await
}
