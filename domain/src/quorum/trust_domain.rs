//! The trust domain every quorum signature ends with.
//!
//! Spec ("The destructive-batch quorum"): "the signed parts end with the deployment's trust domain,
//! which every verifier takes from its own configuration: an approval signed for staging never
//! admits a command in production"; "Changing the approver set": "The trust domain is the
//! verifier's own". Verifiers therefore take a [`TrustDomain`] from their configuration, never from
//! the message they check.
//!
//! There is one trust-domain type in the codebase, the SPIFFE one ([`crate::pki::TrustDomain`]):
//! the quorum's is a re-export of it, with the same syntax (1 to 255 characters of lowercase
//! letters, digits, `.`, `-` and `_`), the same serde form (a validated string) and the same
//! refusals ([`crate::pki::SpiffeError::TrustDomainLength`],
//! [`crate::pki::SpiffeError::TrustDomainCharacter`]).

pub use crate::pki::spiffe::TrustDomain;

/// What [`TrustDomain::new`] refuses with, under the name this module used to export (kept so
/// existing `domain::quorum::TrustDomainError` paths compile).
pub type TrustDomainError = crate::pki::spiffe::SpiffeError;
