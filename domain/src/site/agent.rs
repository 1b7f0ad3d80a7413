//! Who may call the site agent's RPCs (SiteLease, BootToken): a node of role `site`, active,
//! presenting a certificate that is byte for byte a `node_certs` row of that node, of its
//! current identity generation, not revoked and not expired, the checks a renewal makes of its
//! presented leaf (`crate::identity::renew`). The agent's site is the node's.

use crate::identity::{CertState, NodeState, NodeStatus};
use crate::pki::{NodeIdentity, NodeRole};

/// Why a caller is not a site agent. The caller is told PERMISSION_DENIED "site agents only"
/// whatever the reason; the reason goes to the server's log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AgentRefusal {
    /// The certificate's role is not `site`.
    #[error("the certificate's role is not site")]
    NotSiteRole,
    /// No `node_certs` row of the leaf's node has its serial.
    #[error("no node_certs row has the certificate's serial")]
    UnknownCertificate,
    /// The stored row is not the presented bytes.
    #[error("the certificate is not byte for byte the stored one")]
    CertificateMismatch,
    /// The node is unknown, or not active.
    #[error("the node is not active")]
    NodeInactive,
    /// The node's role is not site.
    #[error("the node's role is not site")]
    NodeNotSite,
    /// The certificate is of an older identity generation.
    #[error("the certificate is of an older identity generation")]
    OldGeneration,
    /// The certificate was revoked.
    #[error("the certificate was revoked")]
    Revoked,
    /// The certificate expired.
    #[error("the certificate expired")]
    Expired,
}

/// A checked site agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteAgentId {
    /// Its node id.
    pub node_id: String,
    /// Its site.
    pub site_id: String,
    /// Its tenant.
    pub tenant_id: String,
}

/// Checks that `identity` (read from `leaf_der`) is a site agent's: `cert` is the `node_certs`
/// row of its serial, `node` the row of its node.
pub fn check_site_agent(
    identity: &NodeIdentity,
    leaf_der: &[u8],
    cert: Option<&CertState>,
    node: Option<&NodeState>,
    now_us: i64,
) -> Result<SiteAgentId, AgentRefusal> {
    if identity.role != NodeRole::Site {
        return Err(AgentRefusal::NotSiteRole);
    }
    let node_id = identity.spiffe_id.node.as_str();
    let cert = cert
        .filter(|c| c.node_id == node_id)
        .ok_or(AgentRefusal::UnknownCertificate)?;
    if cert.der != leaf_der {
        return Err(AgentRefusal::CertificateMismatch);
    }
    let node = node.ok_or(AgentRefusal::NodeInactive)?;
    if cert.identity_generation < node.identity_generation {
        return Err(AgentRefusal::OldGeneration);
    }
    if cert.revoked {
        return Err(AgentRefusal::Revoked);
    }
    if node.status != NodeStatus::Active {
        return Err(AgentRefusal::NodeInactive);
    }
    if node.role != NodeRole::Site {
        return Err(AgentRefusal::NodeNotSite);
    }
    if now_us >= cert.not_after_us {
        return Err(AgentRefusal::Expired);
    }
    Ok(SiteAgentId {
        node_id: node.node_id.clone(),
        site_id: node.site_id.clone(),
        tenant_id: node.tenant_id.clone(),
    })
}
