//! The operator commands on tokens and nodes (`bcctl token …`, `bcctl node …`): create, revoke
//! and list tokens; revoke a node's identity, delete or retire a node; list and show nodes.

use domain::identity::{
    decide_create_token, decide_delete_node, decide_retire_node, decide_revoke_identity,
    decide_revoke_token, AdminRefusal, ChangeNames, CreateToken, Decision, ExpectBinding,
    IdentityEvent, IdentityRevocation, NewestCert, NodeState, Refused, TokenRole, TokenTargets,
};
use std::sync::Arc;

use async_trait::async_trait;
use domain::pki::{TokenHash, TokenSecret};
use events::store::{EventStore, LogStore, LogTx, StoreTx};
use projections::identity::operator::latest_cert_of;
use projections::identity::read::{self, NodeRow, TokenRow};
use projections::tenants::{hold_tenant, tenant_row, TenantHold};
use rand_core::CryptoRngCore;

use super::append::{append_decided, fresh_id};
use super::error::IdentityError;
use super::names::NodeNamesView;
use super::{rows, CertView, CreatedToken, NodeDetail, NodeView, TokenView};
use crate::run::{decided, run, At, Command, Decided};
use crate::Clock;

/// A token to create.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewToken {
    /// Tenant.
    pub tenant_id: String,
    /// Site.
    pub site_id: String,
    /// Pool.
    pub pool_id: String,
    /// Role admitted.
    pub role: TokenRole,
    /// Uses.
    pub uses: u32,
    /// Lifetime from now, seconds.
    pub ttl_seconds: i64,
    /// Expect binding.
    #[serde(default)]
    pub expect: ExpectBinding,
    /// The pre-issue-18 "reclaim whichever node holds the claimed hardware key": refused
    /// (INVALID_INPUT pointing at `reclaim_node_id`); a claimed hardware key has no power.
    #[serde(default)]
    pub allow_reclaim: bool,
    /// The one node the token re-keys in place (`--reclaim NODE`): uses must be 1, the node
    /// must exist and be active.
    #[serde(default)]
    pub reclaim_node_id: Option<String>,
    /// Role provisioned: the node the token is minted for (`--for-node NODE`).
    #[serde(default)]
    pub for_node_id: Option<String>,
    /// A join with this token waits for an operator's approval (`--approval`).
    #[serde(default)]
    pub require_approval: bool,
}

/// The operator commands on tokens and nodes. They need the store and the clock only: no key
/// of the key set (a token's secret is drawn here and only its hash is stored), so `bcctl node
/// revoke` and the others never unseal the PKI bundle.
#[derive(Clone)]
pub struct NodeAdmin {
    store: EventStore,
    clock: Arc<dyn Clock>,
}

impl NodeAdmin {
    /// The operator commands over `store`, on `clock`.
    pub fn new(store: EventStore, clock: Arc<dyn Clock>) -> Self {
        NodeAdmin { store, clock }
    }

    /// `token create`: returns the secret, shown once, and the stored token.
    pub async fn create_token(&self, new: &NewToken) -> Result<CreatedToken, IdentityError> {
        if new.allow_reclaim {
            return Err(AdminRefusal::Invalid(
                "allow-reclaim is gone: a claimed hardware key reclaims nothing any more; name \
                 the node the token re-keys instead (--reclaim NODE, reclaimNodeId)"
                    .into(),
            )
            .into());
        }
        let secret = TokenSecret::generate().map_err(|e| IdentityError::Failed(e.to_string()))?;
        let create = NewTokenCommand {
            new,
            token_id: fresh_id("tok"),
            secret_hash: secret.hash(),
        };
        let token = run(&self.store, self.clock.as_ref(), &create).await?;
        Ok(CreatedToken {
            secret: secret.expose().to_owned(),
            token: TokenView::at(&token, self.clock.now_us()),
        })
    }

    /// `token revoke`.
    pub async fn revoke_token(
        &self,
        token_id: &str,
        reason: &str,
    ) -> Result<TokenView, IdentityError> {
        let row = run(
            &self.store,
            self.clock.as_ref(),
            &RevokeToken { token_id, reason },
        )
        .await?;
        Ok(TokenView::at(&row, self.clock.now_us()))
    }

