//! Quorum projections (issue 6): the published trust bundle and its history, the trust version
//! each node reports, and destructive batches with their scope proofs and approvals.
//!
//! Every table is built only from its events; rows record the position they reflect. Reads for
//! the command layer and the CLI are the `read_*` functions, which take the caller's transaction.

pub mod batch;
pub mod bundle;
mod sql;

pub use batch::{
    pending_past_end, read_approvals, read_batch, read_leaf, read_scope_page, read_tree_range,
    read_tree_rows, ApprovalRow, BatchProjection, BatchRow, ScopeIndex, ScopeIndexer, ScopeRow,
    TreeRow,
};
pub use bundle::{
    connected_nodes, history_version_of, read_bundle_state, read_history, BundleStateRow,
    HistoryRow, NodeTrustProjection, NodeTrustRow, TrustBundleProjection,
};

use events::RecordedEvent;

use crate::ProjectionError;

pub(crate) fn inapplicable(
    projection: &'static str,
    event: &RecordedEvent,
    why: String,
) -> ProjectionError {
    ProjectionError::Inapplicable {
        projection,
        position: event.position,
        event_type: event.event_type.clone(),
        why,
    }
}
