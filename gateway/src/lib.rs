//! The agent-facing edge: TLS, node sessions and the revocation feed.
//!
//! Identity and mTLS stay here: past this crate, code sees only typed, already-checked node
//! identities ([`tls::VerifiedNode`]). It must never hold a signing key when it runs split from
//! the API, and never let a certificate through that the node CA did not issue, that names
//! another trust domain, more or fewer than one SPIFFE ID or role, or a revoked serial.

pub mod api;
pub mod backend;
pub mod command_counters;
pub mod command_wire;
pub mod conn;
pub mod dispatch;
pub mod external_attestor;
pub mod feed;
pub mod feed_health;
pub mod http2;
pub mod internal_tls;
pub mod limits;
pub mod limits_join;
pub mod metrics;
pub mod relay;
pub mod revoked;
pub mod run;
pub mod server;
pub mod serving;
pub mod session_loop;
pub mod session_wire;
pub mod sessions;
pub mod site_agent;
pub mod tls;
pub mod tls_files;
pub mod trust;
pub mod trust_reports;
pub mod wire;
