//! Whether a tenant's tree grew only by its own last checkpoint: the sealer's idle test.
//!
//! Each `audit.checkpoint.sealed` event is itself an event of its tenant, so the sequencer gives
//! it the next leaf and the tree is one leaf larger than the checkpoint that was just signed. On
//! an idle deployment nothing else arrives, and signing that one leaf every interval would write
//! a checkpoint (and with it another leaf) forever. [`grew_only_by_own_checkpoint`] tells the
//! sealer to wait: the checkpoint event is covered by the next checkpoint, once anything else
//! happens.

use events::store::SqlValue;

use super::{AuditTableError, ReadFrom};

/// True when the tenant's tree is exactly one leaf larger than its last checkpoint and that leaf
/// is the last checkpoint's own `audit.checkpoint.sealed` event.
pub async fn grew_only_by_own_checkpoint(
    src: &mut ReadFrom<'_>,
    tenant: &str,
) -> Result<bool, AuditTableError> {
    let row: Option<(i64,)> = src
        .fetch_optional(
            "SELECT c.seq FROM audit_checkpoints c \
             JOIN audit_trees t ON t.tenant_id = c.tenant_id \
             JOIN audit_leaves l ON l.tenant_id = c.tenant_id AND l.leaf_index = c.tree_size \
             WHERE c.tenant_id = $1 \
               AND c.seq = (SELECT MAX(seq) FROM audit_checkpoints WHERE tenant_id = $1) \
               AND t.size = c.tree_size + 1 \
               AND l.position = c.position",
            &[SqlValue::from(tenant)],
        )
        .await?;
    Ok(row.is_some())
}
