//! Quorum projections (issue 6): the published trust bundle and its history, the trust version
//! each node reports, and destructive batches with their scope proofs and approvals.
//!
//! Every table is built only from its events; rows record the position they reflect.
//!
//! - [`bundle`]: how trust-bundle and node-trust events change their tables.
//! - [`batch`]: how batch events change theirs.
//! - [`read`]: every quorum read, for the command layer, the CLI and the gateway.
//! - [`support`]: named statements tests and benchmarks use on these tables (never the server).

pub mod batch;
pub mod bundle;
mod inapplicable;
pub mod read;
pub mod support;

pub use batch::{BatchProjection, ScopeIndex, ScopeIndexer};
pub use bundle::{NodeTrustProjection, TrustBundleProjection};
pub use read::{
    connected_nodes, history_version_of, list_batches, open_batches_of_tenant, pending_past_end,
    read_approvals, read_batch, read_bundle_state, read_history, read_leaf, read_published_content,
    read_scope_page, read_tree_range, read_tree_rows, ApprovalRow, BatchRow, BundleStateRow,
    HistoryRow, NodeTrustRow, PublishedContentError, PublishedContentRow, ScopeRow, TreeRow,
};
