//! The quorum projections the handlers apply inline (and a rebuild applies), and their tables.

use projections::quorum::{BatchProjection, NodeTrustProjection, TrustBundleProjection};
use projections::Projection;

use crate::quorum::scope_index::scope_indexer;

static TRUST_BUNDLE: TrustBundleProjection = TrustBundleProjection;
static NODE_TRUST: NodeTrustProjection = NodeTrustProjection;
static BATCHES: BatchProjection = BatchProjection::new(scope_indexer);

/// The quorum projections, inline and for rebuilds.
pub fn projections() -> [&'static dyn Projection; 3] {
    [&TRUST_BUNDLE, &NODE_TRUST, &BATCHES]
}

/// Every table the quorum projections own (for digests).
pub fn tables() -> Vec<projections::TableSpec> {
    projections()
        .iter()
        .flat_map(|p| p.tables().iter().copied())
        .collect()
}
