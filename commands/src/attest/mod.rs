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
mod error;
pub mod rows;
mod tpm_allows;
pub mod views;

pub(crate) use admin::expire_due;
pub use admin::{JoinRequests, NewPool, Pools};
pub use cloud_accounts::{CloudAccounts, NewCloudAccount};
pub use error::AttestError;
pub use tpm_allows::{NewTpmAllow, TpmAllows};
pub use views::{CloudAccountView, JoinRequestView, PoolView, TpmAllowView};

/// The reads of `pools` and `join_requests`, named here for the join's admission step.
pub use projections::attest::read;

/// The attestors built into the control plane: what a pool's policy may always name.
pub const BUILTIN_ATTESTORS: &[&str] = domain::attest::ids::BUILT_IN;

/// Join requests expired per maintenance transaction.
pub const EXPIRE_BATCH: u32 = 500;
