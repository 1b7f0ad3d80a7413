//! Reading rows on either backend: one statement with portable `$n` parameters, decoded into a
//! typed row, inside a transaction ([`StoreTx::fetch_all`]) or outside one
//! ([`EventStore::fetch_all`]).
//!
//! This is the only way the workspace reads tables other than `events`; the statements
//! themselves live in `projections` (each projection owns the reads of its tables). Both
//! backends accept `$1`-style parameters, so one SQL text serves both.

use sqlx::postgres::PgRow;
use sqlx::sqlite::SqliteRow;

use super::value::bind_all;
use super::{EventStore, Result, SqlValue, StoreError, StoreTx};

/// A row type both backends can decode: a tuple of `i64`, `String`, `Vec<u8>`, `bool` (and their
/// `Option`s), or a struct over such fields declared in `projections::from_row!` (which implements
/// `sqlx::FromRow` for both rows).
pub trait BothBackendsRow:
    for<'r> sqlx::FromRow<'r, PgRow> + for<'r> sqlx::FromRow<'r, SqliteRow> + Send + Unpin
{
}

impl<T> BothBackendsRow for T where
    T: for<'r> sqlx::FromRow<'r, PgRow> + for<'r> sqlx::FromRow<'r, SqliteRow> + Send + Unpin
{
}

impl StoreTx {
    /// Every row of `sql` as `T`, read inside this transaction (it sees the transaction's own
    /// writes). A recording transaction cannot read: [`StoreError::RecordingOnly`].
    pub async fn fetch_all<T: BothBackendsRow>(
        &mut self,
        sql: &str,
        args: &[SqlValue],
    ) -> Result<Vec<T>> {
        let rows = match self {
            StoreTx::Postgres(t) => {
                bind_all!(sqlx::query_as::<_, T>(sql), args)
                    .fetch_all(t.connection())
                    .await?
            }
            StoreTx::Sqlite(t) => {
                bind_all!(sqlx::query_as::<_, T>(sql), args)
                    .fetch_all(t.connection())
                    .await?
            }
            StoreTx::Recorder(_) => return Err(StoreError::RecordingOnly { op: "a read" }),
        };
        Ok(rows)
    }

    /// The first row of `sql`, if any, read inside this transaction.
    pub async fn fetch_optional<T: BothBackendsRow>(
        &mut self,
        sql: &str,
        args: &[SqlValue],
    ) -> Result<Option<T>> {
        let row = match self {
            StoreTx::Postgres(t) => {
                bind_all!(sqlx::query_as::<_, T>(sql), args)
                    .fetch_optional(t.connection())
                    .await?
            }
            StoreTx::Sqlite(t) => {
                bind_all!(sqlx::query_as::<_, T>(sql), args)
                    .fetch_optional(t.connection())
                    .await?
            }
            StoreTx::Recorder(_) => return Err(StoreError::RecordingOnly { op: "a read" }),
        };
        Ok(row)
    }
}

impl EventStore {
    /// Every row of `sql` as `T`, read outside any transaction: from the pool on Postgres, from
    /// the reader connections on SQLite (it never waits for the single writer).
    pub async fn fetch_all<T: BothBackendsRow>(
        &self,
        sql: &str,
        args: &[SqlValue],
    ) -> Result<Vec<T>> {
        let rows = match self {
            EventStore::Postgres(s) => {
                bind_all!(sqlx::query_as::<_, T>(sql), args)
                    .fetch_all(s.pool())
                    .await?
            }
            EventStore::Sqlite(s) => {
                bind_all!(sqlx::query_as::<_, T>(sql), args)
                    .fetch_all(s.reader())
                    .await?
            }
        };
        Ok(rows)
    }

    /// The first row of `sql`, if any, read outside any transaction.
    pub async fn fetch_optional<T: BothBackendsRow>(
        &self,
        sql: &str,
        args: &[SqlValue],
    ) -> Result<Option<T>> {
        let row = match self {
            EventStore::Postgres(s) => {
                bind_all!(sqlx::query_as::<_, T>(sql), args)
                    .fetch_optional(s.pool())
                    .await?
            }
            EventStore::Sqlite(s) => {
                bind_all!(sqlx::query_as::<_, T>(sql), args)
                    .fetch_optional(s.reader())
                    .await?
            }
        };
        Ok(row)
    }
}
