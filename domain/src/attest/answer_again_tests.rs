//! The identity of an earlier join answered again, and one test per reason it is not.

use time::{Duration, OffsetDateTime};

use super::*;
use crate::identity::{unix_us, CertState, NodeState, NodeStatus};
use crate::pki::{
    build_csr, issue_node_certificate, KeyRole, KeySet, KeySetLifetimes, NodeCertificateDecision,
    NodeId, NodeRole, PrivateKey, Serial, SiteId, SpiffeId, TrustDomain, VerifiedCsr,
};

const NODE: &str = "node_a";

fn t0() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_790_000_000).unwrap()
}

struct Fx {
    keys: KeySet,
    csr: VerifiedCsr,
    earlier: EarlierJoin,
    refusal: AttestorRefusal,
}

fn cert_for(keys: &KeySet, csr: &VerifiedCsr, generation: u64) -> CertState {
    let decision = NodeCertificateDecision {
        spiffe_id: SpiffeId::new(
            keys.trust_domain.clone(),
            SiteId::new("site-1").unwrap(),
            NodeId::new(NODE).unwrap(),
        ),
        role: NodeRole::Node,
        serial: Serial::generate().unwrap(),
        requested_lifetime: None,
        statements: Vec::new(),
    };
    let issued = issue_node_certificate(&keys.node_ca, csr, &decision, t0()).unwrap();
    CertState {
        serial: issued.serial.to_hex(),
        node_id: NODE.into(),
        identity_generation: generation,
        der: issued.der,
        not_after_us: unix_us(issued.not_after),
        revoked: false,
        allowed_kinds: Vec::new(),
    }
}

fn new_csr() -> VerifiedCsr {
    let key = PrivateKey::generate(KeyRole::Node).unwrap();
    VerifiedCsr::verify(&build_csr(&key).unwrap()).unwrap()
}

/// A node that joined once with token `tok_1`, for `csr`; the request refused `csr-key-used`.
fn fixture() -> Fx {
    let td = TrustDomain::new("compute.example.com").unwrap();
    let keys = KeySet::generate(td, t0(), KeySetLifetimes::default()).unwrap();
    let csr = new_csr();
    let cert = cert_for(&keys, &csr, 1);
    let earlier = EarlierJoin {
        use_found: true,
        spent_by: Some(NODE.into()),
        use_expires_at_us: Some(unix_us(t0() + Duration::hours(1))),
        node: Some(NodeState {
            node_id: NODE.into(),
            tenant_id: "t1".into(),
            site_id: "site-1".into(),
            pool_id: "pool-1".into(),
            role: NodeRole::Node,
            status: NodeStatus::Active,
            identity_generation: 1,
            hardware_key_sha256: None,
            product_uuid_sha256: None,
        }),
        attestor: "join-token".into(),
        token_id: "tok_1".into(),
        csr_sha256: Some(*csr.sha256()),
        certificates: vec![cert],
    };
    let refusal = AttestorRefusal::new("join-token", "csr-key-used")
        .in_tenant("t1")
        .with_token("tok_1")
        .spent("join-token", &[7; 32]);
    Fx {
        keys,
        csr,
        earlier,
        refusal,
    }
}

impl Fx {
    fn decide(&self) -> Result<Joined, NotAnsweredAgain> {
        self.decide_at(t0() + Duration::minutes(1))
    }

    fn decide_at(&self, now: OffsetDateTime) -> Result<Joined, NotAnsweredAgain> {
        answer_again(
            &self.keys.trust_domain,
            "join-token",
            &self.refusal,
            &self.csr,
            &self.earlier,
            now,
        )
    }

    fn node(&mut self) -> &mut NodeState {
        self.earlier.node.as_mut().unwrap()
    }
}

#[test]
fn the_same_request_gets_the_identity_already_issued() {
    let f = fixture();
    let joined = f.decide().unwrap();
    let cert = &f.earlier.certificates[0];
    assert_eq!(
        joined,
        Joined {
            node_id: NODE.into(),
            tenant_id: "t1".into(),
            token_id: "tok_1".into(),
            site_id: "site-1".into(),
            role: "node".into(),
            identity_generation: 1,
            reclaimed: false,
            certificate_der: cert.der.clone(),
            not_after_us: cert.not_after_us,
            csr_sha256: *f.csr.sha256(),
            allowed_kinds: cert.allowed_kinds.clone(),
        }
    );
    // A re-join (generation 2, its one certificate after the revoked ones) too.
    let mut f = fixture();
    f.earlier.certificates[0].revoked = true;
    let rejoined = cert_for(&f.keys, &f.csr, 2);
    f.earlier.certificates.push(rejoined.clone());
    f.node().identity_generation = 2;
    f.earlier.attestor = "x509pop".into();
    f.earlier.token_id = String::new();
    f.refusal = AttestorRefusal::new("x509pop", "reused")
        .in_tenant("t1")
        .with_node(NODE);
    let joined = answer_again(
        &f.keys.trust_domain,
        "x509pop",
        &f.refusal,
        &f.csr,
        &f.earlier,
        t0(),
    )
    .unwrap();
    assert_eq!(
        (
            joined.identity_generation,
            joined.reclaimed,
            joined.certificate_der
        ),
        (2, true, rejoined.der)
    );
}

