//! Deferred writes: projection statements whose results nobody reads before the transaction's
//! next statement, so that a backend may send several of them as one.
//!
//! On Postgres every statement is a round trip and a parse, bind and execute on the server; a
//! join's projections write four tables, and one data-modifying statement per table cost about a
//! quarter of the server's time of a join. [`LogTx::defer`](super::LogTx::defer) queues such a
//! statement; the queue is sent as *one* statement, each write a data-modifying `WITH` query of
//! it ([`merge`]), before the transaction's next statement of any other kind, before its commit,
//! and when [`LogTx::flush`](super::LogTx::flush) is called (the projections runner calls it
//! after every run). SQLite runs each write at once: it has no round trips to save.
//!
//! The data-modifying queries of one statement all see the snapshot the statement started with,
//! and in an order Postgres does not promise. So a queued write must not depend on another: a
//! write to a table that already has a write queued sends the queue first, and a deferred
//! statement reads no table but the one it writes (its `VALUES` lists and its own table).

use super::value::SqlValue;
use super::StoreError;

/// Postgres' limit on the parameters of one statement (a 16-bit count in the protocol).
pub(crate) const MAX_PARAMETERS: usize = 65_535;

/// One queued `INSERT`, `UPDATE` or `DELETE` without `RETURNING`, with `$1`-style parameters
/// numbered from 1.
#[derive(Clone, Debug)]
pub struct DeferredWrite {
    /// The one table it writes (and the only table it reads).
    pub table: String,
    pub sql: String,
    pub args: Vec<SqlValue>,
    /// How many rows it must change; a different count fails the write that sends it.
    pub expect_rows: Option<ExpectRows>,
}

/// The row count a deferred write must have, and what a different one means.
#[derive(Clone, Debug)]
pub struct ExpectRows {
    pub rows: u64,
    /// Said to the operator when the count differs, e.g. "nodes changed from position 12 on
    /// without a node.joined before them".
    pub meaning: String,
}

impl DeferredWrite {
    /// A write whose row count is not checked.
    pub fn new(table: &str, sql: String, args: Vec<SqlValue>) -> Self {
        DeferredWrite {
            table: table.to_owned(),
            sql,
            args,
            expect_rows: None,
        }
    }

    /// The same write, failing unless it changes exactly `rows` rows.
    pub fn expecting(mut self, rows: u64, meaning: String) -> Self {
        self.expect_rows = Some(ExpectRows { rows, meaning });
        self
    }

    /// Checks a row count against [`DeferredWrite::expect_rows`].
    pub(crate) fn check(&self, changed: u64) -> Result<(), StoreError> {
        match &self.expect_rows {
            Some(e) if e.rows != changed => Err(StoreError::UnexpectedRowCount {
                table: self.table.clone(),
                expected: e.rows,
                changed,
                meaning: e.meaning.clone(),
            }),
            _ => Ok(()),
        }
    }
}

/// The writes queued in one transaction, in order.
#[derive(Debug, Default)]
pub(crate) struct DeferredQueue {
    writes: Vec<DeferredWrite>,
    parameters: usize,
}

impl DeferredQueue {
    pub(crate) fn is_empty(&self) -> bool {
        self.writes.is_empty()
    }

    /// Whether `write` must wait for the queue to be sent: it writes a table that already has a
    /// write queued, or the merged statement would pass the parameter limit.
    pub(crate) fn must_send_before(&self, write: &DeferredWrite) -> bool {
        self.writes.iter().any(|w| w.table == write.table)
            || self.parameters + write.args.len() > MAX_PARAMETERS
    }

    pub(crate) fn push(&mut self, write: DeferredWrite) {
        self.parameters += write.args.len();
        self.writes.push(write);
    }

    pub(crate) fn take(&mut self) -> Vec<DeferredWrite> {
        self.parameters = 0;
        std::mem::take(&mut self.writes)
    }
}

/// The writes as one statement: `WITH w0 AS (..), w1 AS (..) SELECT ..`, parameters renumbered
/// in order, the arguments concatenated, and the indices (in `writes`) of the writes whose row
/// counts the `SELECT` returns, one `int8` column each, in order (the writes with an expected
/// count gain `RETURNING 1`); without any it is `SELECT 1`. Every data-modifying `WITH` query runs to completion whether or not the
/// `SELECT` reads it (Postgres documentation, "WITH Queries", "Data-Modifying Statements").
pub(crate) fn merge(writes: &[DeferredWrite]) -> (String, Vec<SqlValue>, Vec<usize>) {
    let mut sql = String::from("WITH ");
    let mut args = Vec::with_capacity(writes.iter().map(|w| w.args.len()).sum());
    let mut counted = Vec::new();
    for (i, w) in writes.iter().enumerate() {
        if i > 0 {
            sql.push_str(", ");
        }
        sql.push_str(&format!("w{i} AS ("));
        sql.push_str(&renumber(&w.sql, args.len()));
        if w.expect_rows.is_some() {
            sql.push_str(" RETURNING 1");
            counted.push(i);
        }
        sql.push(')');
        args.extend(w.args.iter().cloned());
    }
    if counted.is_empty() {
        sql.push_str(" SELECT 1");
    } else {
        let columns: Vec<String> = counted
            .iter()
            .map(|i| format!("(SELECT count(*) FROM w{i})"))
            .collect();
        sql.push_str(" SELECT ");
        sql.push_str(&columns.join(", "));
    }
    (sql, args, counted)
}

