//! Signed commands to nodes (spec 003 "Signed intent", "The destructive-batch quorum", "On the
//! machine"): the kind registry, the signed command body and its payload messages, and worker
//! certificates.
//!
//! Every command the queue writes is a [`wire::CommandBody`] signed by a worker key: a P-256 key
//! the command-signing root certified for at most 24 hours, `OU=bc-role:worker`. A signer is valid
//! only as a worker certificate chaining to a command-signing root the node holds in its trust
//! bundle ([`worker::verify_worker`]). Destructive kinds additionally go through
//! [`crate::quorum::admit`] on the machine.
//!
//! One job per module:
//!
//! - [`kinds`]: the registry of command kinds (name, destructive, roles, payload type).
//! - [`payloads`]: the built-in kinds' payload messages (protobuf, `bc.command.v1`).
//! - [`wire`]: the signed body, its purpose `command`, and signing and verifying it.
//! - [`worker`]: issuing and verifying worker certificates.
//! - [`enqueue`]: the queue's rules on a new command (role, allowed kinds, batch rules).
//! - [`queue`]: the deciders of a command's stream: enqueued (signed), dispatched, answered.

pub mod enqueue;
pub mod kinds;
pub mod payloads;
pub mod queue;
pub mod wire;
pub mod worker;

pub use kinds::{kind_spec, KindSpec, BUILT_IN_KINDS, TYPE_URL_PREFIX};
pub use wire::{
    sign_command, verify_command, CommandBody, CommandError, CommandStatement, SignedCommand,
    MAX_COMMAND_LIFETIME_MS, MAX_PAYLOAD_BYTES,
};
pub use worker::{
    decide_worker_certified, verify_worker, VerifiedWorker, WorkerError, WORKER_MAX_LIFETIME,
    WORKER_REPLACE_FRACTION,
};
