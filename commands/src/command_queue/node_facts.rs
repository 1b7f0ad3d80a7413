//! The node a command is for, as the queue's rules read it (issue 40 item 16): its tenant, role
//! and status, whether it holds a live certificate, and that certificate's allowed kinds. Read
//! at enqueue and again at dispatch, where the node's certificate may have changed since.

use domain::command::enqueue::NodeFacts;
use events::store::StoreTx;
use projections::identity::read::{certs_of_node, node_by_id};

use super::error::CommandQueueError;

/// The node, its live certificates and its allowed kinds, as the decision reads them.
pub(crate) async fn node_facts(
    tx: &mut StoreTx,
    node_id: &str,
    now_us: i64,
) -> Result<Option<NodeFacts>, CommandQueueError> {
    let Some(node) = node_by_id(tx, node_id).await? else {
        return Ok(None);
    };
    let certs = certs_of_node(tx, node_id).await?;
    let live: Vec<_> = certs
        .iter()
        .filter(|c| c.revoked_at_us.is_none() && c.not_after_us > now_us)
        .collect();
    // The newest live certificate's allowed kinds (what the node presents now); the node row's
    // when it holds none.
    let allowed_kinds = match live.last() {
        Some(cert) => cert.allowed_kinds(),
        None => node
            .allowed_kinds
            .as_deref()
            .map(|k| k.split(',').map(str::to_owned).collect())
            .unwrap_or_default(),
    };
    Ok(Some(NodeFacts {
        tenant_id: node.tenant_id,
        role: node.role,
        status: node.status,
        has_live_certificate: !live.is_empty(),
        allowed_kinds: allowed_kinds
            .into_iter()
            .filter(|k| !k.is_empty())
            .collect(),
    }))
}
