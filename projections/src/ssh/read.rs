//! Every read of `ssh_certificates` ([`super`]): inside a command's transaction (`&mut StoreTx`)
//! or outside one (`&EventStore`). Rows come back as stored.

use events::store::{EventStore, StoreError, StoreTx};

crate::from_row! {
    /// An `ssh_certificates` row.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct SshCertRow {
        pub serial: i64,
        pub tenant_id: String,
        pub node_id: String,
        pub account: String,
        pub principal: String,
        pub key_id: String,
        pub key_type: String,
        pub key_fingerprint: String,
        /// Seconds since the Unix epoch.
        pub valid_after: i64,
        pub valid_before: i64,
        pub certificate_sha256: Vec<u8>,
        pub issued_by: Option<String>,
        pub issued_at_us: i64,
        pub revoked: bool,
        pub revoke_reason: Option<String>,
        pub revoked_by: Option<String>,
        pub revoked_at_us: Option<i64>,
        /// The `ssh-cert/<serial>` stream's version the row reflects.
        pub version: i64,
        pub position: i64,
    }
}

const COLUMNS: &str = "serial, tenant_id, node_id, account, principal, key_id, key_type, \
    key_fingerprint, valid_after, valid_before, certificate_sha256, issued_by, issued_at_us, \
    revoked, revoke_reason, revoked_by, revoked_at_us, version, position";

/// The certificate with this serial, inside a transaction.
pub async fn ssh_cert(tx: &mut StoreTx, serial: i64) -> Result<Option<SshCertRow>, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM ssh_certificates WHERE serial = $1");
    tx.fetch_optional(&sql, &[serial.into()]).await
}

/// The certificate with this serial, outside any transaction.
pub async fn ssh_cert_in_store(
    store: &EventStore,
    serial: i64,
) -> Result<Option<SshCertRow>, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM ssh_certificates WHERE serial = $1");
    store.fetch_optional(&sql, &[serial.into()]).await
}

/// Every certificate (of one node when given), revoked ones too, in issue order.
pub async fn ssh_certs_in_store(
    store: &EventStore,
    node_id: Option<&str>,
) -> Result<Vec<SshCertRow>, StoreError> {
    match node_id {
        Some(node) => {
            let sql = format!(
                "SELECT {COLUMNS} FROM ssh_certificates WHERE node_id = $1 \
                 ORDER BY issued_at_us, serial"
            );
            store.fetch_all(&sql, &[node.into()]).await
        }
        None => {
            let sql =
                format!("SELECT {COLUMNS} FROM ssh_certificates ORDER BY issued_at_us, serial");
            store.fetch_all(&sql, &[]).await
        }
    }
}

/// The revoked serials (of certificates not yet expired at `now_s`, seconds), ascending, and
/// the greatest log position among the rows (the KRL's version): what a KRL lists.
pub async fn revoked_ssh_serials(
    store: &EventStore,
    now_s: i64,
) -> Result<(Vec<i64>, i64), StoreError> {
    let sql = format!(
        "SELECT {COLUMNS} FROM ssh_certificates WHERE revoked AND valid_before > $1 ORDER BY serial"
    );
    let rows: Vec<SshCertRow> = store.fetch_all(&sql, &[now_s.into()]).await?;
    let version = rows.iter().map(|r| r.position).max().unwrap_or(0);
    Ok((rows.into_iter().map(|r| r.serial).collect(), version))
}
