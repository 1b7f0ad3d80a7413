//! Signed commands from the store to a node over its session, and the node's answers back (issue
//! 21, spec 003 "Signed intent"). Not the `commands` crate, whose handlers this edge calls: here
//! is only what a session sends its node and records of its answers. [`dispatch`] fetches a
//! node's pending commands after its Welcome, records each dispatch, sends it, records the
//! node's `CommandResult`, and runs the one poller that wakes the sessions of nodes with newly
//! runnable commands; [`wire`] turns a runnable command into the `bc.wire.v1.Command` and checks
//! a result before it reaches the store; [`counters`] counts both for `/metrics`.
//!
//! The gateway never signs or alters a command: it sends the stored body, signature and chain
//! unchanged. It must never send a command whose dispatch could not be recorded, never send the
//! same command id twice in a session, never record a result under a node id read from a message
//! (only the connection's mTLS identity), and never drop a result silently.

pub mod counters;
pub mod dispatch;
pub mod wire;
