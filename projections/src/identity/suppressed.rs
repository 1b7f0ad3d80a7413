//! `refusal_suppressed_pending`: where builds before issue 17 counted each refusal over the
//! per-minute bound (one upsert per refusal, in the refusal's transaction). Suppressed counts
//! are now held in the serving process's memory (`commands::identity::RefusalBudget`) and
//! written as `security.refusals.suppressed` events by its minute flush; this table is only
//! read and emptied, so counts an older build left are written once. It is not a projection.
//! The advisory lock that makes the bound exact across replicas is here too.

use events::store::{LogTx, StoreError, StoreTx};

crate::from_row! {
    /// A pending suppressed count.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct PendingSuppressed {
        pub kind: String,
        pub refusal: String,
        pub window_start_us: i64,
        pub tenant_id: String,
        pub count: i64,
    }
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