/// `sql` with every parameter `$n` outside quotes raised to `$(n + by)`. String literals
/// (`'..'`, with `''` inside) and quoted identifiers (`".."`) are copied as they are; a `$` not
/// followed by a digit is copied too.
pub(crate) fn renumber(sql: &str, by: usize) -> String {
    if by == 0 {
        return sql.to_owned();
    }
    let mut out = String::with_capacity(sql.len() + 16);
    let mut chars = sql.chars().peekable();
    let mut quote: Option<char> = None;
    while let Some(c) = chars.next() {
        match quote {
            Some(q) => {
                out.push(c);
                if c == q {
                    quote = None;
                }
            }
            None if c == '\'' || c == '"' => {
                quote = Some(c);
                out.push(c);
            }
            None if c == '$' && chars.peek().is_some_and(char::is_ascii_digit) => {
                let mut n = 0usize;
                while let Some(d) = chars.peek().and_then(|d| d.to_digit(10)) {
                    n = n * 10 + d as usize;
                    chars.next();
                }
                out.push('$');
                out.push_str(&(n + by).to_string());
            }
            None => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_renumbered_outside_quotes_only() {
        assert_eq!(
            renumber(
                "UPDATE t SET a = $1, b = '$2', \"$3\" = $12 WHERE c = 'it''s $4' AND d = $2",
                10
            ),
            "UPDATE t SET a = $11, b = '$2', \"$3\" = $22 WHERE c = 'it''s $4' AND d = $12"
        );
        assert_eq!(renumber("SELECT $ 1, $x", 5), "SELECT $ 1, $x");
        assert_eq!(
            renumber("INSERT INTO t VALUES ($1)", 0),
            "INSERT INTO t VALUES ($1)"
        );
    }

    #[test]
    fn writes_merge_into_one_statement_counting_the_checked_ones() {
        let writes = vec![
            DeferredWrite::new(
                "a",
                "INSERT INTO a VALUES ($1, $2)".into(),
                vec![1.into(), 2.into()],
            ),
            DeferredWrite::new("b", "UPDATE b SET x = $1".into(), vec![3.into()])
                .expecting(1, "b".into()),
            DeferredWrite::new("c", "DELETE FROM c WHERE y = $1".into(), vec![4.into()]),
        ];
        let (sql, args, counted) = merge(&writes);
        assert_eq!(
            sql,
            "WITH w0 AS (INSERT INTO a VALUES ($1, $2)), w1 AS (UPDATE b SET x = $3 RETURNING 1), \
             w2 AS (DELETE FROM c WHERE y = $4) SELECT (SELECT count(*) FROM w1)"
        );
        assert_eq!(args, vec![1.into(), 2.into(), 3.into(), 4.into()]);
        assert_eq!(counted, vec![1]);
        let unchecked = &writes[..1];
        assert_eq!(
            merge(unchecked).0,
            "WITH w0 AS (INSERT INTO a VALUES ($1, $2)) SELECT 1"
        );
    }

    #[test]
    fn a_second_write_to_one_table_or_past_the_parameter_limit_waits() {
        let mut q = DeferredQueue::default();
        q.push(DeferredWrite::new("a", "DELETE FROM a".into(), vec![]));
        assert!(q.must_send_before(&DeferredWrite::new("a", "DELETE FROM a".into(), vec![])));
        assert!(!q.must_send_before(&DeferredWrite::new("b", "DELETE FROM b".into(), vec![])));
        let wide = DeferredWrite::new("b", "x".into(), vec![SqlValue::Int(0); MAX_PARAMETERS]);
        assert!(!DeferredQueue::default().must_send_before(&wide));
        q.push(DeferredWrite::new("c", "x".into(), vec![SqlValue::Int(0)]));
        assert!(q.must_send_before(&wide));
        assert_eq!(q.take().len(), 2);
        assert!(q.is_empty());
        assert!(!q.must_send_before(&wide));
    }
}
