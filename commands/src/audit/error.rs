//! Errors of the sequencer, the sealer and the audit reads ([`AuditError`]).

use domain::audit::{CheckpointError, LeafError, SealRefusal, TreeError};
use events::store::StoreError;
use projections::audit::AuditTableError;

use crate::run::{AsConflict, RunError};

/// Errors of the sequencer, the sealer and the audit reads.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("store: {0}")]
    Store(#[from] StoreError),
    #[error("audit tables: {0} (has the store been migrated? run `bcctl migrate`)")]
    Tables(StoreError),
    #[error("{0}")]
    Run(#[from] RunError),
    #[error("event at position {position} cannot be encoded as an audit leaf: {source}")]
    Leaf { position: i64, source: LeafError },
    #[error("audit tree of tenant {tenant}: {source}")]
    Tree { tenant: String, source: TreeError },
    #[error("the audit tables are inconsistent: {0}")]
    Corrupt(String),
    #[error("audit tree of tenant {tenant}: {source}")]
    Proof {
        tenant: String,
        source: domain::audit::ProofError,
    },
    #[error("tenant {tenant}: refusing to seal: {source}")]
    Refused { tenant: String, source: SealRefusal },
    #[error("tenant {tenant}: checkpoint: {source}")]
    Checkpoint {
        tenant: String,
        source: CheckpointError,
    },
    #[error("tenant {0} has no checkpoint yet: run `bcctl audit seal --tenant {0}`")]
    NoCheckpoint(String),
    #[error("position {position} is not in tenant {tenant}'s audit log (wrong tenant, or not sequenced yet)")]
    UnknownPosition { tenant: String, position: i64 },
    #[error("position {position} (index {index}) is not covered by tenant {tenant}'s latest checkpoint (size {size}) yet: run `bcctl audit seal --tenant {tenant}`")]
    NotYetSealed {
        tenant: String,
        position: i64,
        index: u64,
        size: u64,
    },
}

impl AsConflict for AuditError {
    fn into_conflict(self) -> Result<StoreError, Self> {
        match self {
            AuditError::Store(e) if e.is_conflict() => Ok(e),
            AuditError::Run(e) => e.into_conflict().map_err(AuditError::Run),
            other => Err(other),
        }
    }
}

impl From<AuditTableError> for AuditError {
    fn from(e: AuditTableError) -> Self {
        match e {
            AuditTableError::Store(e) => AuditError::Tables(e),
            AuditTableError::Corrupt(why) => AuditError::Corrupt(why),
        }
    }
}

pub(super) fn to_i64(v: u64, what: &str) -> Result<i64, AuditError> {
    i64::try_from(v).map_err(|_| AuditError::Corrupt(format!("{what} does not fit 63 bits ({v})")))
}
