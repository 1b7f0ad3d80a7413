//! Command handlers: the transaction boundary of the control plane.
//!
//! Each handler is thin: load the state it needs, ask the pure `domain` to decide, append the
//! events, apply the inline projections, commit, all in one transaction ([`transaction!`]),
//! retrying from a fresh read on an expected-version conflict. It must never make a decision
//! itself, never read the time except from its [`clock::Clock`], and never hold a global write
//! lock: concurrent commands commit concurrently.

pub mod audit;
pub mod clock;
pub mod identity;
pub mod quorum;
pub mod run;

pub use clock::{Clock, SimClock, SystemClock};
pub use run::{append_and_project, AsConflict, RunError};
