//! Command handlers: the transaction boundary of the control plane.
//!
//! Each handler is thin: a [`run::Command`] that loads the state it needs, asks the pure
//! `domain` to decide (given the time and the entropy), appends the events and applies the
//! inline projections, which [`run::run`] drives in one transaction, retrying from a fresh read
//! on an expected-version conflict. It must never make a decision itself, never read the time
//! except from its [`clock::Clock`], and never hold a global write lock: concurrent commands
//! commit concurrently. The joins (the attestor handlers) and the refusal counts' flush, which
//! decides nothing, still use the same boundary as a macro ([`transaction!`]).

pub mod attest;
pub mod audit;
pub mod clock;
pub mod command_queue;
pub mod crl;
pub mod identity;
pub mod leadership;
pub mod oidc;
pub mod operators;
pub mod quorum;
pub mod run;
pub mod serving;
pub mod site;
pub mod ssh;
pub mod tenants;

pub use clock::{Clock, DatabaseClock, SimClock, SystemClock};
pub use run::{
    append_and_project, append_streams_and_project, run, AsConflict, At, Command, Decided, RunError,
};

/// Every projection of the control plane (identity, quorum, the command queue, operator
/// certificates, audit checkpoints), in the order a full rebuild applies them: what `bcctl
/// rebuild` rebuilds from the log.
pub fn every_projection() -> Vec<&'static dyn projections::Projection> {
    static AUDIT_CHECKPOINTS: projections::audit::AuditCheckpoints =
        projections::audit::AuditCheckpoints;
    let mut all: Vec<&'static dyn projections::Projection> = projections::identity::all().to_vec();
    all.extend(quorum::projections());
    all.extend(command_queue::projections());
    all.extend(operators::projections());
    all.extend(tenants::projections());
    all.extend(ssh::projections());
    all.extend(oidc::projections());
    all.push(&AUDIT_CHECKPOINTS);
    all
}
