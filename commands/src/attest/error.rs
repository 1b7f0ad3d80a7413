//! Why a pool, join-request, TPM allow-list or cloud-account command failed ([`AttestError`]).

use domain::attest::AttestAdminRefusal;

use crate::identity::IdentityError;
use crate::{AsConflict, RunError};

/// Why a pool or join-request command failed.
#[derive(Debug, thiserror::Error)]
pub enum AttestError {
    /// The operator command was refused (bad input, unknown id, wrong state).
    #[error(transparent)]
    Refused(#[from] AttestAdminRefusal),
    /// The store, a projection or a row failed.
    #[error(transparent)]
    Identity(#[from] IdentityError),
}

impl From<RunError> for AttestError {
    fn from(e: RunError) -> Self {
        AttestError::Identity(IdentityError::Run(e))
    }
}

impl AsConflict for AttestError {
    fn into_conflict(self) -> Result<events::store::StoreError, Self> {
        match self {
            AttestError::Identity(e) => e.into_conflict().map_err(AttestError::Identity),
            other => Err(other),
        }
    }
}
