//! Command handlers: the transaction boundary of the control plane.
//!
//! Each handler is thin: load the state it needs, ask the pure `domain` to decide, append the
//! events, apply the inline projections, commit, all in one transaction, retrying from a fresh
//! read on an expected-version conflict. It must never make a decision itself, and never hold a
//! global write lock: concurrent commands commit concurrently.
