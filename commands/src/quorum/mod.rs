//! Trust bundle and destructive-batch commands (issue 6): the transaction boundary around
//! `domain::trust_bundle`'s and `domain::quorum`'s decisions.
//!
//! - [`bundle`]: settling the published trust bundle (content-versioned, history-aware, with a
//!   floor), approver-set changes, command-signing root rotation (add, switch, drop) and the
//!   trust versions nodes report.
//! - [`batch`]: creating batches (scope tree and stored proofs), approvals, expiry (a reconciler
//!   the server calls periodically) and cancel, and the reads the CLI and the gateway need.
//! - [`error`]: every refusal is a [`QuorumRefusal`] inside [`QuorumError::Refused`]; store and
//!   projection failures are [`QuorumError::Run`] (bugs or outages, not refusals).
//! - [`stream`]: the streams and tenant the events are written to.
//! - [`tables`]: the quorum projections and their tables; [`scope_index`]: the scope tree the
//!   batch projection stores.

pub mod batch;
pub mod bundle;
pub mod error;
pub mod scope_index;
pub mod stream;
pub mod tables;

pub use batch::{
    approve_batch, batch_view, cancel_batch, create_batch, expire_due_batches, leaf_proof,
    list_batches, scope_page, BatchView, ScopeEntry, MAX_BATCH_LIST,
};
pub use bundle::{
    drop_command_root, published_bundle, report_node_trust, rotate_add_command_root,
    settle_trust_bundle, switch_command_root, PublishedBundle, TrustReport,
};
pub use domain::quorum::{ApproveOutcome, CreatedBatch};
pub use domain::trust_bundle::{
    BundleConfig, SettleOutcome, Settled, Switched, CONNECTED_WINDOW_US, DROP_AFTER_SWITCH_US,
};
pub use error::{QuorumError, QuorumRefusal};
/// The published bundle's version and content (what a Welcome carries), read outside any
/// transaction: the gateway's read, which owns no SQL.
pub use projections::quorum::{read_published_content, PublishedContentError, PublishedContentRow};
pub use scope_index::scope_indexer;
pub use stream::{batch_stream, DEPLOYMENT_TENANT, TRUST_BUNDLE_STREAM};
pub use tables::{projections, tables};
