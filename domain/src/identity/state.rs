//! The state identity decisions read, the events they produce, and how events change the state.

use events::schema::{AttestorEntryAdded, AttestorEntryRemoved};
use events::schema::{
    BootEntryAdded, BootEntryRemoved, SiteCreated, SiteLeaseAcquired, SiteLeaseReleased,
    SiteLeaseRenewed,
};
use events::schema::{
    EvidenceUsed, JoinRequestApproved, JoinRequestConsumed, JoinRequestCreated, JoinRequestExpired,
    JoinRequestRejected, JoinTokenCreated, JoinTokenRevoked, JoinTokenUsed, NodeBound,
    NodeCertificateIssued, NodeDeleted, NodeIdentityRevoked, NodeJoined, NodeNamesSet, NodeRetired,
    PoolCreated, PoolUpdated, RenewCloned, RenewProofUsed,
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
    /// Admits `node`, through the `provisioned` attestor only: a single-use token rendered into
    /// an installed system's user data (spec 000 "provisioned").
    Provisioned,
    /// Admits `ramdisk`, through the `discovery` attestor only: a single-use token a site's boot
    /// server puts on a PXE-booted ramdisk's kernel command line (spec 000 "discovery").
    Discovery,
}

impl TokenRole {
    /// The stored text.
    pub fn as_str(self) -> &'static str {
        match self {
            TokenRole::Node => "node",
            TokenRole::Site => "site",
            TokenRole::Provisioned => "provisioned",
            TokenRole::Discovery => "discovery",
        }
    }

    /// Parses the stored text.
    pub fn parse(text: &str) -> Option<TokenRole> {
        match text {
            "node" => Some(TokenRole::Node),
            "site" => Some(TokenRole::Site),
            "provisioned" => Some(TokenRole::Provisioned),
            "discovery" => Some(TokenRole::Discovery),
            _ => None,
        }
    }

    /// The agent role it admits.
    pub fn node_role(self) -> NodeRole {
        match self {
            TokenRole::Node => NodeRole::Node,
            TokenRole::Site => NodeRole::Site,
            TokenRole::Provisioned => NodeRole::Node,
            TokenRole::Discovery => NodeRole::Ramdisk,
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
    /// Written before issue 18 only (a claimed hardware key reclaimed its holder); new tokens
    /// name the node instead ([`TokenState::reclaim_node_id`]). Has no power any more.
    pub allow_reclaim: bool,
    /// The one node this token re-keys in place (`bcctl token create --reclaim NODE`).
    pub reclaim_node_id: Option<String>,
    /// Role provisioned: the node the token was minted for (`--for-node NODE`).
    pub for_node_id: Option<String>,
    /// A join with this token waits for an operator's approval.
    pub require_approval: bool,
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
    /// SHA-256 of the trusted hardware key claimed at join, if any (a digest with no power).
    pub hardware_key_sha256: Option<[u8; 32]>,
    /// SHA-256 of the lower-cased product UUID claimed at its last join, if any.
    pub product_uuid_sha256: Option<[u8; 32]>,
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
    /// The command kinds it allows (`node_certs.allowed_kinds`; empty: every kind its role
    /// allows), carried into each renewal.
    pub allowed_kinds: Vec<String>,
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
    /// `node.names.set`, stream `node/<id>`.
    NodeNamesSet(NodeNamesSet),
    /// `security.renew.cloned`, stream `node/<id>`.
    RenewCloned(RenewCloned),
    /// `attestation.evidence.used`, stream `node/<id>`.
    EvidenceUsed(EvidenceUsed),
    /// `node.bound`, stream `node/<id>`.
    NodeBound(NodeBound),
    /// `pool.created`, stream `pool/<id>`.
    PoolCreated(PoolCreated),
    /// `pool.updated`, stream `pool/<id>`.
    PoolUpdated(PoolUpdated),
    /// `join_request.created`, stream `join-request/<id>`.
    JoinRequestCreated(JoinRequestCreated),
    /// `join_request.approved`, stream `join-request/<id>`.
    JoinRequestApproved(JoinRequestApproved),
    /// `join_request.rejected`, stream `join-request/<id>`.
    JoinRequestRejected(JoinRequestRejected),
    /// `join_request.consumed`, stream `join-request/<id>`.
    JoinRequestConsumed(JoinRequestConsumed),
    /// `join_request.expired`, stream `join-request/<id>`.
    JoinRequestExpired(JoinRequestExpired),
    /// `attestor.entry.added`, on the stream its list names for its key (the second field).
    AttestorEntryAdded(AttestorEntryAdded, String),
    /// `attestor.entry.removed`, on the stream of the entry's key (the second field).
    AttestorEntryRemoved(AttestorEntryRemoved, String),
    /// `site.created`, stream `site/<id>`.
    SiteCreated(SiteCreated),
    /// `site.boot.added`, stream `site/<site_id>`.
    BootEntryAdded(BootEntryAdded),
    /// `site.boot.removed`, stream `site/<site_id>`.
    BootEntryRemoved(BootEntryRemoved),
    /// `site.lease.acquired`, stream `lease/site:<site_id>:boot`.
    SiteLeaseAcquired(SiteLeaseAcquired),
    /// `site.lease.renewed`, stream `lease/site:<site_id>:boot`.
    SiteLeaseRenewed(SiteLeaseRenewed),
    /// `site.lease.released`, stream `lease/site:<site_id>:boot`.
    SiteLeaseReleased(SiteLeaseReleased),
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
            IdentityEvent::NodeNamesSet(p) => NewEvent::from_payload(id, tenant, at, p),
            IdentityEvent::RenewCloned(p) => NewEvent::from_payload(id, tenant, at, p),
            IdentityEvent::EvidenceUsed(p) => NewEvent::from_payload(id, tenant, at, p),
            IdentityEvent::NodeBound(p) => NewEvent::from_payload(id, tenant, at, p),
            IdentityEvent::PoolCreated(p) => NewEvent::from_payload(id, tenant, at, p),
            IdentityEvent::PoolUpdated(p) => NewEvent::from_payload(id, tenant, at, p),
            IdentityEvent::JoinRequestCreated(p) => NewEvent::from_payload(id, tenant, at, p),
            IdentityEvent::JoinRequestApproved(p) => NewEvent::from_payload(id, tenant, at, p),
            IdentityEvent::JoinRequestRejected(p) => NewEvent::from_payload(id, tenant, at, p),
            IdentityEvent::JoinRequestConsumed(p) => NewEvent::from_payload(id, tenant, at, p),
            IdentityEvent::JoinRequestExpired(p) => NewEvent::from_payload(id, tenant, at, p),
            IdentityEvent::AttestorEntryAdded(p, _) => NewEvent::from_payload(id, tenant, at, p),
            IdentityEvent::AttestorEntryRemoved(p, _) => NewEvent::from_payload(id, tenant, at, p),
            IdentityEvent::SiteCreated(p) => NewEvent::from_payload(id, tenant, at, p),
            IdentityEvent::BootEntryAdded(p) => NewEvent::from_payload(id, tenant, at, p),
            IdentityEvent::BootEntryRemoved(p) => NewEvent::from_payload(id, tenant, at, p),
            IdentityEvent::SiteLeaseAcquired(p) => NewEvent::from_payload(id, tenant, at, p),
            IdentityEvent::SiteLeaseRenewed(p) => NewEvent::from_payload(id, tenant, at, p),
            IdentityEvent::SiteLeaseReleased(p) => NewEvent::from_payload(id, tenant, at, p),
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
            IdentityEvent::NodeNamesSet(e) => format!("node/{}", e.node_id),
            IdentityEvent::RenewCloned(e) => format!("node/{}", e.node_id),
            IdentityEvent::EvidenceUsed(e) => format!("node/{}", e.node_id),
            IdentityEvent::NodeBound(e) => format!("node/{}", e.node_id),
            IdentityEvent::PoolCreated(e) => format!("pool/{}", e.pool_id),
            IdentityEvent::PoolUpdated(e) => format!("pool/{}", e.pool_id),
            IdentityEvent::JoinRequestCreated(e) => format!("join-request/{}", e.request_id),
            IdentityEvent::JoinRequestApproved(e) => format!("join-request/{}", e.request_id),
            IdentityEvent::JoinRequestRejected(e) => format!("join-request/{}", e.request_id),
            IdentityEvent::JoinRequestConsumed(e) => format!("join-request/{}", e.request_id),
            IdentityEvent::JoinRequestExpired(e) => format!("join-request/{}", e.request_id),
            IdentityEvent::AttestorEntryAdded(_, stream) => stream.clone(),
            IdentityEvent::AttestorEntryRemoved(_, stream) => stream.clone(),
            IdentityEvent::SiteCreated(e) => format!("site/{}", e.site_id),
            IdentityEvent::BootEntryAdded(e) => format!("site/{}", e.site_id),
            IdentityEvent::BootEntryRemoved(e) => format!("site/{}", e.site_id),
            IdentityEvent::SiteLeaseAcquired(e) => lease_stream(&e.site_id),
            IdentityEvent::SiteLeaseRenewed(e) => lease_stream(&e.site_id),
            IdentityEvent::SiteLeaseReleased(e) => lease_stream(&e.site_id),
        }
    }
}

/// The stream of a site's boot lease: `lease/site:<site_id>:boot`.
pub fn lease_stream(site_id: &str) -> String {
    format!("lease/{}", events::schema::site_boot_lease(site_id))
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
                reclaim_node_id: non_empty(&e.reclaim_node_id),
                for_node_id: non_empty(&e.for_node_id),
                require_approval: e.require_approval,
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
            product_uuid_sha256: e.product_uuid_sha256.as_slice().try_into().ok(),
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
