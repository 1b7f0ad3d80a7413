//! What a tenant command can fail with.

use domain::tenant::TenantRefusal;
use events::store::StoreError;
use projections::ProjectionError;

use crate::run::{AsConflict, RunError};

/// What a tenant command can fail with.
#[derive(Debug, thiserror::Error)]
pub enum TenantError {
    /// Refused by the domain: nothing written.
    #[error("{0}")]
    Refused(#[from] TenantRefusal),
    /// A stored row the command cannot read back.
    #[error("corrupt row: {0} (rebuild the projections with `bcctl rebuild`)")]
    Corrupt(String),
    /// The store or a projection failed, or conflicts did not settle.
    #[error("{0}")]
    Run(#[from] RunError),
}

impl From<StoreError> for TenantError {
    fn from(e: StoreError) -> Self {
        TenantError::Run(RunError::Store(e))
    }
}

impl From<ProjectionError> for TenantError {
    fn from(e: ProjectionError) -> Self {
        TenantError::Run(RunError::Projection(e))
    }
}

impl AsConflict for TenantError {
    fn into_conflict(self) -> Result<StoreError, Self> {
        match self {
            TenantError::Run(r) => r.into_conflict().map_err(TenantError::Run),
            other => Err(other),
        }
    }
}