    /// `token list`, of one tenant or all.
    pub async fn list_tokens(&self, tenant: Option<&str>) -> Result<Vec<TokenView>, IdentityError> {
        let mut tx = self.store.begin().await?;
        let rows = read::tokens_of_tenant(&mut tx, tenant).await?;
        tx.rollback().await?;
        let now_us = self.clock.now_us();
        Ok(rows.iter().map(|r| TokenView::at(r, now_us)).collect())
    }

    async fn node_command(&self, node_id: &str, op: NodeOp<'_>) -> Result<NodeView, IdentityError> {
        Ok(self.node_change(node_id, op).await?.node)
    }

    async fn node_change(
        &self,
        node_id: &str,
        op: NodeOp<'_>,
    ) -> Result<NodeChange, IdentityError> {
        let (row, revocation) = run(
            &self.store,
            self.clock.as_ref(),
            &NodeCommand { node_id, op },
        )
        .await?;
        Ok(NodeChange {
            node: NodeView::from(&row),
            already_revoked: revocation == IdentityRevocation::AlreadyRevoked,
        })
    }

    /// `node revoke`: raises the identity generation and revokes every certificate of the node.
    /// An identity already revoked is left as it is (the domain decides so in the same
    /// transaction): the node as it stands.
    pub async fn revoke_identity(
        &self,
        node_id: &str,
        reason: &str,
    ) -> Result<NodeView, IdentityError> {
        self.node_command(node_id, NodeOp::Revoke(reason)).await
    }

    /// `node revoke`, answering also whether the identity was already revoked (nothing changed).
    pub async fn revoke_identity_once(
        &self,
        node_id: &str,
        reason: &str,
    ) -> Result<NodeChange, IdentityError> {
        self.node_change(node_id, NodeOp::Revoke(reason)).await
    }

    /// `node delete`: revokes its certificates and frees its hardware key.
    pub async fn delete_node(
        &self,
        node_id: &str,
        reason: &str,
    ) -> Result<NodeView, IdentityError> {
        self.node_command(node_id, NodeOp::Delete(reason)).await
    }

    /// `node retire`: revokes its certificates; it never renews again.
    pub async fn retire_node(
        &self,
        node_id: &str,
        reason: &str,
    ) -> Result<NodeView, IdentityError> {
        self.node_command(node_id, NodeOp::Retire(reason)).await
    }

    /// `node names set|add|remove`: the node's names changed as asked (one `node.names.set` with
    /// the whole resulting set), or as they were when the change changes nothing.
    pub async fn change_names(&self, cmd: &ChangeNames) -> Result<NodeNamesView, IdentityError> {
        super::names::change_names(&self.store, self.clock.as_ref(), cmd).await
    }

    /// `node names show`: the names a node holds.
    pub async fn names_of(&self, node_id: &str) -> Result<NodeNamesView, IdentityError> {
        super::names::names_of(&self.store, node_id).await
    }

    /// `node list`, of one tenant or all.
    pub async fn list_nodes(&self, tenant: Option<&str>) -> Result<Vec<NodeView>, IdentityError> {
        let mut tx = self.store.begin().await?;
        let rows = read::nodes_of_tenant(&mut tx, tenant).await?;
        tx.rollback().await?;
        Ok(rows.iter().map(NodeView::from).collect())
    }

    /// `node show`: the node and every certificate it was issued.
    pub async fn show_node(&self, node_id: &str) -> Result<NodeDetail, IdentityError> {
        let mut tx = self.store.begin().await?;
        let node = read::node_by_id(&mut tx, node_id)
            .await?
            .ok_or_else(|| AdminRefusal::UnknownNode(node_id.into()))?;
        let certs = read::certs_of_node(&mut tx, node_id).await?;
        tx.rollback().await?;
        Ok(NodeDetail {
            node: NodeView::from(&node),
            certificates: certs.iter().map(CertView::from).collect(),
        })
    }
}

/// What a change of a node answers: the node after it, and whether its identity was already
/// revoked (`node revoke` changed nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeChange {
    /// The node.
    pub node: NodeView,
    /// `node revoke` found the identity revoked already: nothing was appended.
    pub already_revoked: bool,
}

