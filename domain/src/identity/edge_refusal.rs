//! Renewals refused at the gateway's edge, before any request reached the JoinService (issue
//! 40): a node certificate the TLS handshake refused because the revocation feed lists its
//! serial, or because it has expired. Such a node cannot renew (nor hold a session), so the
//! refusal is a renewal refusal like those [`super::decide_renew`] decides, and is written as
//! the same `security.renew.refused` event with the same reason (`renew:revoked`,
//! `renew:expired`); its empty `csr_sha256` says no request was read.
//!
//! What this decides is what that event says and whom it is attributed to: the node and serial
//! the presented leaf claims (empty when it is no node identity of this trust domain), and the
//! node's tenant only when the leaf is byte for byte the stored certificate of that serial and
//! node ([`super::renew_refusal_tenant`]'s rule): at the handshake the client has not yet
//! proved its key, and anyone can present a copy of a certificate.

use crate::pki::{NodeIdentity, TrustDomain};

use super::renew::RenewRefusal;
use super::state::{CertState, NodeState};

/// Why the edge refused a node certificate at the handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EdgeRenewRefusal {
    /// Its serial is in the revocation feed's set.
    Revoked,
    /// It is past its notAfter.
    Expired,
}

impl EdgeRenewRefusal {
    /// The renewal refusal it is recorded as.
    pub fn refusal(self) -> RenewRefusal {
        match self {
            EdgeRenewRefusal::Revoked => RenewRefusal::Revoked,
            EdgeRenewRefusal::Expired => RenewRefusal::Expired,
        }
    }
}

/// The `security.renew.refused` event one edge refusal is recorded as, and its tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EdgeRefusalRecord {
    /// The reason (`renew:revoked`, `renew:expired`).
    pub refusal: RenewRefusal,
    /// The node the leaf claims (empty: no node identity of this trust domain).
    pub node_id: String,
    /// The serial the leaf claims, lower-case hex (empty as above).
    pub serial: String,
    /// The node's tenant when the leaf is its stored certificate; `None`: the root tenant.
    pub tenant: Option<String>,
}

/// The node and serial `leaf_der` claims in `trust_domain`, if it is a node identity of it: what
/// the shell loads `cert` and `node` by.
pub fn edge_refusal_subject(
    leaf_der: &[u8],
    trust_domain: &TrustDomain,
) -> Option<(String, String)> {
    NodeIdentity::from_leaf_der(leaf_der, trust_domain)
        .ok()
        .map(|id| (id.spiffe_id.node.as_str().to_owned(), id.serial.to_hex()))
}

/// What the edge refusal `why` of `leaf_der` is recorded as, given the stored certificate of the
/// serial it claims (`cert`) and that certificate's node (`node`).
pub fn decide_edge_renew_refusal(
    why: EdgeRenewRefusal,
    leaf_der: &[u8],
    trust_domain: &TrustDomain,
    cert: Option<&CertState>,
    node: Option<&NodeState>,
) -> EdgeRefusalRecord {
    let (node_id, serial) = edge_refusal_subject(leaf_der, trust_domain).unwrap_or_default();
    let matched = cert.filter(|c| {
        !node_id.is_empty() && c.der == leaf_der && c.node_id == node_id && c.serial == serial
    });
    let tenant = match (matched, node) {
        (Some(c), Some(n)) if n.node_id == c.node_id => Some(n.tenant_id.clone()),
        _ => None,
    };
    EdgeRefusalRecord {
        refusal: why.refusal(),
        node_id,
        serial,
        tenant,
    }
}
