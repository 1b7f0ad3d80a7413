//! Reading rows on either backend with portable `$n` parameters.

use events::store::{SqlValue, StoreError, StoreTx};
use sqlx::postgres::PgRow;
use sqlx::sqlite::SqliteRow;

macro_rules! bind_values {
    ($query:expr, $args:expr) => {{
        let mut q = $query;
        for a in $args {
            q = match a {
                SqlValue::NullInt => q.bind(None::<i64>),
                SqlValue::NullText => q.bind(None::<String>),
                SqlValue::NullBytes => q.bind(None::<Vec<u8>>),
                SqlValue::Int(v) => q.bind(*v),
                SqlValue::Text(v) => q.bind(v.as_str()),
                SqlValue::Bytes(v) => q.bind(v.as_slice()),
                SqlValue::Bool(v) => q.bind(*v),
            };
        }
        q
    }};
}

/// Every row of `sql` as `T` (a tuple of i64, String, `Vec<u8>`, bool and their `Option`s).
pub(crate) async fn fetch_all<T>(
    tx: &mut StoreTx,
    sql: &str,
    args: &[SqlValue],
) -> Result<Vec<T>, StoreError>
where
    T: for<'r> sqlx::FromRow<'r, PgRow> + for<'r> sqlx::FromRow<'r, SqliteRow> + Send + Unpin,
{
    let rows = match tx {
        StoreTx::Postgres(t) => {
            bind_values!(sqlx::query_as::<_, T>(sql), args)
                .fetch_all(t.connection())
                .await?
        }
        StoreTx::Sqlite(t) => {
            bind_values!(sqlx::query_as::<_, T>(sql), args)
                .fetch_all(t.connection())
                .await?
        }
        StoreTx::Recorder(_) => return Err(StoreError::RecordingOnly { op: "a read" }),
    };
    Ok(rows)
}

/// The first row of `sql`, if any.
pub(crate) async fn fetch_optional<T>(
    tx: &mut StoreTx,
    sql: &str,
    args: &[SqlValue],
) -> Result<Option<T>, StoreError>
where
    T: for<'r> sqlx::FromRow<'r, PgRow> + for<'r> sqlx::FromRow<'r, SqliteRow> + Send + Unpin,
{
    Ok(fetch_all(tx, sql, args).await?.into_iter().next())
}
