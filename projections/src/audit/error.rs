//! Why an audit table could not be read or written ([`AuditTableError`]), and the checked
//! conversions of its columns.

use events::store::StoreError;

/// A SHA-256 hash as the audit tables store it.
pub type Hash = [u8; 32];

/// Why an audit table could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum AuditTableError {
    #[error("audit tables: {0} (has the store been migrated? run `bcctl migrate`)")]
    Store(#[from] StoreError),
    #[error("the audit tables are inconsistent: {0}")]
    Corrupt(String),
}

pub(crate) fn to_u64(v: i64, what: &str) -> Result<u64, AuditTableError> {
    u64::try_from(v).map_err(|_| AuditTableError::Corrupt(format!("{what} is negative ({v})")))
}

pub(crate) fn to_i64(v: u64, what: &str) -> Result<i64, AuditTableError> {
    i64::try_from(v)
        .map_err(|_| AuditTableError::Corrupt(format!("{what} does not fit 63 bits ({v})")))
}

pub(crate) fn to_hash(bytes: &[u8], what: &str) -> Result<Hash, AuditTableError> {
    bytes
        .try_into()
        .map_err(|_| AuditTableError::Corrupt(format!("{what} is {} bytes, not 32", bytes.len())))
}
