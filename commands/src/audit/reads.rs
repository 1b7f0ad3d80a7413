//! Reads for exports, proofs and database-side verification: checkpoints, leaves joined with
//! their events (paged), and inclusion proofs from O(log n) stored nodes.
//!
//! These read through the store's read pool, never inside a write transaction; the statements
//! are `projections::audit::read`'s.

use domain::audit::tree::inclusion_plan;
use domain::audit::Hash;
use events::store::EventStore;
use projections::audit::{read, ReadFrom};

use super::{nodes, AuditError};

pub use projections::audit::{CheckpointRow, LeafRow};

/// An inclusion proof of one event against a tenant's latest checkpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InclusionProof {
    pub checkpoint: CheckpointRow,
    pub leaf: LeafRow,
    /// RFC 9162 §2.1.3 inclusion proof of `leaf.index` in the tree of `checkpoint.tree_size`.
    pub proof: Vec<Hash>,
}

/// Every checkpoint of a tenant, in order.
pub async fn checkpoints(
    store: &EventStore,
    tenant: &str,
) -> Result<Vec<CheckpointRow>, AuditError> {
    Ok(read::checkpoints(&mut ReadFrom::Store(store), tenant).await?)
}

/// A tenant's tree size as the sequencer committed it.
pub async fn tree_size(store: &EventStore, tenant: &str) -> Result<u64, AuditError> {
    Ok(read::tree_size(&mut ReadFrom::Store(store), tenant).await?)
}

/// Every tenant with a tree, and its size.
pub async fn tree_sizes(store: &EventStore) -> Result<Vec<(String, u64)>, AuditError> {
    Ok(read::tree_sizes(&mut ReadFrom::Store(store)).await?)
}

/// Up to `limit` leaves of a tenant with index at least `from`, in index order, each with its
/// event.
pub async fn leaves(
    store: &EventStore,
    tenant: &str,
    from: u64,
    limit: u32,
) -> Result<Vec<LeafRow>, AuditError> {
    Ok(read::leaves(&mut ReadFrom::Store(store), tenant, from, limit).await?)
}

/// The inclusion proof of the event at `position` against the tenant's latest checkpoint.
pub async fn prove(
    store: &EventStore,
    tenant: &str,
    position: i64,
) -> Result<InclusionProof, AuditError> {
    let mut src = ReadFrom::Store(store);
    let Some(checkpoint) = read::checkpoints(&mut src, tenant).await?.pop() else {
        return Err(AuditError::NoCheckpoint(tenant.to_string()));
    };
    let Some(leaf) = read::leaf_at(&mut src, tenant, position).await? else {
        return Err(AuditError::UnknownPosition {
            tenant: tenant.to_string(),
            position,
        });
    };
    if leaf.index >= checkpoint.tree_size {
        return Err(AuditError::NotYetSealed {
            tenant: tenant.to_string(),
            position,
            index: leaf.index,
            size: checkpoint.tree_size,
        });
    }
    let plan =
        inclusion_plan(leaf.index, checkpoint.tree_size).map_err(|source| AuditError::Proof {
            tenant: tenant.to_string(),
            source,
        })?;
    let proof = nodes::read_plan(&mut src, tenant, &plan).await?;
    Ok(InclusionProof {
        checkpoint,
        leaf,
        proof,
    })
}
