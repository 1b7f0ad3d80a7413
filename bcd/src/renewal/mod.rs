//! Renewing the certificate: when (and when to retry), the request's local parts, and the check
//! of the signed answer before anything of it is stored. `bcd node` drives it
//! ([`crate::node::renew_once`], the network half); storing is
//! [`crate::files::identity::RenewalStore`].
//!
//! | module | holds |
//! | --- | --- |
//! | [`schedule`] | when to renew (60% of the lifetime) and when to retry a renewal or a join (pure) |
//! | [`request`] | the next key, the CSR and its `renew-pop` proof; the answer's leaf checked against the current one |
//! | [`verify`] | verifying a signed renewal answer (the pinned signing key, this CSR) |
//!
//! A renewal never stores a certificate the pinned JoinService key did not sign for this CSR,
//! and never sends a request before `node.key.next` is on disk.

pub mod request;
pub mod schedule;
pub mod verify;

// The renewal's old path (`bcd::renewal::PendingRenewal`, when request.rs was renewal.rs),
// kept for cli's tests; bcd itself names `renewal::request`.
pub use request::PendingRenewal;
