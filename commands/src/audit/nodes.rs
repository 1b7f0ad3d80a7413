//! The domain's Merkle plans over the stored nodes: which node hashes a proof, a root or a
//! frontier needs ([`domain::audit::tree`]), read through `projections::audit::read`.

use domain::audit::tree::ProofPlan;
use domain::audit::{Frontier, Hash, NodeCoord};
use projections::audit::{read, ReadFrom};

use super::AuditError;

/// The stored hashes of `ids`, in order.
pub(crate) async fn hashes(
    src: &mut ReadFrom<'_>,
    tenant: &str,
    ids: &[NodeCoord],
) -> Result<Vec<Hash>, AuditError> {
    let coords: Vec<(u32, u64)> = ids.iter().map(|id| (id.level, id.index)).collect();
    Ok(read::node_hashes(src, tenant, &coords).await?)
}

/// Reads the nodes a plan needs and folds them.
pub(crate) async fn read_plan(
    src: &mut ReadFrom<'_>,
    tenant: &str,
    plan: &ProofPlan,
) -> Result<Vec<Hash>, AuditError> {
    let hashes = hashes(src, tenant, plan.node_ids()).await?;
    plan.assemble(&hashes).map_err(|source| AuditError::Tree {
        tenant: tenant.to_string(),
        source,
    })
}

/// A tenant's frontier (the roots of its complete subtrees) as stored.
pub(crate) async fn load_frontier(
    src: &mut ReadFrom<'_>,
    tenant: &str,
) -> Result<Frontier, AuditError> {
    let size = read::tree_size(src, tenant).await?;
    let ids: Vec<_> = Frontier::node_ids(size).collect();
    let hashes = hashes(src, tenant, &ids).await?;
    Frontier::from_parts(size, &hashes).map_err(|source| AuditError::Tree {
        tenant: tenant.to_string(),
        source,
    })
}
