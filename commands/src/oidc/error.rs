//! What an OIDC command can fail with.

use domain::oidc::{OidcKeyError, OidcKeyRefusal, SignError, TokenRefusal};
use events::store::StoreError;
use projections::ProjectionError;

use crate::run::{AsConflict, RunError};

/// What an OIDC command can fail with.
#[derive(Debug, thiserror::Error)]
pub enum OidcError {
    /// A key change refused by the domain: nothing written.
    #[error("{0}")]
    Refused(#[from] OidcKeyRefusal),
    /// A token refused by the domain.
    #[error("{0}")]
    Token(#[from] TokenRefusal),
    /// A key could not be generated, sealed or opened (the deployment secret?).
    #[error("{0}")]
    Key(#[from] OidcKeyError),
    /// A decided token could not be signed.
    #[error("{0}")]
    Sign(#[from] SignError),
    /// A stored row the command cannot read back.
    #[error("corrupt row: {0} (rebuild the projections with `bcctl rebuild`)")]
    Corrupt(String),
    /// The store or a projection failed, or conflicts did not settle.
    #[error("{0}")]
    Run(#[from] RunError),
}

impl From<StoreError> for OidcError {
    fn from(e: StoreError) -> Self {
        OidcError::Run(RunError::Store(e))
    }
}

impl From<ProjectionError> for OidcError {
    fn from(e: ProjectionError) -> Self {
        OidcError::Run(RunError::Projection(e))
    }
}

impl AsConflict for OidcError {
    fn into_conflict(self) -> Result<StoreError, Self> {
        match self {
            OidcError::Run(r) => r.into_conflict().map_err(OidcError::Run),
            other => Err(other),
        }
    }
}
