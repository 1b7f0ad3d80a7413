//! `bcd::renewal::verify`, one test per refusal: a bad signature, another CSR hash, a foreign
//! chain, another identity, another key, a lifetime over the role's maximum; and a good answer.
//! Every refused answer here is signed by the real JoinService key (so each later check is
//! reached), except the bad-signature one.

use crate::common;
use crate::renewal_support::*;

use bcd::node::decode_renew_body;
use bcd::renewal::verify::{
    verify_renewal, RenewalExpectation, RenewalRefusal, SignedRenewal, VerifiedRenewal,
};
use common::{issue, issue_at, keyset, node_key, now};
use domain::pki::{build_csr, KeySet, NodeIdentity, NodeRole, PrivateKey};
use sha2::{Digest, Sha256};
use time::Duration;

struct Case {
    ks: KeySet,
    current: NodeIdentity,
    chain: Vec<Vec<u8>>,
    next: PrivateKey,
    sha: [u8; 32],
}

fn case(role: NodeRole) -> Case {
    let ks = keyset();
    let key = node_key();
    let leaf = issue(&ks, &key, "node_a", role);
    let current = NodeIdentity::from_leaf_der(&leaf, &ks.trust_domain).unwrap();
    let chain = vec![leaf, ks.node_ca.cert_der().to_vec()];
    let next = node_key();
    let sha: [u8; 32] = Sha256::digest(build_csr(&next).unwrap()).into();
    Case {
        ks,
        current,
        chain,
        next,
        sha,
    }
}

impl Case {
    /// A real node-CA leaf for `key` of node `node`.
    fn leaf(&self, key: &PrivateKey, node: &str) -> Vec<u8> {
        issue(&self.ks, key, node, self.current.role)
    }

    fn check(&self, answer: proto::SignedRenewResponse) -> Result<VerifiedRenewal, RenewalRefusal> {
        verify_renewal(
            &SignedRenewal {
                body: answer.response,
                signature: answer.signature,
            },
            decode_renew_body,
            &RenewalExpectation {
                join_signing_key: self.ks.join_signing.public_key(),
                csr_sha256: self.sha,
                current: &self.current,
                current_chain: &self.chain,
                next_key: self.next.public_key(),
            },
        )
    }

    /// Signed by the JoinService over this request's CSR, carrying `chain`.
    fn answer(&self, chain: Vec<Vec<u8>>) -> proto::SignedRenewResponse {
        signed(
            &self.ks.join_signing,
            self.sha,
            &body(&self.current, self.sha, chain, now()),
        )
    }

    fn good_chain(&self) -> Vec<Vec<u8>> {
        vec![
            self.leaf(&self.next, "node_a"),
            self.ks.node_ca.cert_der().to_vec(),
        ]
    }
}

fn refusal(r: Result<VerifiedRenewal, RenewalRefusal>) -> (RenewalRefusal, String) {
    let e = r.expect_err("refused");
    let text = e.to_string();
    (e, text)
}

#[test]
fn a_good_answer_verifies() {
    let c = case(NodeRole::Node);
    let v = c.check(c.answer(c.good_chain())).unwrap();
    assert_eq!(v.leaf.spiffe_id, c.current.spiffe_id);
    assert_eq!(&v.leaf.public_key, c.next.public_key());
    assert_eq!(v.chain.len(), 2);
    assert!(v.server_time.is_some());
}

#[test]
fn a_bad_signature_is_refused() {
    let c = case(NodeRole::Node);
    // Signed by another deployment's JoinService key.
    let other = keyset();
    let forged = signed(
        &other.join_signing,
        c.sha,
        &body(&c.current, c.sha, c.good_chain(), now()),
    );
    let (e, text) = refusal(c.check(forged));
    assert_eq!(e, RenewalRefusal::BadSignature);
    assert_eq!(
        text,
        "renewal: the answer's signature does not verify under the pinned join signing key \
         (join_signing_key_pin): the gateway relayed an answer the JoinService did not sign"
    );
    // The real key's signature over other bytes (a field changed after signing).
    let mut answer = c.answer(c.good_chain());
    let n = answer.response.len();
    answer.response[n - 1] ^= 1;
    assert_eq!(refusal(c.check(answer)).0, RenewalRefusal::BadSignature);
    // A signature that is not 64 bytes.
    let mut answer = c.answer(c.good_chain());
    answer.signature.truncate(10);
    assert_eq!(refusal(c.check(answer)).0, RenewalRefusal::BadSignature);
}

#[test]
fn an_answer_for_another_csr_is_refused() {
    let c = case(NodeRole::Node);
    let other = [7u8; 32];
    // The body names another CSR (signed for it).
    let answer = signed(
        &c.ks.join_signing,
        other,
        &body(&c.current, other, c.good_chain(), now()),
    );
    let (e, text) = refusal(c.check(answer));
    assert_eq!(e, RenewalRefusal::CsrMismatch);
    assert_eq!(
        text,
        "renewal: the answer is for another request (its csr_sha256 is not this CSR's)"
    );
    // The body names this CSR but the signature binds another: no signature of this request.
    let answer = signed(
        &c.ks.join_signing,
        other,
        &body(&c.current, c.sha, c.good_chain(), now()),
    );
    assert_eq!(refusal(c.check(answer)).0, RenewalRefusal::BadSignature);
}

