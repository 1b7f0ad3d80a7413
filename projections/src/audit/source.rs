//! Where an audit read runs: inside a transaction (the sequencer's and the sealer's, which must
//! see their own writes) or outside any, on the store's read pool (exports and proofs).

use events::store::{BothBackendsRow, EventStore, SqlValue, StoreError, StoreTx};

/// A transaction or the store itself, for the reads of [`super::read`].
pub enum ReadFrom<'a> {
    /// Inside this transaction.
    Tx(&'a mut StoreTx),
    /// Outside any transaction: the Postgres pool, or SQLite's reader connections.
    Store(&'a EventStore),
}

impl<'a> From<&'a mut StoreTx> for ReadFrom<'a> {
    fn from(tx: &'a mut StoreTx) -> Self {
        ReadFrom::Tx(tx)
    }
}

impl<'a> From<&'a EventStore> for ReadFrom<'a> {
    fn from(store: &'a EventStore) -> Self {
        ReadFrom::Store(store)
    }
}

impl ReadFrom<'_> {
    /// Every row of `sql` as `T`.
    pub(crate) async fn fetch_all<T: BothBackendsRow>(
        &mut self,
        sql: &str,
        args: &[SqlValue],
    ) -> Result<Vec<T>, StoreError> {
        match self {
            ReadFrom::Tx(tx) => tx.fetch_all(sql, args).await,
            ReadFrom::Store(store) => store.fetch_all(sql, args).await,
        }
    }

    /// The first row of `sql`, if any.
    pub(crate) async fn fetch_optional<T: BothBackendsRow>(
        &mut self,
        sql: &str,
        args: &[SqlValue],
    ) -> Result<Option<T>, StoreError> {
        match self {
            ReadFrom::Tx(tx) => tx.fetch_optional(sql, args).await,
            ReadFrom::Store(store) => store.fetch_optional(sql, args).await,
        }
    }
}
