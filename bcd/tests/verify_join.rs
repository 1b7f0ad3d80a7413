//! JoinResponse verification: one accepted answer, and each refusal.
//!
//! The wire encoding is the proto crate's job; here the signed body is JSON of the fields, and
//! the test's decoder reads it, so every checked field still comes from the signed bytes.

use crate::common;

use bcd::join::verify::{
    verify_join_response, JoinExpectation, JoinRefusal, JoinResponseFields, SignedJoinResponse,
};
use common::*;
use domain::pki::statement::{sign, JoinResponseStatement};
use domain::pki::{
    IdentityError, KeyRole, KeySet, KeySetLifetimes, NodeRole, PrivateKey, TrustDomain,
};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Body {
    csr_sha256: Vec<u8>,
    trust_domain: String,
    leaf: Vec<u8>,
}

fn decode(body: &[u8]) -> Result<JoinResponseFields, serde_json::Error> {
    let b: Body = serde_json::from_slice(body)?;
    Ok(JoinResponseFields {
        csr_sha256: b.csr_sha256,
        trust_domain: b.trust_domain,
        leaf_der: b.leaf,
        ..Default::default()
    })
}

struct Case {
    ks: KeySet,
    key: PrivateKey,
    csr_sha256: [u8; 32],
}

impl Case {
    fn new() -> Case {
        let ks = keyset();
        let key = node_key();
        let csr_sha256 = *csr(&key).sha256();
        Case {
            ks,
            key,
            csr_sha256,
        }
    }

    fn expect(&self) -> JoinExpectation<'_> {
        JoinExpectation {
            join_signing_pin: self.ks.join_signing.public_key().pin(),
            csr_sha256: self.csr_sha256,
            node_key: self.key.public_key(),
            role: NodeRole::Node,
            trust_domain: None,
            node_id: None,
        }
    }

    /// A response signed by `signer`, bound (in the signature) to `bound_csr`.
    fn response(
        &self,
        signer: &PrivateKey,
        body_csr: [u8; 32],
        bound_csr: [u8; 32],
        trust_domain: &str,
        leaf: Vec<u8>,
    ) -> SignedJoinResponse {
        let body = serde_json::to_vec(&Body {
            csr_sha256: body_csr.to_vec(),
            trust_domain: trust_domain.to_owned(),
            leaf,
        })
        .unwrap();
        let signature = sign(
            signer,
            &JoinResponseStatement {
                csr_sha256: bound_csr,
                response: &body,
            },
        )
        .unwrap();
        SignedJoinResponse {
            body,
            signature: signature.as_bytes().to_vec(),
            signer_spki_der: signer.public_key().spki_der().to_vec(),
        }
    }

    fn good(&self) -> SignedJoinResponse {
        let leaf = issue(&self.ks, &self.key, "n1", NodeRole::Node);
        self.response(
            &self.ks.join_signing,
            self.csr_sha256,
            self.csr_sha256,
            TD,
            leaf,
        )
    }
}

#[test]
fn a_good_answer_verifies() {
    let c = Case::new();
    let v = verify_join_response(&c.good(), decode, &c.expect()).unwrap();
    assert_eq!(v.leaf.spiffe_id.node.as_str(), "n1");
    let stored = v.stored_identity();
    assert_eq!(stored.node_id, "n1");
    assert_eq!(stored.trust_domain, TD);
    let td = TrustDomain::new(TD).unwrap();
    let mut e = c.expect();
    e.trust_domain = Some(&td);
    e.node_id = Some("n1");
    assert!(verify_join_response(&c.good(), decode, &e).is_ok());
}