#[test]
fn a_foreign_chain_is_refused() {
    let c = case(NodeRole::Node);
    // A leaf of another deployment's node CA (same trust domain, identity and key), with it.
    let other = keyset();
    let foreign = issue(&other, &c.next, "node_a", NodeRole::Node);
    let (e, text) =
        refusal(c.check(c.answer(vec![foreign.clone(), other.node_ca.cert_der().to_vec()])));
    assert_eq!(
        e,
        RenewalRefusal::ForeignChain("its CA is not the node CA this node joined under")
    );
    assert_eq!(
        text,
        "renewal: the certificate is not issued by this node's CA (its CA is not the node CA \
         this node joined under)"
    );
    // That leaf beside this node's CA: the CA's signature on it does not verify.
    let (e, _) = refusal(c.check(c.answer(vec![foreign, c.ks.node_ca.cert_der().to_vec()])));
    assert_eq!(
        e,
        RenewalRefusal::ForeignChain("the node CA's signature on it does not verify")
    );
    // No CA certificate at all.
    let (e, _) = refusal(c.check(c.answer(vec![c.leaf(&c.next, "node_a")])));
    assert_eq!(
        e,
        RenewalRefusal::ForeignChain("the answer carries no CA certificate")
    );
    // Something after the node CA.
    let mut long = c.good_chain();
    long.push(c.ks.root_ca.cert_der().to_vec());
    let (e, _) = refusal(c.check(c.answer(long)));
    assert_eq!(
        e,
        RenewalRefusal::ForeignChain("the chain is not exactly the leaf and the node CA")
    );
}

#[test]
fn an_answer_for_another_identity_is_refused() {
    let c = case(NodeRole::Node);
    // The leaf names node_b (the body says node_a): spec 002's message.
    let (e, text) = refusal(c.check(c.answer(vec![
        c.leaf(&c.next, "node_b"),
        c.ks.node_ca.cert_der().to_vec(),
    ])));
    assert!(matches!(e, RenewalRefusal::Answer(_)), "{e:?}");
    assert_eq!(
        text,
        "renewal: the certificate is for eu-1/node_b (node), not eu-1/node_a (node)"
    );
    // Another role.
    let site = issue(&c.ks, &c.next, "node_a", NodeRole::Site);
    let (_, text) = refusal(c.check(c.answer(vec![site, c.ks.node_ca.cert_der().to_vec()])));
    assert_eq!(
        text,
        "renewal: the certificate is for eu-1/node_a (site), not eu-1/node_a (node)"
    );
    // The signed body names another node.
    let mut b = body(&c.current, c.sha, c.good_chain(), now());
    b.node_id = "node_b".into();
    let (e, text) = refusal(c.check(signed(&c.ks.join_signing, c.sha, &b)));
    assert!(matches!(e, RenewalRefusal::BodyIdentity { .. }), "{e:?}");
    assert_eq!(
        text,
        "renewal: the answer is for compute.example.com eu-1/node_b (node), not \
         compute.example.com eu-1/node_a (node)"
    );
}

#[test]
fn an_answer_for_another_key_is_refused() {
    let c = case(NodeRole::Node);
    let (e, text) = refusal(c.check(c.answer(vec![
        c.leaf(&node_key(), "node_a"),
        c.ks.node_ca.cert_der().to_vec(),
    ])));
    assert!(matches!(e, RenewalRefusal::Answer(_)), "{e:?}");
    assert_eq!(
        text,
        "renewal: the certificate does not certify the new key"
    );
}

#[test]
fn a_lifetime_over_the_roles_maximum_is_refused() {
    let c = case(NodeRole::Node);
    let (leaf, ca) = own_ca_leaf(
        &c.current.spiffe_id,
        "bc-role:node",
        c.next.public_key(),
        Duration::days(3650),
    );
    let (e, text) = refusal(c.check(c.answer(vec![leaf, ca])));
    assert_eq!(
        e,
        RenewalRefusal::TooLong {
            hours: 87_600,
            max_hours: 24,
            role: "node".into()
        }
    );
    assert_eq!(
        text,
        "renewal: the certificate lives 87600 h, more than the 24 h a node certificate may"
    );
    // 24 h is the maximum itself: it passes the lifetime check (and then the chain check).
    let (leaf, ca) = own_ca_leaf(
        &c.current.spiffe_id,
        "bc-role:node",
        c.next.public_key(),
        Duration::hours(24),
    );
    assert!(matches!(
        refusal(c.check(c.answer(vec![leaf, ca]))).0,
        RenewalRefusal::ForeignChain(_)
    ));

    // A ramdisk's maximum is 2 h.
    let r = case(NodeRole::Ramdisk);
    let ramdisk_leaf = issue_at(
        &r.ks,
        &node_key(),
        "node_a",
        NodeRole::Ramdisk,
        now(),
        Some(Duration::hours(2)),
    );
    assert_eq!(
        NodeIdentity::from_leaf_der(&ramdisk_leaf, &r.ks.trust_domain)
            .map(|l| l.not_after - l.not_before)
            .unwrap(),
        Duration::hours(2)
    );
    let (leaf, ca) = own_ca_leaf(
        &r.current.spiffe_id,
        "bc-role:ramdisk",
        r.next.public_key(),
        Duration::hours(3),
    );
    let (e, _) = refusal(r.check(r.answer(vec![leaf, ca])));
    assert_eq!(
        e,
        RenewalRefusal::TooLong {
            hours: 3,
            max_hours: 2,
            role: "ramdisk".into()
        }
    );
}
