//! The agent-facing edge: TLS, node sessions and the revocation feed.
//!
//! Identity and mTLS stay here: past this crate, code sees only typed, already-checked node
//! identities ([`edge::tls::VerifiedNode`]). It must never hold a signing key when it runs split
//! from the API, and never let a certificate through that the node CA did not issue, that names
//! another trust domain, more or fewer than one SPIFFE ID or role, or a revoked serial.

pub mod edge;
pub mod external_attestor;
pub mod limits_join;
pub mod metrics;
pub mod node_commands;
pub mod node_service;
pub mod revocation;
pub mod run;
pub mod session;
pub mod session_loop;
pub mod split;
pub mod trust;
pub mod wire;

// The modules' former paths, for the crates outside the gateway that still use them (cli and
// its tests); each goes once they use the path above.
pub use edge::{conn, http2, limits, serving, tls, tls_files};
pub use revocation::feed;
pub use split::{api, relay};
