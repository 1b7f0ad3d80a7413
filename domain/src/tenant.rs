//! A tenant's life cycle (issue 45 item 6): create and delete, pure.
//!
//! A tenant exists once an operator created it or once a token, a node or a batch names it (the
//! tenants from before tenant creation). Deleting one is a single decision whose events the
//! shell appends in one transaction: `tenant.deleted` on the tenant's stream, then `node.retired`
//! for each of its active nodes (only when the operator asked for it: otherwise active nodes
//! refuse the deletion), `token.revoked` for each token not revoked yet (a join with one is
//! then refused `join-token:revoked`), and `batch.cancelled` for each pending or approved batch
//! (spec 003: "a deleted tenant's pending batches are cancelled"). A deleted tenant keeps its
//! name: it is never created again, and no token is created for it. The default tenant, which
//! `bcctl up` and `token create` fall back to, cannot be deleted.

use events::schema::{JoinTokenRevoked, NodeRetired, TenantCreated, TenantDeleted};

use crate::decision::Decision;
use crate::identity::{IdentityEvent, NodeState, NodeStatus};
use crate::quorum::{decide_cancel_batch, BatchEvent, BatchId, BatchStanding, CancelBatch};

/// The tenant `bcctl up` and `token create` fall back to; never deleted.
pub const DEFAULT_TENANT: &str = "default";

/// Longest description of a tenant, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 500;

/// One event of a tenant decision, on the stream it belongs to.
#[derive(Debug, Clone, PartialEq)]
pub enum TenantEvent {
    /// `tenant.created` on `tenant/<id>`.
    Created(TenantCreated),
    /// `tenant.deleted` on `tenant/<id>`.
    Deleted(TenantDeleted),
    /// A node retired or a token revoked by the deletion, on its own stream.
    Identity(IdentityEvent),
    /// A batch cancelled by the deletion, on its own stream.
    Batch(BatchId, BatchEvent),
}

/// Why a tenant command was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TenantRefusal {
    /// Invalid input; the text says which field and why.
    #[error("INVALID_INPUT: {0}")]
    Invalid(String),
    /// No token, node, batch or creation names the tenant.
    #[error("NOT_FOUND: no tenant {0}")]
    Unknown(String),
    /// The tenant exists already.
    #[error("ALREADY_EXISTS: tenant {0} exists")]
    Exists(String),
    /// The tenant was deleted: its name is not reused.
    #[error("INVALID_STATE: tenant {0} was deleted; a deleted tenant's name is not reused")]
    Deleted(String),
    /// The default tenant is never deleted.
    #[error(
        "INVALID_INPUT: the default tenant cannot be deleted (bcctl up and token create fall back to it)"
    )]
    DefaultTenant,
    /// The tenant of the deployment's own events (trust bundle, operators).
    #[error("INVALID_INPUT: tenant deployment holds the deployment's own events (trust bundle, operators): it is never created or deleted")]
    Reserved,
    /// The tenant has active nodes and the operator did not ask to retire them.
    #[error("INVALID_STATE: tenant {tenant} has {count} active node(s) ({first}): retire them first, or delete with --retire-nodes")]
    ActiveNodes {
        /// The tenant.
        tenant: String,
        /// How many.
        count: usize,
        /// The first few, comma-separated.
        first: String,
    },
}

/// What the log holds of a tenant, as the shell loaded it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TenantStanding {
    /// An operator created it (`tenant.created`).
    pub created: bool,
    /// It was deleted (`tenant.deleted`).
    pub deleted: bool,
    /// A token, a node or a batch names it.
    pub named: bool,
}

impl TenantStanding {
    fn exists(&self) -> bool {
        self.created || self.named
    }
}

/// `tenant create`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateTenant {
    /// The tenant.
    pub tenant_id: String,
    /// What the operator wrote about it.
    pub description: String,
}

/// `tenant delete`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteTenant {
    /// The tenant.
    pub tenant_id: String,
    /// Why (recorded in every event of the decision).
    pub reason: String,
    /// Retire the tenant's active nodes in the same decision (`--retire-nodes`).
    pub retire_nodes: bool,
}

/// What a deletion reads beside the tenant's standing, as the shell loaded it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TenantHoldings {
    /// Every node of the tenant.
    pub nodes: Vec<NodeState>,
    /// The tenant's tokens not revoked yet.
    pub live_tokens: Vec<String>,
    /// The tenant's pending and approved batches.
    pub open_batches: Vec<BatchStanding>,
}

/// What a deletion did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TenantDeletion {
    /// The nodes it retired.
    pub retired_nodes: Vec<String>,
    /// The tokens it revoked.
    pub revoked_tokens: Vec<String>,
    /// The batches it cancelled.
    pub cancelled_batches: Vec<BatchId>,
}

