//! The state identity decisions read, the events they produce, and how events change the state.

use events::schema::{
    JoinTokenCreated, JoinTokenRevoked, JoinTokenUsed, NodeCertificateIssued, NodeDeleted,
    NodeIdentityRevoked, NodeJoined, NodeRetired, RenewCloned, RenewProofUsed,
};

use crate::pki::{NodeRole, TokenHash};

/// What the control plane knows about a token-joined node's key.
pub const NODE_KEY_UNATTESTED: &str = "unattested";

/// The role a join token admits: node tokens admit `node`, site tokens admit `site`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TokenRole {
    /// Admits `node`.
    Node,
    /// Admits `site`.
    Site,
}

impl TokenRole {
    /// The stored text.
    pub fn as_str(self) -> &'static str {
        match self {
            TokenRole::Node => "node",
            TokenRole::Site => "site",
        }
    }

    /// Parses the stored text.
    pub fn parse(text: &str) -> Option<TokenRole> {
        match text {
            "node" => Some(TokenRole::Node),
            "site" => Some(TokenRole::Site),
            _ => None,
        }
    }

    /// The agent role it admits.
    pub fn node_role(self) -> NodeRole {
        match self {
            TokenRole::Node => NodeRole::Node,
            TokenRole::Site => NodeRole::Site,
        }
    }
}

/// A token's expect binding: the machine it was minted for.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExpectBinding {
    /// The machine's SMBIOS product UUID (compared case-insensitively).
    pub product_uuid: Option<String>,
    /// One of the machine's MAC addresses (compared case-insensitively).
    pub mac: Option<String>,
}

/// A join token as the decisions see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenState {
    /// Token id.
    pub token_id: String,
    /// Owning tenant.
    pub tenant_id: String,
    /// Site the joined node belongs to.
    pub site_id: String,
    /// Pool the joined node belongs to.
    pub pool_id: String,
    /// The role it admits.
    pub role: TokenRole,
    /// Uses created with.
    pub uses_total: u32,
    /// Uses left.
    pub uses_left: u32,
    /// Expiry, µs since the epoch.
    pub expires_at_us: i64,
    /// SHA-256 of the secret.
    pub secret_hash: TokenHash,
    /// Expect binding.
    pub expect: ExpectBinding,
    /// Whether a machine whose hardware key is enrolled may reclaim its node.
    pub allow_reclaim: bool,
    /// Revoked by an operator.
    pub revoked: bool,
}

/// A node's lifecycle state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeStatus {
    /// Joined and allowed to renew.
    Active,
    /// Retired: certificates revoked, never renews.
    Retired,
    /// Deleted: certificates revoked, hardware key freed.
    Deleted,
}

impl NodeStatus {
    /// The stored text.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeStatus::Active => "active",
            NodeStatus::Retired => "retired",
            NodeStatus::Deleted => "deleted",
        }
    }

    /// Parses the stored text.
    pub fn parse(text: &str) -> Option<NodeStatus> {
        match text {
            "active" => Some(NodeStatus::Active),
            "retired" => Some(NodeStatus::Retired),
            "deleted" => Some(NodeStatus::Deleted),
            _ => None,
        }
    }
}

/// A node as the decisions see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeState {
    /// Node id.
    pub node_id: String,
    /// Owning tenant.
    pub tenant_id: String,
    /// Site.
    pub site_id: String,
    /// Pool.
    pub pool_id: String,
    /// Agent role.
    pub role: NodeRole,
    /// Lifecycle.
    pub status: NodeStatus,
    /// Current identity generation (1 after the first join).
    pub identity_generation: u64,
    /// SHA-256 of the trusted hardware key claimed at join, if any.
    pub hardware_key_sha256: Option<[u8; 32]>,
}

/// One stored certificate (a `node_certs` row).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertState {
    /// Serial, lower-case hex.
    pub serial: String,
    /// Node it was issued to.
    pub node_id: String,
    /// Identity generation it was issued in.
    pub identity_generation: u64,
    /// The certificate exactly as issued.
    pub der: Vec<u8>,
    /// notAfter, µs since the epoch.
    pub not_after_us: i64,
    /// Whether it was revoked.
    pub revoked: bool,
}

/// An event an identity decision produced, with the stream it belongs to.
#[derive(Debug, Clone, PartialEq)]
pub enum IdentityEvent {
    /// `token.created`, stream `token/<id>`.
    TokenCreated(JoinTokenCreated),
    /// `token.revoked`, stream `token/<id>`.
    TokenRevoked(JoinTokenRevoked),
    /// `token.used`, stream `token/<id>`.
    TokenUsed(JoinTokenUsed),
    /// `node.joined`, stream `node/<id>`.
    NodeJoined(NodeJoined),
    /// `node.certificate.issued`, stream `node/<id>`.
    CertificateIssued(NodeCertificateIssued),
    /// `node.renew_proof.used`, stream `node/<id>`.
    RenewProofUsed(RenewProofUsed),
    /// `node.identity.revoked`, stream `node/<id>`.
    IdentityRevoked(NodeIdentityRevoked),
    /// `node.deleted`, stream `node/<id>`.
    NodeDeleted(NodeDeleted),
    /// `node.retired`, stream `node/<id>`.
    NodeRetired(NodeRetired),
    /// `security.renew.cloned`, stream `node/<id>`.
    RenewCloned(RenewCloned),
}

