//! The admin API (`bc.admin.v1.AdminService`): bcctl's verbs over mTLS with operator
//! certificates, on a listener of its own inside `bcctl serve` and `bcctl up`.
//!
//! Server side: [`roles`] (the one role-to-verb table), [`run`] (one call: parse with the
//! CLI's own grammar, refuse deployment flags, check the role, run the verb in-process as the
//! caller), [`tls`] (operator-CA-only client verification, revoked serials refused at the
//! handshake), [`server`] (the listener and its limits), [`identity`] (the caller a verified
//! certificate names), [`counters`]. Client side: [`client`] (the connection and the calls),
//! [`profile`] (profile.toml), [`remote`] (`main`'s `--server` branch). Shared: [`files`]
//! (which verbs are remotable, which flags name the caller's files). docs/ADMIN-API.md
//! describes the whole.
//!
//! It must never hold a verb of its own nor take the actor from a request: a call runs the very
//! verb the command line runs (`run.rs` through `crate::command_line::dispatch`, inside
//! `crate::invocation::Invocation::scope`), as the caller its verified certificate names. With
//! `main.rs`, its two ends (`run.rs`, `remote.rs`) are the only importers of the grammar and the
//! dispatch.

pub mod client;
pub mod counters;
pub mod files;
pub mod identity;
pub mod profile;
pub mod remote;
pub mod roles;
pub mod run;
pub mod server;
mod start_error;
pub mod tls;
