//! The event log: schema, envelope and the append-only store.
//!
//! Every decision of the identity plane is an event. This crate defines the protobuf payloads
//! ([`schema`]), the envelope every event travels in ([`envelope`]) and, with the `store` feature,
//! the log store with its Postgres and SQLite backends and the exact tailer ([`store`]). It must
//! never re-encode a payload once hashed, never update or delete a stored event, and never decide
//! anything: it stores and delivers what the command layer appends.

pub mod actor;
pub mod envelope;
pub mod schema;

#[cfg(feature = "store")]
pub mod store;

pub use actor::{Actor, ActorError};
pub use envelope::{new_event_id, EventPayload, NewEvent, RecordedEvent};
