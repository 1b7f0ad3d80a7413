//! How the identity projections write their rows: nullable and checked values, and the bulk
//! statements they queue as deferred writes.

use events::store::{push_groups, Backend, DeferredWrite, LogTx, SqlValue, StoreTx};
use events::RecordedEvent;

use crate::ProjectionError;

pub(super) fn bytes_or_null(b: &[u8]) -> SqlValue {
    if b.is_empty() {
        SqlValue::NullBytes
    } else {
        SqlValue::Bytes(b.to_vec())
    }
}

pub(super) fn text_or_null(s: &str) -> SqlValue {
    if s.is_empty() {
        SqlValue::NullText
    } else {
        SqlValue::Text(s.to_owned())
    }
}

pub(super) fn greatest(tx: &StoreTx) -> &'static str {
    match tx.backend() {
        Backend::Postgres => "GREATEST",
        Backend::Sqlite => "MAX",
    }
}

pub(super) fn to_i64(
    v: u64,
    e: &RecordedEvent,
    projection: &'static str,
) -> Result<i64, ProjectionError> {
    i64::try_from(v).map_err(|_| ProjectionError::Inapplicable {
        projection,
        position: e.position,
        event_type: e.event_type.clone(),
        why: format!("{v} does not fit a signed 64-bit column"),
    })
}

/// Rows per multi-row statement (well under both backends' parameter limits).
pub(super) const BULK_ROWS: usize = 200;

/// Queues `head (..), (..), .. tail` with `rows` as the parenthesised groups, `BULK_ROWS` per
/// statement, as deferred writes to `table` ([`LogTx::defer`]: on Postgres they go out with the
/// other projections' writes in one statement). With `each_row_once`, every statement must
/// change exactly as many rows as it has groups, and `each_row_once` says what a shortfall means.
pub(super) async fn bulk(
    tx: &mut StoreTx,
    table: &str,
    head: &str,
    tail: &str,
    rows: Vec<Vec<SqlValue>>,
    each_row_once: Option<&str>,
) -> Result<(), ProjectionError> {
    let mut rows = rows.into_iter().peekable();
    while rows.peek().is_some() {
        let mut sql = String::from(head);
        let mut args: Vec<SqlValue> = Vec::new();
        let chunk: Vec<Vec<SqlValue>> = rows.by_ref().take(BULK_ROWS).collect();
        let groups = chunk.len() as u64;
        push_groups(&mut sql, &mut args, chunk);
        sql.push_str(tail);
        let mut write = DeferredWrite::new(table, sql, args);
        if let Some(meaning) = each_row_once {
            write = write.expecting(groups, meaning.to_owned());
        }
        tx.defer(write).await?;
    }
    Ok(())
}

pub(super) fn opt_int(v: Option<i64>) -> SqlValue {
    v.map_or(SqlValue::NullInt, SqlValue::Int)
}

pub(super) fn opt_text(v: Option<String>) -> SqlValue {
    v.map_or(SqlValue::NullText, SqlValue::Text)
}
