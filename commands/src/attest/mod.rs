//! The attestation plane's operator side: pools and their attestor policy ([`Pools`]), join
//! requests and their decisions ([`JoinRequests`]), every operator-managed attestor list
//! ([`AttestorEntries`]; the TPM allow-list [`TpmAllows`] and the cloud accounts
//! [`CloudAccounts`] are two of them), and the expiry of join requests that
//! identity maintenance runs. The join's admission step (in `identity`) reads the same rows
//! through [`rows`] and [`read`].
//!
//! | module | job |
//! | --- | --- |
//! | `admin` | [`Pools`], [`JoinRequests`]: the operator commands |
//! | `entries` | [`AttestorEntries`]: `bcctl attestor entry add / list / remove`, any list |
//! | `builtin_lists` | [`TpmAllows`], [`CloudAccounts`]: `bcctl tpm …`, `bcctl cloud account …` |
//! | [`rows`] | projection rows into domain state |
//! | [`views`] | what the operator commands print |

mod admin;
mod builtin_lists;
mod entries;
mod error;
pub mod rows;
pub mod views;

pub(crate) use admin::expire_due;
pub use admin::{JoinRequests, NewPool, Pools};
pub use builtin_lists::{CloudAccounts, NewCloudAccount, NewTpmAllow, TpmAllows};
pub use entries::{AttestorEntries, NewEntry};
pub use error::AttestError;
pub use views::{CloudAccountView, EntryView, JoinRequestView, PoolView, TpmAllowView};

/// The reads of `pools` and `join_requests`, named here for the join's admission step.
pub use projections::attest::read;

/// The attestors built into the control plane (one per line of
/// [`crate::identity::attestors::FACTORIES`]): what a pool's policy may always name.
pub const BUILTIN_ATTESTORS: &[&str] = &crate::identity::attestors::BUILTIN_IDS;

/// Join requests expired per maintenance transaction.
pub const EXPIRE_BATCH: u32 = 500;