/// `token create`, as the runner drives it: the token ends `ttl_seconds` after the time it
/// is decided at.
struct NewTokenCommand<'a> {
    new: &'a NewToken,
    token_id: String,
    secret_hash: TokenHash,
}

impl NewTokenCommand<'_> {
    fn create_token(&self, now_us: i64) -> CreateToken {
        let new = self.new;
        CreateToken {
            token_id: self.token_id.clone(),
            tenant_id: new.tenant_id.clone(),
            site_id: new.site_id.clone(),
            pool_id: new.pool_id.clone(),
            role: new.role,
            uses: new.uses,
            expires_at_us: now_us.saturating_add(new.ttl_seconds.saturating_mul(1_000_000)),
            secret_hash: self.secret_hash,
            expect: new.expect.clone(),
            reclaim_node_id: new.reclaim_node_id.clone(),
            for_node_id: new.for_node_id.clone(),
            require_approval: new.require_approval,
            boot_entry_id: None,
        }
    }
}

#[async_trait]
impl Command for NewTokenCommand<'_> {
    type State = TokenTargets;
    type Event = IdentityEvent;
    type Outcome = ();
    type Answer = TokenRow;
    type Error = IdentityError;

    async fn load(&self, tx: &mut StoreTx, _: &At) -> Result<TokenTargets, IdentityError> {
        // Held shared until the commit: a deletion of the tenant (exclusive) waits for this
        // token, or this token for the deletion, whose row it then reads.
        let tenant = self.new.tenant_id.as_str();
        hold_tenant(tx, tenant, TenantHold::Shared).await?;
        let mut targets = TokenTargets {
            tenant_deleted: tenant_row(tx, tenant)
                .await?
                .is_some_and(|r| r.deleted_at_us.is_some()),
            ..TokenTargets::default()
        };
        if let Some(node_id) = &self.new.reclaim_node_id {
            let row = read::node_by_id(tx, node_id).await?;
            targets.reclaim = row.as_ref().map(rows::node_state).transpose()?;
        }
        if let Some(node_id) = &self.new.for_node_id {
            let row = read::node_by_id(tx, node_id).await?;
            targets.for_node = row.as_ref().map(rows::node_state).transpose()?;
        }
        Ok(targets)
    }

    fn decide(&self, targets: &TokenTargets, at: &At, _: &mut dyn CryptoRngCore) -> Decided<Self> {
        decided(decide_create_token(
            &self.create_token(at.now_us),
            targets,
            at.now,
        ))
    }

    async fn append(
        &self,
        tx: &mut StoreTx,
        _: &TokenTargets,
        events: Vec<IdentityEvent>,
        at: &At,
    ) -> Result<(), IdentityError> {
        append_decided(tx, events, &self.new.tenant_id, at.now_us, &[]).await
    }

    async fn answer(
        &self,
        tx: &mut StoreTx,
        _: TokenTargets,
        _: (),
        _: &At,
    ) -> Result<TokenRow, IdentityError> {
        read::token_by_id(tx, &self.token_id)
            .await?
            .ok_or_else(|| IdentityError::Corrupt("the created token has no row".into()))
    }
}

/// `token revoke`, as the runner drives it.
struct RevokeToken<'a> {
    token_id: &'a str,
    reason: &'a str,
}

#[async_trait]
impl Command for RevokeToken<'_> {
    type State = Option<TokenRow>;
    type Event = IdentityEvent;
    type Outcome = ();
    type Answer = TokenRow;
    type Error = IdentityError;

    async fn load(&self, tx: &mut StoreTx, _: &At) -> Result<Option<TokenRow>, IdentityError> {
        Ok(read::token_by_id(tx, self.token_id).await?)
    }

    fn decide(&self, row: &Option<TokenRow>, _: &At, _: &mut dyn CryptoRngCore) -> Decided<Self> {
        let state = row
            .as_ref()
            .map(rows::token_state)
            .transpose()
            .map_err(Refused::from)?;
        decided(decide_revoke_token(
            self.token_id,
            state.as_ref(),
            self.reason,
        ))
    }

    async fn append(
        &self,
        tx: &mut StoreTx,
        row: &Option<TokenRow>,
        events: Vec<IdentityEvent>,
        at: &At,
    ) -> Result<(), IdentityError> {
        let row = row
            .as_ref()
            .ok_or_else(|| AdminRefusal::UnknownToken(self.token_id.into()))?;
        let versions = vec![(format!("token/{}", self.token_id), Some(row.version))];
        append_decided(tx, events, &row.tenant_id, at.now_us, &versions).await
    }

    async fn answer(
        &self,
        tx: &mut StoreTx,
        _: Option<TokenRow>,
        _: (),
        _: &At,
    ) -> Result<TokenRow, IdentityError> {
        read::token_by_id(tx, self.token_id)
            .await?
            .ok_or_else(|| IdentityError::Corrupt("the revoked token has no row".into()))
    }
}

