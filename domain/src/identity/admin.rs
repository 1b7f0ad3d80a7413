//! Operator decisions: create and revoke join tokens; revoke a node's identity, delete or
//! retire a node. Their refusals are operator errors (bad input, unknown id, wrong state), not
//! security refusals.

use events::schema::{
    JoinTokenCreated, JoinTokenRevoked, NodeDeleted, NodeIdentityRevoked, NodeRetired,
};
use time::OffsetDateTime;

use super::state::{ExpectBinding, IdentityEvent, NodeState, NodeStatus, TokenRole, TokenState};
use super::{unix_us, Decision};
use crate::pki::{SiteId, TokenHash};

/// Why an operator command was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdminRefusal {
    /// Invalid input; the text says which field and why.
    #[error("INVALID_INPUT: {0}")]
    Invalid(String),
    /// No such token.
    #[error("NOT_FOUND: no join token {0}")]
    UnknownToken(String),
    /// No such node.
    #[error("NOT_FOUND: no node {0}")]
    UnknownNode(String),
    /// The token was already revoked.
    #[error("INVALID_STATE: join token {0} is already revoked")]
    TokenAlreadyRevoked(String),
    /// The token's tenant was deleted (issue 45 item 6): no token is created for it again.
    #[error("INVALID_STATE: tenant {0} was deleted; a deleted tenant's name is not reused")]
    TenantDeleted(String),
    /// The node is not in a state the command applies to.
    #[error("INVALID_STATE: node {node} is {status}")]
    NodeState {
        /// Node id.
        node: String,
        /// Its status.
        status: &'static str,
    },
}

/// `token create`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateToken {
    /// Token id (drawn by the shell).
    pub token_id: String,
    /// Tenant.
    pub tenant_id: String,
    /// Site.
    pub site_id: String,
    /// Pool.
    pub pool_id: String,
    /// Role admitted.
    pub role: TokenRole,
    /// Uses, at least 1.
    pub uses: u32,
    /// Expiry, µs since the epoch; must be after `now`.
    pub expires_at_us: i64,
    /// SHA-256 of the secret (drawn by the shell).
    pub secret_hash: TokenHash,
    /// Expect binding.
    pub expect: ExpectBinding,
    /// The one node this token re-keys in place (single use; it must exist and be active).
    pub reclaim_node_id: Option<String>,
    /// Role provisioned: the node the token was minted for.
    pub for_node_id: Option<String>,
    /// A join with this token waits for an operator's approval of a join request.
    pub require_approval: bool,
    /// Role discovery: the boot entry the token was minted for (a site agent's BootToken).
    pub boot_entry_id: Option<String>,
}

fn check_id(what: &str, value: &str) -> Result<(), AdminRefusal> {
    match crate::plain_id::plain_id_problem(what, value) {
        None => Ok(()),
        Some(problem) => Err(AdminRefusal::Invalid(problem)),
    }
}

/// The nodes a token to create names, as the shell loaded them (`None`: not named, or no such
/// node).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TokenTargets {
    /// The node of `reclaim_node_id`.
    pub reclaim: Option<NodeState>,
    /// The node of `for_node_id`.
    pub for_node: Option<NodeState>,
    /// The token's tenant was deleted.
    pub tenant_deleted: bool,
}

/// Creates a token. A token that reclaims a node needs that node to exist and be active; one
/// minted for a node, [`check_token_target`].
pub fn decide_create_token(
    cmd: &CreateToken,
    targets: &TokenTargets,
    now: OffsetDateTime,
) -> Result<Decision<()>, AdminRefusal> {
    check_token_fields(cmd, now)?;
    if targets.tenant_deleted {
        return Err(AdminRefusal::TenantDeleted(cmd.tenant_id.clone()));
    }
    if let Some(node_id) = &cmd.reclaim_node_id {
        match targets.reclaim.as_ref().map(|n| n.status) {
            None => return Err(AdminRefusal::UnknownNode(node_id.clone())),
            Some(NodeStatus::Active) => {}
            Some(_) => {
                return Err(AdminRefusal::Invalid(format!(
                    "node {node_id} is not active: only an active node can be reclaimed"
                )))
            }
        }
    }
    check_token_target(cmd, targets.for_node.as_ref())?;
    Ok(Decision::events_only(vec![token_created(cmd)]))
}

