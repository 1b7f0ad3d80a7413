//! How the attestation-plane projections write their rows: nullable values, and the checked
//! bulk updates of rows an earlier run created.

use events::store::{push_groups, DeferredWrite, LogTx, SqlValue, StoreTx};
use events::RecordedEvent;

use crate::ProjectionError;

/// Rows per multi-row statement (well under both backends' parameter limits).
pub(super) const BULK_ROWS: usize = 200;

pub(super) fn text_or_null(s: &str) -> SqlValue {
    if s.is_empty() {
        SqlValue::NullText
    } else {
        SqlValue::Text(s.to_owned())
    }
}

pub(super) fn bytes_or_null(b: &[u8]) -> SqlValue {
    if b.is_empty() {
        SqlValue::NullBytes
    } else {
        SqlValue::Bytes(b.to_vec())
    }
}

pub(super) fn opt_text(v: Option<String>) -> SqlValue {
    v.map_or(SqlValue::NullText, SqlValue::Text)
}

pub(super) fn inapplicable(
    projection: &'static str,
    e: &RecordedEvent,
    why: &str,
) -> ProjectionError {
    ProjectionError::Inapplicable {
        projection,
        position: e.position,
        event_type: e.event_type.clone(),
        why: why.to_owned(),
    }
}

/// Queues `head (..), (..) tail` updates, `BULK_ROWS` groups per statement, each statement
/// required to change exactly as many rows as it has groups (`meaning` says what a shortfall
/// means).
pub(super) async fn checked_updates(
    tx: &mut StoreTx,
    table: &str,
    head: &str,
    tail: &str,
    rows: Vec<Vec<SqlValue>>,
    meaning: &str,
) -> Result<(), ProjectionError> {
    let mut rows = rows.into_iter().peekable();
    while rows.peek().is_some() {
        let chunk: Vec<Vec<SqlValue>> = rows.by_ref().take(BULK_ROWS).collect();
        let groups = chunk.len() as u64;
        let mut sql = String::from(head);
        let mut args: Vec<SqlValue> = Vec::new();
        push_groups(&mut sql, &mut args, chunk);
        sql.push_str(tail);
        tx.defer(DeferredWrite::new(table, sql, args).expecting(groups, meaning.to_owned()))
            .await?;
    }
    Ok(())
}
