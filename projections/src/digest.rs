//! Canonical dumps of projection tables and their blake3 digests.
//!
//! Every column is rendered by the database's own quoting function (`quote_nullable` on
//! Postgres, `quote` on SQLite), rows in the table's declared order, so two tables with the same
//! content give the same digest on the same backend, and any changed byte changes it.

use events::store::{EventStore, LogStore, LogTx, StoreError, StoreTx};

/// A projection table: its name, its columns, and the ORDER BY that makes a dump canonical
/// (a unique key).
#[derive(Clone, Copy, Debug)]
pub struct TableSpec {
    pub name: &'static str,
    pub columns: &'static [&'static str],
    pub order_by: &'static str,
}

impl TableSpec {
    fn dump_sql(&self, tx: &StoreTx) -> String {
        let quote = match tx.backend() {
            events::store::Backend::Postgres => "quote_nullable",
            events::store::Backend::Sqlite => "quote",
        };
        let cols: Vec<String> = self
            .columns
            .iter()
            .map(|c| format!("{quote}({c})"))
            .collect();
        format!(
            "SELECT {} FROM {} ORDER BY {}",
            cols.join(" || '|' || "),
            self.name,
            self.order_by
        )
    }
}

/// The canonical text rows of one table, in order.
pub async fn dump_table(tx: &mut StoreTx, table: &TableSpec) -> Result<Vec<String>, StoreError> {
    let sql = table.dump_sql(tx);
    let rows: Vec<String> = match tx {
        StoreTx::Postgres(t) => sqlx::query_scalar(&sql).fetch_all(t.connection()).await?,
        StoreTx::Sqlite(t) => sqlx::query_scalar(&sql).fetch_all(t.connection()).await?,
        StoreTx::Recorder(_) => return Err(StoreError::RecordingOnly { op: "a table dump" }),
    };
    Ok(rows)
}

/// One blake3 digest over the canonical dumps of `tables`, read in one transaction.
pub async fn digest_tables(store: &EventStore, tables: &[TableSpec]) -> Result<String, StoreError> {
    let mut tx = store.begin().await?;
    let mut hasher = blake3::Hasher::new();
    for table in tables {
        hasher.update(table.name.as_bytes());
        hasher.update(b"\n");
        for row in dump_table(&mut tx, table).await? {
            hasher.update(row.as_bytes());
            hasher.update(b"\n");
        }
    }
    tx.rollback().await?;
    Ok(hasher.finalize().to_hex().to_string())
}