/// The operator's changes of a node, each with its reason.
#[derive(Clone, Copy)]
enum NodeOp<'a> {
    Revoke(&'a str),
    Delete(&'a str),
    Retire(&'a str),
}

/// `node revoke`, `node delete`, `node retire`, as the runner drives them.
struct NodeCommand<'a> {
    node_id: &'a str,
    op: NodeOp<'a>,
}

/// What a change of a node reads.
struct NodeFacts {
    row: Option<NodeRow>,
    state: Option<NodeState>,
    unrevoked: Vec<String>,
    newest: Option<NewestCert>,
}

#[async_trait]
impl Command for NodeCommand<'_> {
    type State = NodeFacts;
    type Event = IdentityEvent;
    type Outcome = IdentityRevocation;
    type Answer = (NodeRow, IdentityRevocation);
    type Error = IdentityError;

    async fn load(&self, tx: &mut StoreTx, _: &At) -> Result<NodeFacts, IdentityError> {
        let row = read::node_by_id(tx, self.node_id).await?;
        let state = row.as_ref().map(rows::node_state).transpose()?;
        let (unrevoked, newest) = match (&row, self.op) {
            (Some(_), NodeOp::Revoke(_)) => {
                let newest = latest_cert_of(tx, self.node_id).await?.map(|c| NewestCert {
                    revoked: c.revoked_at_us.is_some(),
                    identity_generation: u64::try_from(c.identity_generation).unwrap_or(0),
                });
                (
                    read::unrevoked_serials_of_node(tx, self.node_id).await?,
                    newest,
                )
            }
            _ => (Vec::new(), None),
        };
        Ok(NodeFacts {
            row,
            state,
            unrevoked,
            newest,
        })
    }

    fn decide(&self, facts: &NodeFacts, _: &At, _: &mut dyn CryptoRngCore) -> Decided<Self> {
        let (id, node) = (self.node_id, facts.state.as_ref());
        let done = |d: Decision<()>| d.map_outcome(|()| IdentityRevocation::Revoked);
        decided(match self.op {
            NodeOp::Revoke(reason) => {
                decide_revoke_identity(id, node, facts.newest.as_ref(), &facts.unrevoked, reason)
            }
            NodeOp::Delete(reason) => decide_delete_node(id, node, reason).map(done),
            NodeOp::Retire(reason) => decide_retire_node(id, node, reason).map(done),
        })
    }

    async fn append(
        &self,
        tx: &mut StoreTx,
        facts: &NodeFacts,
        events: Vec<IdentityEvent>,
        at: &At,
    ) -> Result<(), IdentityError> {
        let row = facts
            .row
            .as_ref()
            .ok_or_else(|| AdminRefusal::UnknownNode(self.node_id.into()))?;
        let versions = vec![(format!("node/{}", self.node_id), Some(row.version))];
        append_decided(tx, events, &row.tenant_id, at.now_us, &versions).await
    }

    async fn answer(
        &self,
        tx: &mut StoreTx,
        _: NodeFacts,
        revocation: IdentityRevocation,
        _: &At,
    ) -> Result<(NodeRow, IdentityRevocation), IdentityError> {
        let row = read::node_by_id(tx, self.node_id)
            .await?
            .ok_or_else(|| IdentityError::Corrupt("the node has no row".into()))?;
        Ok((row, revocation))
    }
}
