//! Every read of `operator_certs` ([`crate::operators`]): inside a command's transaction
//! (`&mut StoreTx`, which sees its own writes) or outside one (`&EventStore`). Rows come back as
//! stored; `commands::operators` turns them into what the CLI and the admin server use.

use events::store::{EventStore, StoreError, StoreTx};

crate::from_row! {
    /// An `operator_certs` row.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct OperatorCertRow {
        /// Lower-case hex.
        pub serial: String,
        pub name: String,
        pub role: String,
        pub spiffe_id: String,
        pub not_before_us: i64,
        pub not_after_us: i64,
        pub certificate_sha256: Vec<u8>,
        pub revoked: bool,
        pub revoke_reason: Option<String>,
        pub issued_at_us: i64,
        pub revoked_at_us: Option<i64>,
        /// The `operator/<name>` stream's version the row reflects.
        pub version: i64,
        pub position: i64,
    }
}

const COLUMNS: &str = "serial, name, role, spiffe_id, not_before_us, not_after_us, \
    certificate_sha256, revoked, revoke_reason, issued_at_us, revoked_at_us, version, position";

/// The certificate with this serial (lower-case hex), revoked or not.
pub async fn operator_cert(
    tx: &mut StoreTx,
    serial_hex: &str,
) -> Result<Option<OperatorCertRow>, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM operator_certs WHERE serial = $1");
    tx.fetch_optional(&sql, &[serial_hex.into()]).await
}

/// The newest row of the operator `name` (its stream's version is that row's, or a later
/// revocation's: the greatest `version` of its rows).
pub async fn operator_stream_version(
    tx: &mut StoreTx,
    name: &str,
) -> Result<Option<i64>, StoreError> {
    let sql = format!(
        "SELECT {COLUMNS} FROM operator_certs WHERE name = $1 ORDER BY version DESC LIMIT 1"
    );
    let row: Option<OperatorCertRow> = tx.fetch_optional(&sql, &[name.into()]).await?;
    Ok(row.map(|r| r.version))
}

/// Every operator certificate (revoked ones too), in issue order, outside any transaction.
pub async fn operator_certs_in_store(
    store: &EventStore,
) -> Result<Vec<OperatorCertRow>, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM operator_certs ORDER BY issued_at_us, serial");
    store.fetch_all(&sql, &[]).await
}

/// The certificate with this serial, outside any transaction.
pub async fn operator_cert_in_store(
    store: &EventStore,
    serial_hex: &str,
) -> Result<Option<OperatorCertRow>, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM operator_certs WHERE serial = $1");
    store.fetch_optional(&sql, &[serial_hex.into()]).await
}

/// The serials (lower-case hex) of every revoked operator certificate: what the admin API's
/// handshake refuses.
pub async fn revoked_operator_serials(store: &EventStore) -> Result<Vec<String>, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM operator_certs WHERE revoked ORDER BY serial");
    let rows: Vec<OperatorCertRow> = store.fetch_all(&sql, &[]).await?;
    Ok(rows.into_iter().map(|r| r.serial).collect())
}
