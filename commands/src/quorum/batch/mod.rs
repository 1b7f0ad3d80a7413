//! Destructive batches' handlers: create (scope tree and stored proofs), approve, cancel,
//! expire, and the reads approvers and the gateway need. Every decision is `domain::quorum`'s;
//! these load, decide, append, project and commit.
//!
//! Each batch is the stream `batch/<hex id>`. Approvals and status changes append at the exact
//! version read.
//!
//! - [`create`]: creating a batch (or answering a retry).
//! - [`approve`]: recording an approval.
//! - [`close`]: cancel and the expiry reconciler.
//! - [`view`]: a batch as stored, with its approvals.
//! - [`proof`]: scope pages and leaf proofs from the stored tree nodes.
//! - `append`: writing decided events on the batch's stream.

pub(crate) mod append;
pub mod approve;
pub mod close;
pub mod create;
pub mod proof;
pub mod view;

pub use approve::approve_batch;
pub use close::{cancel_batch, expire_due_batches};
pub use create::create_batch;
pub use proof::{leaf_proof, scope_page, ScopeEntry};
pub use view::{batch_view, list_batches, BatchView, MAX_BATCH_LIST};
