//! Multi-row `INSERT` statements: how [`super::LogTx::insert_rows`] writes many rows where no
//! faster bulk path exists (SQLite, and the statement form Postgres queues for a few rows).

use super::value::SqlValue;

/// Appends `($n, ..), ($n+1, ..)` for `rows` to `sql`, numbering after the `args` already
/// there, and moves the values into `args`: the `VALUES` list of a multi-row statement.
pub fn push_groups(
    sql: &mut String,
    args: &mut Vec<SqlValue>,
    rows: impl IntoIterator<Item = Vec<SqlValue>>,
) {
    for (i, row) in rows.into_iter().enumerate() {
        if i > 0 {
            sql.push_str(", ");
        }
        sql.push('(');
        for j in 0..row.len() {
            if j > 0 {
                sql.push_str(", ");
            }
            sql.push('$');
            sql.push_str(&(args.len() + j + 1).to_string());
        }
        sql.push(')');
        args.extend(row);
    }
}

/// Parameters per multi-row `INSERT` of [`super::contract::insert_rows_by_statements`]: under SQLite's oldest
/// limit (999) and far under Postgres' (65,535).
const INSERT_PARAMETERS: usize = 990;

/// The multi-row `INSERT` statements that insert `rows` into `table (columns)`, with their
/// arguments.
pub(crate) fn insert_statements(
    table: &str,
    columns: &[&str],
    rows: &[Vec<SqlValue>],
) -> Vec<(String, Vec<SqlValue>)> {
    let per_statement = (INSERT_PARAMETERS / columns.len().max(1)).max(1);
    rows.chunks(per_statement)
        .map(|chunk| {
            let mut sql = format!("INSERT INTO {table} ({}) VALUES ", columns.join(", "));
            let mut args = Vec::with_capacity(chunk.len() * columns.len());
            push_groups(&mut sql, &mut args, chunk.iter().cloned());
            (sql, args)
        })
        .collect()
}
