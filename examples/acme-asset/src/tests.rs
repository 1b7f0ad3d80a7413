//! The attestor on its own, pure: every refusal reason it gives itself, and the result.

use domain::attest::{BindingState, EntryState};
use domain::identity::{ClaimsDigests, HardwareClaims};
use domain::pki::{build_csr, KeyRole, PrivateKey, VerifiedCsr};
use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};

use super::*;

fn vendor() -> EcdsaKeyPair {
    let rng = ring::rand::SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
    EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng).unwrap()
}

fn attestor(vendor: &EcdsaKeyPair) -> AcmeAssetAttestor {
    AcmeAssetAttestor::new(vendor.public_key().as_ref().to_vec()).unwrap()
}

/// `facts` with the `acme-asset` list's entry for ASSET-0042 (what the shell loads for the
/// plan's `FactKey::Entry`).
fn with_asset(facts: &Facts) -> Facts {
    let mut facts = facts.clone();
    facts.entries.insert(
        (ID.to_owned(), "ASSET-0042".to_owned()),
        EntryState {
            entry_id: "ent_1".into(),
            tenant_id: "acme".into(),
            site_id: "site-1".into(),
            pool_id: "racks".into(),
            role: None,
        },
    );
    facts
}

fn csr() -> VerifiedCsr {
    let key = PrivateKey::generate(KeyRole::Node).unwrap();
    VerifiedCsr::verify(&build_csr(&key).unwrap()).unwrap()
}

fn run(a: &AcmeAssetAttestor, csr: &VerifiedCsr, evidence: &[u8], facts: &Facts) -> Verdict {
    let claims = HardwareClaims::default();
    let digests = ClaimsDigests::default();
    let request = AttestRequest {
        role: NodeRole::Node,
        csr,
        claims: &claims,
        digests: &digests,
        evidence,
        token: None,
        now: time::OffsetDateTime::UNIX_EPOCH,
        entropy: &const { domain::attest::Entropy::from_seed([7; 32]) },
    };
    match a.plan(&request) {
        Err(r) => Verdict::Refuse(r),
        Ok(planned) => {
            assert!(planned
                .facts
                .iter()
                .any(|k| matches!(k, FactKey::Entry { list, .. } if list == ID)));
            a.verify(&request, &planned.plan, &with_asset(facts))
        }
    }
}

fn refused(v: Verdict) -> String {
    match v {
        Verdict::Refuse(r) => r.text(),
        other => panic!("not refused: {other:?}"),
    }
}

#[test]
fn a_vendor_signed_tag_for_this_csr_admits_and_binds_the_asset() {
    let v = vendor();
    let a = attestor(&v);
    let csr = csr();
    let evidence = vendor_evidence(&v, "ASSET-0042", csr.sha256()).unwrap();
    let Verdict::Admit(r) = run(&a, &csr, &evidence, &Facts::default()) else {
        panic!("not admitted")
    };
    assert_eq!(
        (r.tenant_id.as_str(), r.site_id.as_str(), r.pool_id.as_str()),
        ("acme", "site-1", "racks")
    );
    assert_eq!(r.bind, vec![asset_subject("ASSET-0042")]);
    assert_eq!(r.single_use.len(), 1);
    assert_eq!(r.single_use[0].attestor, ID);
    assert_eq!(r.single_use[0].expires_at_us, None);
    assert_eq!(r.reclaim_node_id, None);
    assert_eq!(r.token, None);
    assert_eq!(r.node_key, NodeKeyStatement::Unattested);

    // The asset bound already: the node is reclaimed.
    let mut facts = Facts::default();
    facts.bindings.insert(
        asset_subject("ASSET-0042"),
        BindingState {
            attestor: ID.into(),
            node_id: "node_1".into(),
        },
    );
    let Verdict::Admit(r) = run(&a, &csr, &evidence, &facts) else {
        panic!("not admitted")
    };
    assert_eq!(r.reclaim_node_id.as_deref(), Some("node_1"));
}

#[test]
fn every_refusal_has_its_reason() {
    let v = vendor();
    let a = attestor(&v);
    let csr = csr();
    let none = Facts::default();
    assert_eq!(
        refused(run(&a, &csr, b"not json", &none)),
        "acme-asset:malformed"
    );
    assert_eq!(
        refused(run(&a, &csr, br#"{"assetTag":"A","sig":7}"#, &none)),
        "acme-asset:malformed"
    );
    let no_binding =
        serde_json::json!({"assetTag": "ASSET-0042", "sig": URL_SAFE_NO_PAD.encode([1u8; 64])});
    assert_eq!(
        refused(run(&a, &csr, no_binding.to_string().as_bytes(), &none)),
        "acme-asset:no-csr-binding"
    );
    let other = self::csr();
    let for_other = vendor_evidence(&v, "ASSET-0042", other.sha256()).unwrap();
    assert_eq!(
        refused(run(&a, &csr, &for_other, &none)),
        "acme-asset:csr-mismatch"
    );
    let forged = vendor_evidence(&vendor(), "ASSET-0042", csr.sha256()).unwrap();
    assert_eq!(
        refused(run(&a, &csr, &forged, &none)),
        "acme-asset:bad-signature"
    );
    let unknown = vendor_evidence(&v, "ASSET-9999", csr.sha256()).unwrap();
    assert_eq!(
        refused(run(&a, &csr, &unknown, &none)),
        "acme-asset:unknown-asset"
    );
    let good = vendor_evidence(&v, "ASSET-0042", csr.sha256()).unwrap();
    let Verdict::Admit(r) = run(&a, &csr, &good, &none) else {
        panic!("not admitted")
    };
    let mut used = Facts::default();
    used.uses.insert((ID.to_owned(), r.single_use[0].subject));
    let replay = run(&a, &csr, &good, &used);
    let Verdict::Refuse(r) = replay else {
        panic!("a replay admitted")
    };
    assert_eq!(r.text(), "acme-asset:reused");
    assert_eq!(r.tenant_id.as_deref(), Some("acme"));
}

#[test]
fn the_vendor_key_must_be_a_p256_point() {
    assert_eq!(
        AcmeAssetAttestor::new(vec![4; 64]).unwrap_err(),
        AcmeAssetError::BadVendorKey
    );
}

#[test]
fn the_factory_builds_from_its_table_only() {
    let build = |table: Option<serde_json::Value>| {
        (FACTORY.build)(&AttestorSetup {
            table: table.as_ref(),
        })
        .map(|a| a.map(|a| a.id().to_owned()))
    };
    assert_eq!(build(None), Ok(None));
    let key = URL_SAFE_NO_PAD.encode(vendor().public_key().as_ref());
    assert_eq!(
        build(Some(serde_json::json!({ "vendor_key": key }))),
        Ok(Some(ID.to_owned()))
    );
    let short = URL_SAFE_NO_PAD.encode([4u8; 64]);
    assert!(build(Some(serde_json::json!({ "vendor_key": short })))
        .unwrap_err()
        .contains("uncompressed P-256 point"));
    assert!(build(Some(serde_json::json!({ "vendorKey": "x" })))
        .unwrap_err()
        .starts_with("[attestors.acme-asset]"));
    assert_eq!(FACTORY.lists[0].name, "acme-asset");
    assert_eq!(
        ASSET_LIST.stream("ASSET-0042"),
        "attestor-entry/acme-asset/ASSET-0042"
    );
}
