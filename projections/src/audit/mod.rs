//! The audit tables: the `audit_checkpoints` projection, the tables the sequencer writes
//! (`audit_sequencer`, `audit_trees`, `audit_leaves`, `audit_nodes`) and every read of them.
//!
//! - [`checkpoints`]: the projection of `audit.checkpoint.sealed` events.
//! - [`trees`]: the sequencer's writes (leader lock, cursor, leaves, interior nodes, sizes).
//! - [`idle`]: whether a tree grew only by its own last checkpoint (the sealer waits).
//! - [`read`]: what sealing, exports and proofs read, inside a transaction or from the read
//!   pool ([`ReadFrom`]).
//!
//! Hashes are plain `[u8; 32]`; Merkle node coordinates are `(level, index)` pairs, so this crate
//! needs nothing of the domain's tree maths.

pub mod checkpoints;
pub mod idle;
pub mod read;
mod source;
pub mod trees;

use events::store::StoreError;

pub use checkpoints::AuditCheckpoints;
pub use read::{CheckpointRow, LastCheckpoint, LeafRow};
pub use source::ReadFrom;
pub use trees::{NewLeaf, NewNode};

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
