//! The command queue (issue 21): enqueue signed commands, hand a gateway the commands a node may
//! run, and record what was sent and what the node answered. Every step is an event on the
//! command's stream (`command/<id>`); the `commands` projection is the queue's state.
//!
//! - [`worker`]: the process's worker key, certified by the command-signing root for at most 24
//!   hours and replaced after 60% of its lifetime (each certification a `command.worker.certified`
//!   event).
//! - [`enqueue`]: `bcctl command run`: load the node, its certificate's allowed kinds, the batch
//!   and the published quorum, decide (`domain::command::enqueue`), sign, append.
//! - [`dispatch`]: what the gateway reads and records: the runnable commands of a node (held ones
//!   only once their batch is approved, with the approval and the member's own leaf's proof from
//!   the stored bytes), which nodes have newly runnable commands, dispatches (a command the node's
//!   certificate no longer allows is cancelled instead of sent), results and rejections.
//! - `node_facts`: the node as enqueue and dispatch check it (role, allowed kinds).
//! - [`views`]: `bcctl command list | show`.
//!
//! - `cancel`: the held commands of a batch that is cancelled or expires, cancelled in the same
//!   transaction.

pub(crate) mod cancel;
pub mod dispatch;
pub mod enqueue;
mod error;
mod node_facts;
mod projection;
pub mod views;
pub mod worker;

pub use dispatch::{
    pending_for_node, ready_since, record_dispatched, record_node_answer, DispatchCause,
    NodeAnswer, NodeAnswerOutcome, RunnableCommand,
};
pub use enqueue::{enqueue_command, EnqueueAnswer, EnqueueRequest};
pub use error::CommandQueueError;
pub use projection::projections;
pub use views::{command_list, command_show, CommandFilter, CommandView};
pub use worker::{worker_stream, WorkerSigner, WorkerSignerError};
