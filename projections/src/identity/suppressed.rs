//! `refusal_suppressed_pending`: refusals over the per-minute bound, counted per (kind, refusal,
//! window, tenant) until their minute is over and the count goes to the log as one
//! `security.refusals.suppressed` event. This table is not a projection: the command layer
//! writes it in the refusal's transaction (no event carries a single suppressed refusal), and
//! removes a count in the transaction that writes its event. The advisory lock that makes the
//! bound exact across replicas is here too.

use events::store::{LogTx, StoreError, StoreTx};

/// A pending suppressed count.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct PendingSuppressed {
    pub kind: String,
    pub refusal: String,
    pub window_start_us: i64,
    pub tenant_id: String,
    pub count: i64,
}

/// Serializes the refusals of one reason (`lock_key`) until the transaction ends, on Postgres
/// (a transaction-scoped advisory lock); SQLite's single writer already serializes.
pub async fn lock_refusal_reason(tx: &mut StoreTx, lock_key: i64) -> Result<(), StoreError> {
    if let StoreTx::Postgres(_) = tx {
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[lock_key.into()])
            .await?;
    }
    Ok(())
}

/// Counts one suppressed refusal of (kind, refusal) in `tenant_id`'s window.
pub async fn count_suppressed(
    tx: &mut StoreTx,
    kind: &str,
    refusal: &str,
    window_start_us: i64,
    tenant_id: &str,
) -> Result<(), StoreError> {
    tx.execute(
        "INSERT INTO refusal_suppressed_pending (kind, refusal, window_start_us, tenant_id, count) \
         VALUES ($1, $2, $3, $4, 1) ON CONFLICT (kind, refusal, window_start_us, tenant_id) \
         DO UPDATE SET count = refusal_suppressed_pending.count + 1",
        &[
            kind.into(),
            refusal.into(),
            window_start_us.into(),
            tenant_id.into(),
        ],
    )
    .await?;
    Ok(())
}

/// The pending counts of windows before `before_window_us` (only of one (kind, refusal) when
/// given), in (kind, refusal, window, tenant) order.
pub async fn pending_before(
    tx: &mut StoreTx,
    only: Option<(&str, &str)>,
    before_window_us: i64,
) -> Result<Vec<PendingSuppressed>, StoreError> {
    let (kind, refusal) = only.unwrap_or(("", ""));
    tx.fetch_all(
        "SELECT kind, refusal, window_start_us, tenant_id, count FROM refusal_suppressed_pending \
         WHERE window_start_us < $1 AND ($2 = '' OR (kind = $2 AND refusal = $3)) \
         ORDER BY kind, refusal, window_start_us, tenant_id",
        &[before_window_us.into(), kind.into(), refusal.into()],
    )
    .await
}

/// Removes one pending count. Returns whether it was still there (another replica's flush may
/// have taken it since it was read; then its event must not be written twice).
pub async fn take_pending(tx: &mut StoreTx, row: &PendingSuppressed) -> Result<bool, StoreError> {
    let removed = tx
        .execute(
            "DELETE FROM refusal_suppressed_pending WHERE kind = $1 AND refusal = $2 \
             AND window_start_us = $3 AND tenant_id = $4",
            &[
                row.kind.clone().into(),
                row.refusal.clone().into(),
                row.window_start_us.into(),
                row.tenant_id.clone().into(),
            ],
        )
        .await?;
    Ok(removed > 0)
}
