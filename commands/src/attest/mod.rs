//! The attestation plane's operator side: pools and their attestor policy ([`Pools`]), join
//! requests and their decisions ([`JoinRequests`]), the TPM allow-list ([`TpmAllows`]), and
//! the expiry of join requests that
//! identity maintenance runs. The join's admission step (in `identity`) reads the same rows
//! through [`rows`] and [`read`].
//!
//! | module | job |
//! | --- | --- |
//! | `admin` | [`Pools`], [`JoinRequests`]: the operator commands |
//! | `tpm_allows` | [`TpmAllows`]: `bcctl tpm allow / list / revoke` |
//! | `cloud_accounts` | [`CloudAccounts`]: `bcctl cloud account add / list / remove` |
//! | [`rows`] | projection rows into domain state |
//! | [`views`] | what the operator commands print |

mod admin;
mod cloud_accounts;
pub mod rows;
mod tpm_allows;
pub mod views;

use domain::attest::AttestAdminRefusal;

use crate::identity::IdentityError;
use crate::{AsConflict, RunError};

pub(crate) use admin::expire_due;
pub use admin::{JoinRequests, NewPool, Pools};
pub use cloud_accounts::{CloudAccounts, NewCloudAccount};
pub use tpm_allows::{NewTpmAllow, TpmAllows};
pub use views::{CloudAccountView, JoinRequestView, PoolView, TpmAllowView};

/// The reads of `pools` and `join_requests`, named here for the join's admission step.
pub use projections::attest::read;

/// The attestors built into the control plane: what a pool's policy may always name.
pub const BUILTIN_ATTESTORS: &[&str] = &[
    "join-token",
    "x509pop",
    "provisioned",
    "tpm",
    "discovery",
    "cloud-iid",
];

/// Join requests expired per maintenance transaction.
pub const EXPIRE_BATCH: u32 = 500;

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