/// A tenant id: 1 to 128 of A-Z, a-z, 0-9, '.', '-', '_' (the rule of every id of tokens).
pub fn check_tenant_id(value: &str) -> Result<(), TenantRefusal> {
    match crate::plain_id::plain_id_problem("tenant id", value) {
        None => Ok(()),
        Some(problem) => Err(TenantRefusal::Invalid(problem)),
    }
}

/// Creates a tenant: refused when it exists (created, or named by a token, node or batch) or
/// was deleted.
pub fn decide_create_tenant(
    cmd: &CreateTenant,
    standing: &TenantStanding,
) -> Result<Decision<TenantEvent, ()>, TenantRefusal> {
    check_tenant_id(&cmd.tenant_id)?;
    if cmd.tenant_id == crate::attest::DEPLOYMENT_TENANT {
        return Err(TenantRefusal::Reserved);
    }
    let chars = cmd.description.chars().count();
    if chars > MAX_DESCRIPTION_CHARS {
        return Err(TenantRefusal::Invalid(format!(
            "the description has {chars} characters, at most {MAX_DESCRIPTION_CHARS}"
        )));
    }
    if standing.deleted {
        return Err(TenantRefusal::Deleted(cmd.tenant_id.clone()));
    }
    if standing.exists() {
        return Err(TenantRefusal::Exists(cmd.tenant_id.clone()));
    }
    Ok(Decision {
        events: vec![TenantEvent::Created(TenantCreated {
            tenant_id: cmd.tenant_id.clone(),
            description: cmd.description.clone(),
        })],
        outcome: (),
    })
}

/// Deletes a tenant and, in the same decision, retires its active nodes (when asked; refused
/// otherwise while it has any), revokes its live tokens and cancels its open batches.
pub fn decide_delete_tenant(
    cmd: &DeleteTenant,
    standing: &TenantStanding,
    holdings: &TenantHoldings,
) -> Result<Decision<TenantEvent, TenantDeletion>, TenantRefusal> {
    let tenant = &cmd.tenant_id;
    check_tenant_id(tenant)?;
    if tenant == crate::attest::DEPLOYMENT_TENANT {
        return Err(TenantRefusal::Reserved);
    }
    if tenant == DEFAULT_TENANT {
        return Err(TenantRefusal::DefaultTenant);
    }
    if standing.deleted {
        return Err(TenantRefusal::Deleted(tenant.clone()));
    }
    if !standing.exists() {
        return Err(TenantRefusal::Unknown(tenant.clone()));
    }
    let active: Vec<&NodeState> = holdings
        .nodes
        .iter()
        .filter(|n| n.status == NodeStatus::Active)
        .collect();
    if !active.is_empty() && !cmd.retire_nodes {
        let first: Vec<&str> = active.iter().take(5).map(|n| n.node_id.as_str()).collect();
        let more = if active.len() > 5 { ", ..." } else { "" };
        return Err(TenantRefusal::ActiveNodes {
            tenant: tenant.clone(),
            count: active.len(),
            first: format!("{}{more}", first.join(", ")),
        });
    }
    let why = format!("tenant {tenant} deleted: {}", cmd.reason);
    let outcome = TenantDeletion {
        retired_nodes: active.iter().map(|n| n.node_id.clone()).collect(),
        revoked_tokens: holdings.live_tokens.clone(),
        cancelled_batches: holdings.open_batches.iter().map(|b| b.batch_id).collect(),
    };
    let mut events = vec![TenantEvent::Deleted(TenantDeleted {
        tenant_id: tenant.clone(),
        reason: cmd.reason.clone(),
        retired_node_ids: outcome.retired_nodes.clone(),
        revoked_token_ids: outcome.revoked_tokens.clone(),
        cancelled_batch_ids: outcome
            .cancelled_batches
            .iter()
            .map(|b| b.as_bytes().to_vec())
            .collect(),
    })];
    for node_id in &outcome.retired_nodes {
        events.push(TenantEvent::Identity(IdentityEvent::NodeRetired(
            NodeRetired {
                node_id: node_id.clone(),
                reason: why.clone(),
            },
        )));
    }
    for token_id in &outcome.revoked_tokens {
        events.push(TenantEvent::Identity(IdentityEvent::TokenRevoked(
            JoinTokenRevoked {
                token_id: token_id.clone(),
                reason: why.clone(),
            },
        )));
    }
    let cancel = CancelBatch {
        reason: why.clone(),
        cancelled_by: format!("tenant-delete:{tenant}"),
    };
    for batch in &holdings.open_batches {
        // Open batches only: the cancel rule refuses nothing here.
        if let Ok(d) = decide_cancel_batch(&cancel, batch) {
            events.extend(
                d.events
                    .into_iter()
                    .map(|e| TenantEvent::Batch(batch.batch_id, e)),
            );
        }
    }
    Ok(Decision { events, outcome })
}

#[cfg(test)]
#[path = "tenant_tests.rs"]
mod tests;
