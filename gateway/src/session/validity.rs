//! Whether a node's certificate is within its validity (notBefore <= now < notAfter): checked
//! before anything else when a session opens, and against every message while it is open, so
//! nothing is answered or recorded past notAfter.

use domain::pki::NodeIdentity;
use time::OffsetDateTime;

/// Why a session is refused for its certificate's validity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValidityRefusal {
    #[error("this certificate expired at {0}; renew it (bcd renews before expiry) or join again")]
    Expired(OffsetDateTime),
    #[error("this certificate is not valid before {0}; check this machine's clock")]
    NotYetValid(OffsetDateTime),
}

impl ValidityRefusal {
    /// The `/metrics` label of the refused session.
    pub fn label(&self) -> &'static str {
        match self {
            ValidityRefusal::Expired(_) => "expired",
            ValidityRefusal::NotYetValid(_) => "not-yet-valid",
        }
    }
}

/// Whether `identity` is valid at `now` (notBefore <= now < notAfter).
pub fn check_validity(identity: &NodeIdentity, now: OffsetDateTime) -> Result<(), ValidityRefusal> {
    if now < identity.not_before {
        return Err(ValidityRefusal::NotYetValid(identity.not_before));
    }
    if now >= identity.not_after {
        return Err(ValidityRefusal::Expired(identity.not_after));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::pki::{
        build_csr, issue_node_certificate, KeyRole, KeySet, KeySetLifetimes,
        NodeCertificateDecision, NodeRole, PrivateKey, Serial, SpiffeId, TrustDomain, VerifiedCsr,
    };

    #[test]
    fn a_session_is_refused_before_not_before_and_from_not_after_on() {
        let td = TrustDomain::new("fleet.test").unwrap();
        let t0 = OffsetDateTime::now_utc() - time::Duration::days(1);
        let keys = KeySet::generate(td.clone(), t0, KeySetLifetimes::default()).unwrap();
        let key = PrivateKey::generate(KeyRole::Node).unwrap();
        let csr = VerifiedCsr::verify(&build_csr(&key).unwrap()).unwrap();
        let issued_at = t0 + time::Duration::hours(1);
        let cert = issue_node_certificate(
            &keys.node_ca,
            &csr,
            &NodeCertificateDecision {
                spiffe_id: SpiffeId::parse("spiffe://fleet.test/site/s1/node/n1").unwrap(),
                role: NodeRole::Node,
                serial: Serial::generate().unwrap(),
                requested_lifetime: Some(time::Duration::hours(1)),
                statements: vec![],
            },
            issued_at,
        )
        .unwrap();
        let id = NodeIdentity::from_leaf_der(&cert.der, &td).unwrap();
        let second = time::Duration::seconds(1);
        assert_eq!(
            check_validity(&id, id.not_before - second),
            Err(ValidityRefusal::NotYetValid(id.not_before))
        );
        assert_eq!(check_validity(&id, id.not_before), Ok(()));
        assert_eq!(check_validity(&id, id.not_after - second), Ok(()));
        assert_eq!(
            check_validity(&id, id.not_after),
            Err(ValidityRefusal::Expired(id.not_after))
        );
        assert_eq!(
            ValidityRefusal::NotYetValid(id.not_before).to_string(),
            format!(
                "this certificate is not valid before {}; check this machine's clock",
                id.not_before
            )
        );
        assert_eq!(
            ValidityRefusal::NotYetValid(id.not_before).label(),
            "not-yet-valid"
        );
        assert_eq!(ValidityRefusal::Expired(id.not_after).label(), "expired");
    }
}
