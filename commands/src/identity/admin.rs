//! The operator commands on tokens and nodes (`bcctl token …`, `bcctl node …`): create, revoke
//! and list tokens; revoke a node's identity, delete or retire a node; list and show nodes.

use domain::identity::{
    check_token_target, decide_create_token, decide_delete_node, decide_retire_node,
    decide_revoke_identity, decide_revoke_token, unix_us, AdminRefusal, CreateToken, Decision,
    ExpectBinding, TokenRole,
};
use std::sync::Arc;

use domain::pki::TokenSecret;
use events::store::{EventStore, LogStore, LogTx};
use projections::identity::read;

use super::append::{append_decided, fresh_id};
use super::error::IdentityError;
use super::{rows, CertView, CreatedToken, NodeDetail, NodeView, TokenView};
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
        let now = self.clock.now();
        let now_us = unix_us(now);
        let cmd = CreateToken {
            token_id: fresh_id("tok"),
            tenant_id: new.tenant_id.clone(),
            site_id: new.site_id.clone(),
            pool_id: new.pool_id.clone(),
            role: new.role,
            uses: new.uses,
            expires_at_us: now_us.saturating_add(new.ttl_seconds.saturating_mul(1_000_000)),
            secret_hash: secret.hash(),
            expect: new.expect.clone(),
            reclaim_node_id: new.reclaim_node_id.clone(),
            for_node_id: new.for_node_id.clone(),
            require_approval: new.require_approval,
            boot_entry_id: None,
        };
        let events = decide_create_token(&cmd, now)?.events;
        let token = crate::transaction!(&self.store, IdentityError, |tx| {
            if let Some(node_id) = &cmd.reclaim_node_id {
                let node = read::node_by_id(tx, node_id).await?;
                match node.as_ref().map(|n| n.status.as_str()) {
                    None => return Err(AdminRefusal::UnknownNode(node_id.clone()).into()),
                    Some("active") => {}
                    Some(_) => {
                        return Err(AdminRefusal::Invalid(format!(
                            "node {node_id} is not active: only an active node can be reclaimed"
                        ))
                        .into())
                    }
                }
            }
            if let Some(node_id) = &cmd.for_node_id {
                let row = read::node_by_id(tx, node_id).await?;
                let node = row.as_ref().map(rows::node_state).transpose()?;
                check_token_target(&cmd, node.as_ref())?;
            }
            append_decided(tx, events.clone(), &cmd.tenant_id, now_us, &[]).await?;
            read::token_by_id(tx, &cmd.token_id)
                .await?
                .ok_or_else(|| IdentityError::Corrupt("the created token has no row".into()))
        })?;
        Ok(CreatedToken {
            secret: secret.expose().to_owned(),
            token: TokenView::from(&token),
        })
    }

    /// `token revoke`.
    pub async fn revoke_token(
        &self,
        token_id: &str,
        reason: &str,
    ) -> Result<TokenView, IdentityError> {
        let now_us = self.clock.now_us();
        let row = crate::transaction!(&self.store, IdentityError, |tx| {
            let row = read::token_by_id(tx, token_id).await?;
            let state = row.as_ref().map(rows::token_state).transpose()?;
            let events = decide_revoke_token(token_id, state.as_ref(), reason)?.events;
            let Some(row) = row else {
                return Err(AdminRefusal::UnknownToken(token_id.into()).into());
            };
            let versions = vec![(format!("token/{token_id}"), Some(row.version))];
            append_decided(tx, events, &row.tenant_id, now_us, &versions).await?;
            read::token_by_id(tx, token_id)
                .await?
                .ok_or_else(|| IdentityError::Corrupt("the revoked token has no row".into()))
        })?;
        Ok(TokenView::from(&row))
    }

    /// `token list`, of one tenant or all.
    pub async fn list_tokens(&self, tenant: Option<&str>) -> Result<Vec<TokenView>, IdentityError> {
        let mut tx = self.store.begin().await?;
        let rows = read::tokens_of_tenant(&mut tx, tenant).await?;
        tx.rollback().await?;
        Ok(rows.iter().map(TokenView::from).collect())
    }

    async fn node_command(
        &self,
        node_id: &str,
        decide: impl Fn(
            Option<&domain::identity::NodeState>,
            &[String],
        ) -> Result<Decision<()>, AdminRefusal>,
    ) -> Result<NodeView, IdentityError> {
        let now_us = self.clock.now_us();
        let row = crate::transaction!(&self.store, IdentityError, |tx| {
            let row = read::node_by_id(tx, node_id).await?;
            let state = row.as_ref().map(rows::node_state).transpose()?;
            let unrevoked = match &row {
                Some(_) => read::unrevoked_serials_of_node(tx, node_id).await?,
                None => Vec::new(),
            };
            let events = decide(state.as_ref(), &unrevoked)?.events;
            let Some(row) = row else {
                return Err(AdminRefusal::UnknownNode(node_id.into()).into());
            };
            let versions = vec![(format!("node/{node_id}"), Some(row.version))];
            append_decided(tx, events, &row.tenant_id, now_us, &versions).await?;
            read::node_by_id(tx, node_id)
                .await?
                .ok_or_else(|| IdentityError::Corrupt("the node has no row".into()))
        })?;
        Ok(NodeView::from(&row))
    }

    /// `node revoke`: raises the identity generation and revokes every certificate of the node.
    pub async fn revoke_identity(
        &self,
        node_id: &str,
        reason: &str,
    ) -> Result<NodeView, IdentityError> {
        self.node_command(node_id, |n, serials| {
            decide_revoke_identity(node_id, n, serials, reason)
        })
        .await
    }

    /// `node delete`: revokes its certificates and frees its hardware key.
    pub async fn delete_node(
        &self,
        node_id: &str,
        reason: &str,
    ) -> Result<NodeView, IdentityError> {
        self.node_command(node_id, |n, _| decide_delete_node(node_id, n, reason))
            .await
    }

    /// `node retire`: revokes its certificates; it never renews again.
    pub async fn retire_node(
        &self,
        node_id: &str,
        reason: &str,
    ) -> Result<NodeView, IdentityError> {
        self.node_command(node_id, |n, _| decide_retire_node(node_id, n, reason))
            .await
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