fn token_created(cmd: &CreateToken) -> IdentityEvent {
    IdentityEvent::TokenCreated(JoinTokenCreated {
        token_id: cmd.token_id.clone(),
        tenant_id: cmd.tenant_id.clone(),
        site_id: cmd.site_id.clone(),
        pool_id: cmd.pool_id.clone(),
        role: cmd.role.as_str().into(),
        uses: cmd.uses,
        expires_at_us: cmd.expires_at_us,
        secret_sha256: cmd.secret_hash.as_bytes().to_vec(),
        expect_product_uuid: cmd.expect.product_uuid.clone().unwrap_or_default(),
        expect_mac: cmd.expect.mac.clone().unwrap_or_default(),
        allow_reclaim: false,
        reclaim_node_id: cmd.reclaim_node_id.clone().unwrap_or_default(),
        for_node_id: cmd.for_node_id.clone().unwrap_or_default(),
        require_approval: cmd.require_approval,
        boot_entry_id: cmd.boot_entry_id.clone().unwrap_or_default(),
    })
}

/// The token's own fields: ids, uses, role rules, expiry.
fn check_token_fields(cmd: &CreateToken, now: OffsetDateTime) -> Result<(), AdminRefusal> {
    check_id("token id", &cmd.token_id)?;
    check_id("tenant id", &cmd.tenant_id)?;
    check_id("pool id", &cmd.pool_id)?;
    SiteId::new(&cmd.site_id).map_err(|e| AdminRefusal::Invalid(e.to_string()))?;
    if cmd.uses == 0 {
        return Err(AdminRefusal::Invalid("uses must be at least 1".into()));
    }
    if let Some(node) = &cmd.reclaim_node_id {
        check_id("reclaim node id", node)?;
        if cmd.uses != 1 {
            return Err(AdminRefusal::Invalid(format!(
                "a token that reclaims node {node} is single use: uses must be 1, not {}",
                cmd.uses
            )));
        }
    }
    if let Some(node) = &cmd.for_node_id {
        check_id("for-node id", node)?;
    }
    check_provisioned(cmd)?;
    check_discovery(cmd)?;
    if cmd.expires_at_us <= unix_us(now) {
        return Err(AdminRefusal::Invalid(
            "the expiry must be in the future".into(),
        ));
    }
    Ok(())
}

/// Spec 000 "provisioned": a provisioned token is one machine's credential, so it admits one
/// join and is bound to one machine when it is created (an expected product UUID, or the node
/// it is minted for); `for_node_id` belongs to role provisioned only, and its re-key is named by
/// `for_node_id`, never `reclaim_node_id`.
fn check_provisioned(cmd: &CreateToken) -> Result<(), AdminRefusal> {
    if cmd.role != TokenRole::Provisioned {
        if cmd.for_node_id.is_some() {
            return Err(AdminRefusal::Invalid(
                "--for-node applies to role provisioned only".into(),
            ));
        }
        return Ok(());
    }
    if cmd.uses != 1 {
        return Err(AdminRefusal::Invalid(format!(
            "a provisioned token admits exactly one machine: uses must be 1, not {}",
            cmd.uses
        )));
    }
    if cmd.reclaim_node_id.is_some() {
        return Err(AdminRefusal::Invalid(
            "a provisioned token names the node it re-keys with --for-node NODE, not --reclaim"
                .into(),
        ));
    }
    if cmd.for_node_id.is_none() && cmd.expect.product_uuid.is_none() {
        return Err(AdminRefusal::Invalid(
            "a provisioned token must be bound to one machine: give --for-node NODE or \
             --expect-product-uuid UUID"
                .into(),
        ));
    }
    Ok(())
}

