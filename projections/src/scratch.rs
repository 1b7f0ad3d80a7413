//! Scratch tables of `BIGINT` columns, for testing the projection machinery (the runner, deferred
//! writes, the pipelined rebuild) with projections of a test's own making: create one from a
//! [`TableSpec`], write its rows, read them back. No projection of the schema uses these.
//!
//! The first column of a scratch table is its primary key; every column is `BIGINT NOT NULL`.

use events::store::{DeferredWrite, EventStore, LogTx, SqlValue, StoreError, StoreTx};

use crate::TableSpec;

/// Creates `spec`'s table inside `tx`.
pub async fn create_table(tx: &mut StoreTx, spec: &TableSpec) -> Result<(), StoreError> {
    let columns: Vec<String> = spec
        .columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            if i == 0 {
                format!("{c} BIGINT PRIMARY KEY")
            } else {
                format!("{c} BIGINT NOT NULL")
            }
        })
        .collect();
    let sql = format!("CREATE TABLE {} ({})", spec.name, columns.join(", "));
    tx.execute(&sql, &[]).await?;
    Ok(())
}

/// Creates `spec`'s table in a transaction of its own.
pub async fn create_table_now(store: &EventStore, spec: &TableSpec) -> Result<(), StoreError> {
    use events::store::LogStore;
    let mut tx = store.begin().await?;
    create_table(&mut tx, spec).await?;
    tx.commit().await
}

/// The deferred insert of one row (values in `spec`'s column order).
pub fn insert_row(spec: &TableSpec, row: Vec<i64>) -> DeferredWrite {
    let params: Vec<String> = (1..=row.len()).map(|n| format!("${n}")).collect();
    DeferredWrite::new(
        spec.name,
        format!(
            "INSERT INTO {} ({}) VALUES ({})",
            spec.name,
            spec.columns.join(", "),
            params.join(", ")
        ),
        row.into_iter().map(SqlValue::Int).collect(),
    )
}

/// Inserts into `spec`'s two-column table the row (`key`, the number of rows `counted` has now):
/// a write that reads another table, so a projection making it does not only write.
pub async fn insert_count_of(
    tx: &mut StoreTx,
    spec: &TableSpec,
    key: i64,
    counted: &TableSpec,
) -> Result<(), StoreError> {
    let sql = format!(
        "INSERT INTO {} ({}) SELECT $1, count(*) FROM {}",
        spec.name,
        spec.columns.join(", "),
        counted.name
    );
    tx.execute(&sql, &[SqlValue::Int(key)]).await?;
    Ok(())
}

/// A statement whose row count is read and that changes nothing: what a projection that reads
/// looks like to a transaction.
pub async fn probe(tx: &mut StoreTx) -> Result<(), StoreError> {
    tx.execute("SELECT 1", &[]).await?;
    Ok(())
}

/// Every row of `spec`'s two-column table, in its order, read outside any transaction.
pub async fn pairs(store: &EventStore, spec: &TableSpec) -> Result<Vec<(i64, i64)>, StoreError> {
    let sql = format!(
        "SELECT {} FROM {} ORDER BY {}",
        spec.columns.join(", "),
        spec.name,
        spec.order_by
    );
    store.fetch_all(&sql, &[]).await
}
