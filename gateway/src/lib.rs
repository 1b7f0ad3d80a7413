//! The agent-facing edge: TLS, node sessions and the revocation feed.
//!
//! Identity and mTLS stay here: past this crate, code sees only typed, already-checked node
//! identities ([`edge::tls::VerifiedNode`]). It must never hold a signing key when it runs split
//! from the API, and never let a certificate through that the node CA did not issue, that names
//! another trust domain, more or fewer than one SPIFFE ID or role, or a revoked serial.
//!
//! Its folders, by what a reader looks for (each `mod.rs` says what it holds and must never do):
//!
//! - [`edge`]: every connection up to a route (caps, TLS, HTTP/2, the serving certificate);
//! - [`node_service`]: the NodeService's gRPC routes and what answers them, here or relayed;
//! - [`join`] and [`renew`]: the parts of a join and of a renewal past the NodeService;
//! - [`session`]: a node session's loop, its validity, the live sessions, the session wire;
//! - [`revocation`]: the feed that brings revocations in, the revoked serials, the feed's health;
//! - [`trust`]: the trust bundle out to nodes and their reports of what they hold;
//! - [`node_commands`]: signed commands out to a node over its session, its answers back;
//! - [`split`]: the gateway and the api process apart, over internal mTLS;
//! - [`publish`]: what anyone may fetch: the node CA's revocation list, kept current;
//! - [`run`] starts a gateway, [`metrics`] serves `/metrics` ([`metrics_http`]), [`watch`] adds
//!   what every role says of itself (start, CA ends, audit state).

pub mod edge;
pub mod join;
pub mod metrics;
pub mod metrics_http;
pub mod node_commands;
pub mod node_service;
pub mod publish;
pub mod renew;
pub mod revocation;
pub mod run;
pub mod session;
pub mod split;
pub mod trust;
pub mod watch;

// The modules' former paths, for the crates outside the gateway that still use them (cli and
// its tests); each goes once they use the path above.
pub use edge::{conn, http2, limits, serving, tls, tls_files};
pub use join::refusal_limits as limits_join;
pub use join::{external_attestor, wire};
pub use revocation::feed;
pub use split::{api, relay};