impl IdentityEvent {
    /// The event as the log stores it: its payload encoded and hashed, under `event_id`, in
    /// `tenant`, decided at `occurred_at_us` (the id and the time come from the shell).
    pub fn to_new_event(
        &self,
        event_id: [u8; 16],
        tenant: &str,
        occurred_at_us: i64,
    ) -> events::NewEvent {
        use events::NewEvent;
        let (id, at) = (event_id, occurred_at_us);
        match self {
            IdentityEvent::TokenCreated(p) => NewEvent::from_payload(id, tenant, at, p),
            IdentityEvent::TokenRevoked(p) => NewEvent::from_payload(id, tenant, at, p),
            IdentityEvent::TokenUsed(p) => NewEvent::from_payload(id, tenant, at, p),
            IdentityEvent::NodeJoined(p) => NewEvent::from_payload(id, tenant, at, p),
            IdentityEvent::CertificateIssued(p) => NewEvent::from_payload(id, tenant, at, p),
            IdentityEvent::RenewProofUsed(p) => NewEvent::from_payload(id, tenant, at, p),
            IdentityEvent::IdentityRevoked(p) => NewEvent::from_payload(id, tenant, at, p),
            IdentityEvent::NodeDeleted(p) => NewEvent::from_payload(id, tenant, at, p),
            IdentityEvent::NodeRetired(p) => NewEvent::from_payload(id, tenant, at, p),
            IdentityEvent::RenewCloned(p) => NewEvent::from_payload(id, tenant, at, p),
        }
    }

    /// The stream the event is appended to.
    pub fn stream(&self) -> String {
        match self {
            IdentityEvent::TokenCreated(e) => format!("token/{}", e.token_id),
            IdentityEvent::TokenRevoked(e) => format!("token/{}", e.token_id),
            IdentityEvent::TokenUsed(e) => format!("token/{}", e.token_id),
            IdentityEvent::NodeJoined(e) => format!("node/{}", e.node_id),
            IdentityEvent::CertificateIssued(e) => format!("node/{}", e.node_id),
            IdentityEvent::RenewProofUsed(e) => format!("node/{}", e.node_id),
            IdentityEvent::IdentityRevoked(e) => format!("node/{}", e.node_id),
            IdentityEvent::NodeDeleted(e) => format!("node/{}", e.node_id),
            IdentityEvent::NodeRetired(e) => format!("node/{}", e.node_id),
            IdentityEvent::RenewCloned(e) => format!("node/{}", e.node_id),
        }
    }
}

/// Applies an event to a token's state (`None` before `token.created`).
pub fn evolve_token(state: Option<TokenState>, event: &IdentityEvent) -> Option<TokenState> {
    match (state, event) {
        (None, IdentityEvent::TokenCreated(e)) => {
            let hash: [u8; 32] = e.secret_sha256.as_slice().try_into().ok()?;
            Some(TokenState {
                token_id: e.token_id.clone(),
                tenant_id: e.tenant_id.clone(),
                site_id: e.site_id.clone(),
                pool_id: e.pool_id.clone(),
                role: TokenRole::parse(&e.role)?,
                uses_total: e.uses,
                uses_left: e.uses,
                expires_at_us: e.expires_at_us,
                secret_hash: TokenHash::from_bytes(hash),
                expect: ExpectBinding {
                    product_uuid: non_empty(&e.expect_product_uuid),
                    mac: non_empty(&e.expect_mac),
                },
                allow_reclaim: e.allow_reclaim,
                revoked: false,
            })
        }
        (Some(mut s), IdentityEvent::TokenRevoked(_)) => {
            s.revoked = true;
            Some(s)
        }
        (Some(mut s), IdentityEvent::TokenUsed(e)) => {
            s.uses_left = e.uses_left;
            Some(s)
        }
        (s, _) => s,
    }
}

/// Applies an event to a node's state (`None` before its first `node.joined`).
pub fn evolve_node(state: Option<NodeState>, event: &IdentityEvent) -> Option<NodeState> {
    match (state, event) {
        (_, IdentityEvent::NodeJoined(e)) => Some(NodeState {
            node_id: e.node_id.clone(),
            tenant_id: e.tenant_id.clone(),
            site_id: e.site_id.clone(),
            pool_id: e.pool_id.clone(),
            role: e.role.parse().ok()?,
            status: NodeStatus::Active,
            identity_generation: e.identity_generation,
            hardware_key_sha256: e.hardware_key_sha256.as_slice().try_into().ok(),
        }),
        (Some(mut s), IdentityEvent::IdentityRevoked(e)) => {
            s.identity_generation = e.new_identity_generation;
            Some(s)
        }
        (Some(mut s), IdentityEvent::NodeDeleted(_)) => {
            s.status = NodeStatus::Deleted;
            s.hardware_key_sha256 = None;
            Some(s)
        }
        (Some(mut s), IdentityEvent::NodeRetired(_)) => {
            s.status = NodeStatus::Retired;
            Some(s)
        }
        (s, _) => s,
    }
}

pub(crate) fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_owned())
}
