//! A join answered once is answered again (issue 40): the answer of an admitted join can be
//! lost on its way back (a connection cut, a gateway or api restarted after the commit), and the
//! machine then sends the same request again, the same token or evidence and the same CSR. Its
//! single-use evidence is spent by then, so every attestor refuses it for that reason
//! (`csr-key-used`, `reused`, ...), naming the subject ([`AttestorRefusal::spent`]). Before that
//! refusal is recorded, the shell loads the join that spent the subject ([`EarlierJoin`]) and
//! [`answer_again`] decides: when that join was this request's and its identity is still the
//! node's current one, the request gets the identity already issued (the same node, the same
//! certificate; the edge signs the answer again) and nothing is appended. Otherwise the refusal
//! stands, with the reason it always had.
//!
//! The identity already issued is answered again only when, in this order
//! ([`NotAnsweredAgain`] names each case):
//!
//! 1. the use is still kept (its expiry, when it has one, is in the future: the evidence's life);
//! 2. a node spent it, and that node exists and is active;
//! 3. its last join was by this attestor, in the refusal's tenant, with the refusal's token (when
//!    the refusal names one), for exactly this CSR (its SHA-256);
//! 4. the node holds exactly one certificate of its identity generation (the join's: a renewal
//!    since means the machine had its answer), not revoked, not expired, for this CSR's key.
//!
//! Pure: the shell loads the facts, this decides.

use time::OffsetDateTime;

use super::contract::AttestorRefusal;
use crate::identity::{unix_us, CertState, Joined, NodeState, NodeStatus};
use crate::pki::{NodeIdentity, TrustDomain, VerifiedCsr};

/// What the shell loads for a refusal that names a spent subject: the `attestation_uses` row,
/// and the node its join made with that node's last join and certificates.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EarlierJoin {
    /// Whether `attestation_uses` still holds the subject (maintenance prunes expired rows).
    pub use_found: bool,
    /// The node whose join spent the subject (`attestation_uses.node_id`).
    pub spent_by: Option<String>,
    /// When the use may be forgotten (µs); `None`: kept for good.
    pub use_expires_at_us: Option<i64>,
    /// That node, when it has a row.
    pub node: Option<NodeState>,
    /// The attestor of the node's last join (`nodes.attestor`).
    pub attestor: String,
    /// The token of its last join (`nodes.token_id`; empty: none).
    pub token_id: String,
    /// SHA-256 of the CSR its last join was admitted for (`None`: not recorded).
    pub csr_sha256: Option<[u8; 32]>,
    /// Its certificates (every generation), in issue order.
    pub certificates: Vec<CertState>,
}

/// Why an earlier join is not answered again: the refusal stands. One variant per check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NotAnsweredAgain {
    /// The use is gone, or past its expiry: the evidence's life is over.
    #[error("the use is no longer kept")]
    UseExpired,
    /// No node spent it, or that node has no row.
    #[error("no node spent it")]
    NoNode,
    /// The node is retired or deleted.
    #[error("the node is not active")]
    NodeInactive,
    /// Its last join was by another attestor.
    #[error("another attestor's join")]
    OtherAttestor,
    /// Its last join was in another tenant than the one the evidence authenticated.
    #[error("another tenant's join")]
    OtherTenant,
    /// Its last join used another token.
    #[error("another token's join")]
    OtherToken,
    /// Its last join was for another CSR.
    #[error("another CSR's join")]
    OtherCsr,
    /// It has no certificate of its generation (revoked since), or more than one (renewed
    /// since: the machine had its answer).
    #[error("the join's certificate is not the node's current one")]
    MovedOn,
    /// The join's certificate was revoked.
    #[error("the join's certificate was revoked")]
    Revoked,
    /// The join's certificate expired.
    #[error("the join's certificate expired")]
    Expired,
    /// The join's certificate does not certify this CSR's key (or does not parse).
    #[error("the join's certificate is for another key")]
    OtherKey,
}

/// The identity `earlier` issued, answered again for the request whose `attestor` refused it
/// with `refusal` (a spent subject) for `csr`; or why the refusal stands.
pub fn answer_again(
    trust_domain: &TrustDomain,
    attestor: &str,
    refusal: &AttestorRefusal,
    csr: &VerifiedCsr,
    earlier: &EarlierJoin,
    now: OffsetDateTime,
) -> Result<Joined, NotAnsweredAgain> {
    use NotAnsweredAgain as Not;
    let now_us = unix_us(now);
    if !earlier.use_found || earlier.use_expires_at_us.is_some_and(|at| at <= now_us) {
        return Err(Not::UseExpired);
    }
    let node = earlier
        .node
        .as_ref()
        .filter(|n| earlier.spent_by.as_deref() == Some(n.node_id.as_str()))
        .ok_or(Not::NoNode)?;
    if node.status != NodeStatus::Active {
        return Err(Not::NodeInactive);
    }
    if earlier.attestor != attestor {
        return Err(Not::OtherAttestor);
    }
    if refusal
        .tenant_id
        .as_ref()
        .is_some_and(|t| *t != node.tenant_id)
    {
        return Err(Not::OtherTenant);
    }
    if refusal
        .token_id
        .as_ref()
        .is_some_and(|t| *t != earlier.token_id)
    {
        return Err(Not::OtherToken);
    }
    if earlier.csr_sha256 != Some(*csr.sha256()) {
        return Err(Not::OtherCsr);
    }
    let cert = the_joins_certificate(node, &earlier.certificates)?;
    if cert.revoked {
        return Err(Not::Revoked);
    }
    if now_us >= cert.not_after_us {
        return Err(Not::Expired);
    }
    let issued = NodeIdentity::from_leaf_der(&cert.der, trust_domain).map_err(|_| Not::OtherKey)?;
    if &issued.public_key != csr.public_key() || issued.spiffe_id.node.as_str() != node.node_id {
        return Err(Not::OtherKey);
    }
    Ok(Joined {
        node_id: node.node_id.clone(),
        tenant_id: node.tenant_id.clone(),
        token_id: earlier.token_id.clone(),
        site_id: node.site_id.clone(),
        role: node.role.as_str().to_owned(),
        identity_generation: node.identity_generation,
        reclaimed: node.identity_generation > 1,
        certificate_der: cert.der.clone(),
        not_after_us: cert.not_after_us,
        csr_sha256: *csr.sha256(),
        allowed_kinds: cert.allowed_kinds.clone(),
    })
}

/// The one certificate of the node's current generation: the join's, never renewed.
fn the_joins_certificate<'c>(
    node: &NodeState,
    certificates: &'c [CertState],
) -> Result<&'c CertState, NotAnsweredAgain> {
    let mut current = certificates
        .iter()
        .filter(|c| c.node_id == node.node_id && c.identity_generation == node.identity_generation);
    match (current.next(), current.next()) {
        (Some(cert), None) => Ok(cert),
        _ => Err(NotAnsweredAgain::MovedOn),
    }
}

#[cfg(test)]
#[path = "answer_again_tests.rs"]
mod tests;
