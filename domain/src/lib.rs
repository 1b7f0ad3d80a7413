//! The pure core of the identity plane.
//!
//! This crate holds every decision the control plane makes, written as pure functions: the
//! Merkle maths of the audit log ([`audit`]) over one RFC 9162 Merkle verifier ([`merkle`]), the
//! PKI and certificate profiles ([`pki`]), the destructive-batch quorum ([`quorum`]), sites, their boot entries and boot lease ([`site`]) and the
//! published trust bundle ([`trust_bundle`]). It must never do IO, read a clock, touch a database or
//! be async: time comes in as an argument, state comes in as a value, and what it decides goes out
//! as events or a refusal, every decider in one shape ([`decision`]). It may see `events` for its
//! types only (no store).

pub mod attest;
pub mod audit;
pub mod command;
pub mod decision;
pub mod duration;
pub mod identity;
pub mod merkle;
pub mod oidc;
pub mod operator;
pub mod pki;
pub mod plain_id;
pub mod quorum;
pub mod site;
pub mod ssh;
pub mod tenant;
pub mod trust_bundle;
