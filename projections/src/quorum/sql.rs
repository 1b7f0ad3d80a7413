//! Reading rows on either backend: thin names over [`StoreTx::fetch_all`] for the quorum reads.

use events::store::{BothBackendsRow, SqlValue, StoreError, StoreTx};

/// Every row of `sql` as `T`.
pub(crate) async fn fetch_all<T: BothBackendsRow>(
    tx: &mut StoreTx,
    sql: &str,
    args: &[SqlValue],
) -> Result<Vec<T>, StoreError> {
    tx.fetch_all(sql, args).await
}

/// The first row of `sql`, if any.
pub(crate) async fn fetch_optional<T: BothBackendsRow>(
    tx: &mut StoreTx,
    sql: &str,
    args: &[SqlValue],
) -> Result<Option<T>, StoreError> {
    tx.fetch_optional(sql, args).await
}
