//! A JoinResponse's signed trust bundle (fields 13 to 15), through the real wire decoder: checked
//! exactly like a Welcome's and kept as identity.json's trust fields; a bundle signed by another
//! key, relabelled to another version or for another trust domain refuses the join.

use crate::common;

use bcd::client::decode_join_body;
use bcd::join::verify::{verify_join_response, JoinExpectation, JoinRefusal, SignedJoinResponse};
use bcd::trust::bundle::TrustBundleRefusal;
use common::*;
use domain::pki::statement::{sign, JoinResponseStatement, TrustBundleStatement};
use domain::pki::{KeyRole, KeySet, NodeRole, PrivateKey};
use prost::Message as _;

fn roots_content(roots: &[&[u8]]) -> Vec<u8> {
    proto::TrustBundleRoots {
        command_signing_roots: roots.iter().map(|r| r.to_vec()).collect(),
    }
    .encode_to_vec()
}

/// (signed bundle bytes, signature) by `key` for `trust_domain` at `version`.
fn bundle(
    key: &PrivateKey,
    version: u64,
    trust_domain: &str,
    content: Vec<u8>,
) -> (Vec<u8>, Vec<u8>) {
    let bytes = proto::TrustBundle {
        version,
        trust_domain: trust_domain.into(),
        content,
    }
    .encode_to_vec();
    let signature = sign(
        key,
        &TrustBundleStatement {
            trust_domain,
            bundle: &bytes,
        },
    )
    .unwrap();
    (bytes, signature.as_bytes().to_vec())
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

    fn answer(&self, trust_version: u64, signed: (Vec<u8>, Vec<u8>)) -> SignedJoinResponse {
        let body = proto::JoinResponse {
            csr_sha256: self.csr_sha256.to_vec(),
            trust_domain: TD.into(),
            certificate_chain: vec![issue(&self.ks, &self.key, "n1", NodeRole::Node)],
            node_id: "n1".into(),
            trust_version,
            signed_trust_bundle: signed.0,
            trust_bundle_signature: signed.1,
            ..Default::default()
        }
        .encode_to_vec();
        let signature = sign(
            &self.ks.join_signing,
            &JoinResponseStatement {
                csr_sha256: self.csr_sha256,
                response: &body,
            },
        )
        .unwrap();
        SignedJoinResponse {
            body,
            signature: signature.as_bytes().to_vec(),
            signer_spki_der: self.ks.join_signing.public_key().spki_der().to_vec(),
        }
    }
}

#[test]
fn a_signed_bundle_is_kept_with_the_join() {
    let c = Case::new();
    let content = roots_content(&[b"root-one"]);
    let signed = bundle(&c.ks.join_signing, 4, TD, content.clone());
    let verified =
        verify_join_response(&c.answer(4, signed.clone()), decode_join_body, &c.expect()).unwrap();
    let stored = verified.stored_identity();
    assert_eq!(stored.trust_version, 4);
    assert_eq!(stored.trust_roots, vec![b"root-one".to_vec()]);
    assert_eq!(stored.trust_bundle, Some(content));
    let kept =
        proto::SignedTrustBundle::decode(stored.signed_trust_bundle.unwrap().as_slice()).unwrap();
    assert_eq!((kept.bundle, kept.signature), signed);
}

#[test]
fn a_join_without_a_published_bundle_keeps_no_trust() {
    let c = Case::new();
    let verified = verify_join_response(
        &c.answer(0, (Vec::new(), Vec::new())),
        decode_join_body,
        &c.expect(),
    )
    .unwrap();
    let stored = verified.stored_identity();
    assert_eq!(stored.trust_version, 0);
    assert!(stored.trust_roots.is_empty());
    assert_eq!(stored.signed_trust_bundle, None);
}

#[test]
fn a_bundle_signed_by_another_key_refuses_the_join() {
    let c = Case::new();
    let other = PrivateKey::generate(KeyRole::JoinSigning).unwrap();
    let signed = bundle(&other, 4, TD, roots_content(&[b"evil-root"]));
    assert_eq!(
        verify_join_response(&c.answer(4, signed), decode_join_body, &c.expect()).unwrap_err(),
        JoinRefusal::TrustBundle(TrustBundleRefusal::Signature)
    );
}

#[test]
fn a_bundle_announced_at_another_version_refuses_the_join() {
    let c = Case::new();
    let signed = bundle(&c.ks.join_signing, 3, TD, roots_content(&[b"root-one"]));
    assert_eq!(
        verify_join_response(&c.answer(9, signed), decode_join_body, &c.expect()).unwrap_err(),
        JoinRefusal::TrustBundle(TrustBundleRefusal::VersionMismatch {
            announced: 9,
            signed: 3
        })
    );
}

#[test]
fn a_bundle_for_another_trust_domain_refuses_the_join() {
    let c = Case::new();
    // Signed (under the right key) for the other trust domain's statement: the signature does
    // not verify for this node's.
    let signed = bundle(
        &c.ks.join_signing,
        4,
        "staging.example.com",
        roots_content(&[]),
    );
    assert_eq!(
        verify_join_response(&c.answer(4, signed), decode_join_body, &c.expect()).unwrap_err(),
        JoinRefusal::TrustBundle(TrustBundleRefusal::Signature)
    );
}