#[test]
fn use_expired() {
    let mut f = fixture();
    let at = f.earlier.use_expires_at_us.unwrap();
    let at = OffsetDateTime::from_unix_timestamp_nanos(i128::from(at) * 1000).unwrap();
    assert!(f.decide_at(at - Duration::seconds(1)).is_ok());
    assert_eq!(f.decide_at(at), Err(NotAnsweredAgain::UseExpired));
    f.earlier.use_found = false;
    assert_eq!(f.decide(), Err(NotAnsweredAgain::UseExpired));
    // A use kept for good is kept.
    let mut f = fixture();
    f.earlier.use_expires_at_us = None;
    assert!(f
        .decide_at(t0() + Duration::days(3650))
        .is_err_and(|e| e == NotAnsweredAgain::Expired));
}

#[test]
fn no_node() {
    let mut f = fixture();
    f.earlier.spent_by = None;
    assert_eq!(f.decide(), Err(NotAnsweredAgain::NoNode));
    let mut f = fixture();
    f.earlier.spent_by = Some("node_b".into());
    assert_eq!(f.decide(), Err(NotAnsweredAgain::NoNode));
    let mut f = fixture();
    f.earlier.node = None;
    assert_eq!(f.decide(), Err(NotAnsweredAgain::NoNode));
}

#[test]
fn node_inactive() {
    for status in [NodeStatus::Retired, NodeStatus::Deleted] {
        let mut f = fixture();
        f.node().status = status;
        assert_eq!(f.decide(), Err(NotAnsweredAgain::NodeInactive));
    }
}

#[test]
fn other_attestor() {
    let mut f = fixture();
    f.earlier.attestor = "provisioned".into();
    assert_eq!(f.decide(), Err(NotAnsweredAgain::OtherAttestor));
}

#[test]
fn other_tenant() {
    let mut f = fixture();
    f.refusal = f.refusal.clone().in_tenant("t2");
    assert_eq!(f.decide(), Err(NotAnsweredAgain::OtherTenant));
}

#[test]
fn other_token() {
    let mut f = fixture();
    f.refusal = f.refusal.clone().with_token("tok_2");
    assert_eq!(f.decide(), Err(NotAnsweredAgain::OtherToken));
}

#[test]
fn other_csr() {
    let mut f = fixture();
    f.csr = new_csr();
    assert_eq!(f.decide(), Err(NotAnsweredAgain::OtherCsr));
    let mut f = fixture();
    f.earlier.csr_sha256 = None;
    assert_eq!(f.decide(), Err(NotAnsweredAgain::OtherCsr));
}

#[test]
fn moved_on() {
    // Renewed since.
    let mut f = fixture();
    let renewed = cert_for(&f.keys, &new_csr(), 1);
    f.earlier.certificates.push(renewed);
    assert_eq!(f.decide(), Err(NotAnsweredAgain::MovedOn));
    // Its identity revoked since (a new generation without a certificate).
    let mut f = fixture();
    f.node().identity_generation = 2;
    assert_eq!(f.decide(), Err(NotAnsweredAgain::MovedOn));
}

#[test]
fn revoked() {
    let mut f = fixture();
    f.earlier.certificates[0].revoked = true;
    assert_eq!(f.decide(), Err(NotAnsweredAgain::Revoked));
}

#[test]
fn expired() {
    let f = fixture();
    let not_after = f.earlier.certificates[0].not_after_us;
    let at = OffsetDateTime::from_unix_timestamp_nanos(i128::from(not_after) * 1000).unwrap();
    let mut f = f;
    f.earlier.use_expires_at_us = None;
    assert_eq!(f.decide_at(at), Err(NotAnsweredAgain::Expired));
}

#[test]
fn other_key() {
    // The join's certificate certifies another key than this CSR's (same CSR digest recorded:
    // only a corrupt row can say so).
    let mut f = fixture();
    f.earlier.certificates[0] = cert_for(&f.keys, &new_csr(), 1);
    assert_eq!(f.decide(), Err(NotAnsweredAgain::OtherKey));
    let mut f = fixture();
    f.earlier.certificates[0].der = b"not a certificate".to_vec();
    assert_eq!(f.decide(), Err(NotAnsweredAgain::OtherKey));
}
