//! Projections: SQL tables built only from events.
//!
//! One module per projection says how each event changes its tables ([`Projection`]), inside the
//! same transaction as the append (inline) or while rebuilding from the log ([`rebuild`]). A
//! projection must never read the clock or anything outside its events, so that rebuilding it
//! from the log gives byte-identical tables ([`digest`] checks that); every row records the log
//! position it reflects.

pub mod attest;
pub mod audit;
pub mod browse;
pub mod commands;
pub mod digest;
pub mod doctor;
mod from_row;
pub mod identity;
pub mod inspect;
pub mod oidc_keys;
pub mod operators;
pub mod operators_read;
mod projection;
pub mod quorum;
pub mod rebuild;
pub mod replay_read;
pub mod scratch;
pub mod ssh;
pub mod tenants;

pub use digest::{digest_tables, TableSpec};
pub(crate) use from_row::from_row;
pub use projection::{apply_all, BoxFuture, Projection, ProjectionError};
pub use rebuild::{rebuild, rebuild_in, RebuildProgress};
