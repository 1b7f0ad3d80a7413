//! The audit trail's moving parts (issue 5): the sequencer, the sealer, and the reads the CLI's
//! export and proofs are made of.
//!
//! - [`Sequencer`] follows the exact tailer from a stored cursor, gives every event a dense index
//!   in its tenant's log in commit-visibility order, and stores the leaf hashes, the interior nodes
//!   they complete and the cursor in one transaction per batch. It only reads the log, so writers
//!   never wait on it.
//! - [`Sealer`] signs a C2SP checkpoint for every tenant whose tree grew (on an interval, and on
//!   demand), after [`domain::audit::decide_seal`] approved it against the previous one, and
//!   records it as an `audit.checkpoint.sealed` event in the `audit/<tenant>` stream (inline
//!   projection `audit_checkpoints`).
//! - [`reads`] fetches what exports and proofs need: O(log n) node reads per proof.
//!
//! The maths (leaf encoding, Merkle trees, notes, the seal decision, the trail verifier) is pure
//! and lives in `domain::audit`.

mod nodes;
pub mod reads;
pub mod sealer;
pub mod sequencer;

use domain::audit::{CheckpointError, LeafError, SealRefusal, TreeError};
use events::store::StoreError;
use projections::audit::AuditTableError;

use crate::run::{AsConflict, RunError};

pub use reads::{CheckpointRow, InclusionProof, LeafRow};
pub use sealer::{SealOutcome, Sealer, SealerOptions};
pub use sequencer::{Sequencer, SequencerOptions, StepOutcome};

/// The stream holding a tenant's `audit.checkpoint.sealed` events.
pub fn checkpoint_stream(tenant_id: &str) -> String {
    format!("audit/{tenant_id}")
}

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

fn to_i64(v: u64, what: &str) -> Result<i64, AuditError> {
    i64::try_from(v).map_err(|_| AuditError::Corrupt(format!("{what} does not fit 63 bits ({v})")))
}