#[test]
fn wrong_signer_is_refused() {
    let c = Case::new();
    let other = PrivateKey::generate(KeyRole::JoinSigning).unwrap();
    let leaf = issue(&c.ks, &c.key, "n1", NodeRole::Node);
    let r = c.response(&other, c.csr_sha256, c.csr_sha256, TD, leaf);
    assert!(matches!(
        verify_join_response(&r, decode, &c.expect()),
        Err(JoinRefusal::WrongSigner { .. })
    ));
    // The pinned key's SPKI with another key's signature.
    let mut forged = c.good();
    let real = c.good();
    forged.signature = {
        let leaf = issue(&c.ks, &c.key, "n1", NodeRole::Node);
        c.response(&other, c.csr_sha256, c.csr_sha256, TD, leaf)
            .signature
    };
    forged.signer_spki_der = real.signer_spki_der;
    assert_eq!(
        verify_join_response(&forged, decode, &c.expect()).unwrap_err(),
        JoinRefusal::BadSignature
    );
}

#[test]
fn wrong_csr_hash_is_refused() {
    let c = Case::new();
    let leaf = issue(&c.ks, &c.key, "n1", NodeRole::Node);
    let other = [7u8; 32];
    let r = c.response(&c.ks.join_signing, other, other, TD, leaf.clone());
    assert_eq!(
        verify_join_response(&r, decode, &c.expect()).unwrap_err(),
        JoinRefusal::CsrMismatch
    );
    // The body names our CSR but the signature is bound to another.
    let r = c.response(&c.ks.join_signing, c.csr_sha256, other, TD, leaf);
    assert_eq!(
        verify_join_response(&r, decode, &c.expect()).unwrap_err(),
        JoinRefusal::BadSignature
    );
}

#[test]
fn leaf_for_another_key_is_refused() {
    let c = Case::new();
    let leaf = issue(&c.ks, &node_key(), "n1", NodeRole::Node);
    let r = c.response(&c.ks.join_signing, c.csr_sha256, c.csr_sha256, TD, leaf);
    assert_eq!(
        verify_join_response(&r, decode, &c.expect()).unwrap_err(),
        JoinRefusal::NotOurKey
    );
}

#[test]
fn another_trust_domain_is_refused() {
    let c = Case::new();
    // A leaf from another deployment's node CA, the body naming ours.
    let foreign = KeySet::generate(
        TrustDomain::new("other.example.org").unwrap(),
        now() - time::Duration::hours(1),
        KeySetLifetimes::default(),
    )
    .unwrap();
    let leaf = issue(&foreign, &c.key, "n1", NodeRole::Node);
    let r = c.response(
        &c.ks.join_signing,
        c.csr_sha256,
        c.csr_sha256,
        TD,
        leaf.clone(),
    );
    assert!(matches!(
        verify_join_response(&r, decode, &c.expect()),
        Err(JoinRefusal::Leaf(IdentityError::ForeignTrustDomain { .. }))
    ));
    // The body naming another trust domain than the configured one.
    let r = c.response(
        &c.ks.join_signing,
        c.csr_sha256,
        c.csr_sha256,
        "other.example.org",
        leaf,
    );
    let td = TrustDomain::new(TD).unwrap();
    let mut e = c.expect();
    e.trust_domain = Some(&td);
    assert!(matches!(
        verify_join_response(&r, decode, &e),
        Err(JoinRefusal::TrustDomain { .. })
    ));
}

#[test]
fn wrong_role_and_wrong_node_are_refused() {
    let c = Case::new();
    let leaf = issue(&c.ks, &c.key, "n1", NodeRole::Site);
    let r = c.response(&c.ks.join_signing, c.csr_sha256, c.csr_sha256, TD, leaf);
    assert_eq!(
        verify_join_response(&r, decode, &c.expect()).unwrap_err(),
        JoinRefusal::WrongRole {
            found: NodeRole::Site,
            asked: NodeRole::Node
        }
    );
    let mut e = c.expect();
    e.node_id = Some("n9");
    assert!(matches!(
        verify_join_response(&c.good(), decode, &e),
        Err(JoinRefusal::WrongNode { .. })
    ));
}

#[test]
fn undecodable_body_is_refused() {
    let c = Case::new();
    let mut r = c.good();
    r.body = b"not json".to_vec();
    assert!(matches!(
        verify_join_response(&r, decode, &c.expect()),
        Err(JoinRefusal::Undecodable(_))
    ));
}