/// Issue 20: a discovery token is minted by the control plane for one boot entry of one site
/// (a site agent's BootToken), for one boot of one machine: it admits exactly one join, names
/// its boot entry and the MAC it expects; `boot_entry_id` belongs to role discovery only.
fn check_discovery(cmd: &CreateToken) -> Result<(), AdminRefusal> {
    if cmd.role != TokenRole::Discovery {
        if cmd.boot_entry_id.is_some() {
            return Err(AdminRefusal::Invalid(
                "a boot entry id applies to role discovery only".into(),
            ));
        }
        return Ok(());
    }
    let Some(entry) = &cmd.boot_entry_id else {
        return Err(AdminRefusal::Invalid(
            "a discovery token is minted for one boot entry by its site's boot server (bcctl site boot add), never by hand"
                .into(),
        ));
    };
    check_id("boot entry id", entry)?;
    if cmd.uses != 1 {
        return Err(AdminRefusal::Invalid(format!(
            "a discovery token admits exactly one boot: uses must be 1, not {}",
            cmd.uses
        )));
    }
    if cmd.expect.mac.is_none() {
        return Err(AdminRefusal::Invalid(
            "a discovery token must expect its boot entry's MAC".into(),
        ));
    }
    if cmd.reclaim_node_id.is_some() || cmd.require_approval {
        return Err(AdminRefusal::Invalid(
            "a discovery token neither reclaims a node nor requires approval (the discovery \
             attestor's approval setting decides)"
                .into(),
        ));
    }
    Ok(())
}

/// Checks the node a provisioned token is minted for (`cmd.for_node_id`, loaded by the shell as
/// `node`): it must exist, be active, and be the token's tenant's, in the token's site and pool
/// (the join re-keys it in place, keeping all three), and the join must have a product UUID to
/// hold the machine to: the one the node recorded at its last join, or the token's expected one.
/// Nothing to check without `for_node_id`.
pub fn check_token_target(cmd: &CreateToken, node: Option<&NodeState>) -> Result<(), AdminRefusal> {
    let Some(id) = &cmd.for_node_id else {
        return Ok(());
    };
    let invalid = |why: String| Err(AdminRefusal::Invalid(format!("--for-node {id}: {why}")));
    let Some(node) = node else {
        return invalid("no such node".into());
    };
    if node.status != NodeStatus::Active {
        return invalid(format!(
            "the node is {}, a provisioned token re-keys an active node only",
            node.status.as_str()
        ));
    }
    if node.tenant_id != cmd.tenant_id {
        return invalid(format!(
            "the node belongs to another tenant than {}",
            cmd.tenant_id
        ));
    }
    if node.site_id != cmd.site_id || node.pool_id != cmd.pool_id {
        return invalid(format!(
            "the node is in site {} pool {}; create the token with --site {} --pool {}",
            node.site_id, node.pool_id, node.site_id, node.pool_id
        ));
    }
    if node.role != cmd.role.node_role() {
        return invalid(format!(
            "the node has role {}, a provisioned token admits node",
            node.role.as_str()
        ));
    }
    if node.product_uuid_sha256.is_none() && cmd.expect.product_uuid.is_none() {
        return invalid(
            "the node recorded no product UUID at its join; give --expect-product-uuid UUID".into(),
        );
    }
    Ok(())
}

/// Revokes a token.
pub fn decide_revoke_token(
    token_id: &str,
    token: Option<&TokenState>,
    reason: &str,
) -> Result<Decision<()>, AdminRefusal> {
    let token = token.ok_or_else(|| AdminRefusal::UnknownToken(token_id.into()))?;
    if token.revoked {
        return Err(AdminRefusal::TokenAlreadyRevoked(token_id.into()));
    }
    Ok(Decision::events_only(vec![IdentityEvent::TokenRevoked(
        JoinTokenRevoked {
            token_id: token.token_id.clone(),
            reason: reason.into(),
        },
    )]))
}

