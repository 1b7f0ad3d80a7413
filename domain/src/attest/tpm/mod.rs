//! The `tpm` attestor (spec 000 "tpm", "Renewing a TPM-held key"): a machine proves itself with
//! its TPM's endorsement key in two rounds, and proves its node key is a key that TPM made and
//! can never let go, at the join and at every renewal.
//!
//! | module | job |
//! | --- | --- |
//! | [`wire`] | the messages bcd and the control plane exchange |
//! | [`config`] | what the operator configures |
//! | [`attestor`] | [`TpmAttestor`]: round 1's challenge, round 2's checks, where the machine goes |

pub mod attestor;
pub mod config;
pub mod wire;

pub use attestor::TpmAttestor;
pub use config::{NodeKeyPolicy, Placement, TpmConfig, MAX_CHALLENGE_TTL};
pub use wire::{
    CertifiedKey, PcrValue, TpmAnswer, TpmAttestation, TpmChallenge, TpmEvidence,
    TpmKeyAttestation, DEFAULT_QUOTE_PCRS, TPM_ATTESTOR, TPM_WIRE_VERSION,
};