fn existing<'a>(node_id: &str, node: Option<&'a NodeState>) -> Result<&'a NodeState, AdminRefusal> {
    match node {
        None => Err(AdminRefusal::UnknownNode(node_id.into())),
        Some(n) if n.status == NodeStatus::Deleted => Err(AdminRefusal::NodeState {
            node: node_id.into(),
            status: NodeStatus::Deleted.as_str(),
        }),
        Some(n) => Ok(n),
    }
}

/// What the log holds of a node's newest certificate, for [`identity_revoked`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewestCert {
    /// Whether it is revoked.
    pub revoked: bool,
    /// Its identity generation.
    pub identity_generation: u64,
}

/// Whether a node's identity reads as revoked: its newest certificate is revoked or of an
/// identity generation older than the node's (the node's row may still say active).
pub fn identity_revoked(node_identity_generation: u64, newest: &NewestCert) -> bool {
    newest.revoked || newest.identity_generation < node_identity_generation
}

/// What revoking a node's identity did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdentityRevocation {
    /// The generation went up and every open certificate was revoked.
    Revoked,
    /// Nothing changed: the node is active, holds no unrevoked certificate, and its newest
    /// certificate is revoked or of an older identity generation.
    AlreadyRevoked,
}

/// Revokes a node's identity: the generation goes up, and every certificate of the node not yet
/// revoked (`unrevoked_serials`, as the shell loaded them) is revoked; the event names them.
/// An identity already revoked ([`identity_revoked`], no certificate left open, `newest` as the
/// shell loaded it) is left as it is: [`IdentityRevocation::AlreadyRevoked`], no events.
pub fn decide_revoke_identity(
    node_id: &str,
    node: Option<&NodeState>,
    newest: Option<&NewestCert>,
    unrevoked_serials: &[String],
    reason: &str,
) -> Result<Decision<IdentityRevocation>, AdminRefusal> {
    let node = existing(node_id, node)?;
    let already = node.status == NodeStatus::Active
        && unrevoked_serials.is_empty()
        && newest.is_some_and(|c| identity_revoked(node.identity_generation, c));
    if already {
        return Ok(Decision::unchanged(IdentityRevocation::AlreadyRevoked));
    }
    Ok(Decision {
        events: vec![IdentityEvent::IdentityRevoked(NodeIdentityRevoked {
            node_id: node.node_id.clone(),
            reason: reason.into(),
            new_identity_generation: node.identity_generation + 1,
            revoked_serials: unrevoked_serials.to_vec(),
        })],
        outcome: IdentityRevocation::Revoked,
    })
}

/// Deletes a node: certificates revoked, hardware key freed.
pub fn decide_delete_node(
    node_id: &str,
    node: Option<&NodeState>,
    reason: &str,
) -> Result<Decision<()>, AdminRefusal> {
    let node = existing(node_id, node)?;
    Ok(Decision::events_only(vec![IdentityEvent::NodeDeleted(
        NodeDeleted {
            node_id: node.node_id.clone(),
            reason: reason.into(),
        },
    )]))
}

/// Retires a node: certificates revoked; it never renews again.
pub fn decide_retire_node(
    node_id: &str,
    node: Option<&NodeState>,
    reason: &str,
) -> Result<Decision<()>, AdminRefusal> {
    let node = existing(node_id, node)?;
    if node.status == NodeStatus::Retired {
        return Err(AdminRefusal::NodeState {
            node: node_id.into(),
            status: NodeStatus::Retired.as_str(),
        });
    }
    Ok(Decision::events_only(vec![IdentityEvent::NodeRetired(
        NodeRetired {
            node_id: node.node_id.clone(),
            reason: reason.into(),
        },
    )]))
}
