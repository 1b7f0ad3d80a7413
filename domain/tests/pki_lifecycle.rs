//! The CA life cycle (issue 22): renewing the node and serving CAs for the same key and subject
//! (what they issued keeps verifying, with either CA certificate, by openssl), an offline root
//! (kept out of the bundle, refused where it is needed, given back for renewal), and backdated
//! leaves.

use base64::Engine;
use domain::pki::bundle::{open_bundle, plaintext_bundle, seal_bundle_with, BundleError};
use domain::pki::ca::CaError;
use domain::pki::csr::{build_csr, VerifiedCsr};
use domain::pki::keys::{KeyRole, PrivateKey};
use domain::pki::keyset::{KeySet, KeySetError, KeySetLifetimes, RenewableCa};
use domain::pki::leaf::{issue_node_certificate, NodeCertificateDecision, Serial, BACKDATE};
use domain::pki::secret::DeploymentSecret;
use domain::pki::spiffe::{NodeId, NodeRole, SiteId, SpiffeId, TrustDomain};
use domain::pki::{Argon2idParams, BundleKdf};
use serde_json::Value;
use time::{Duration, OffsetDateTime};

fn td() -> TrustDomain {
    TrustDomain::new("compute.example.com").unwrap()
}

fn secret() -> DeploymentSecret {
    DeploymentSecret::new("a deployment secret long enough for the seal").unwrap()
}

fn kdf() -> BundleKdf {
    BundleKdf::Argon2id(Argon2idParams {
        memory_kib: 64,
        iterations: 1,
        parallelism: 1,
    })
}

fn decision() -> NodeCertificateDecision {
    NodeCertificateDecision {
        spiffe_id: SpiffeId::new(
            td(),
            SiteId::new("eu-1").unwrap(),
            NodeId::new("node_01").unwrap(),
        ),
        role: NodeRole::Node,
        serial: Serial::generate().unwrap(),
        requested_lifetime: None,
        statements: vec![],
    }
}

fn leaf(keys: &KeySet, now: OffsetDateTime) -> Vec<u8> {
    let key = PrivateKey::generate(KeyRole::Node).unwrap();
    let csr = VerifiedCsr::verify(&build_csr(&key).unwrap()).unwrap();
    issue_node_certificate(&keys.node_ca, &csr, &decision(), now)
        .unwrap()
        .der
}

fn pem(der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let lines: Vec<&str> = b64
        .as_bytes()
        .chunks(64)
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect();
    format!(
        "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
        lines.join("\n")
    )
}

/// `openssl verify -CAfile root -untrusted ca leaf`, its stdout trimmed.
fn verify(dir: &std::path::Path, root: &[u8], ca: &[u8], leaf: &[u8]) -> String {
    std::fs::write(dir.join("root.pem"), pem(root)).unwrap();
    std::fs::write(dir.join("ca.pem"), pem(ca)).unwrap();
    std::fs::write(dir.join("leaf.pem"), pem(leaf)).unwrap();
    let out = std::process::Command::new("openssl")
        .current_dir(dir)
        .args([
            "verify",
            "-CAfile",
            "root.pem",
            "-untrusted",
            "ca.pem",
            "leaf.pem",
        ])
        .output()
        .unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout).trim(),
        String::from_utf8_lossy(&out.stderr).trim()
    )
}

#[test]
fn pki_renew_ca_keeps_key_subject_and_what_it_issued() {
    // openssl checks validity against the real clock.
    let t0 = OffsetDateTime::now_utc() - Duration::hours(2);
    let mut keys = KeySet::generate(td(), t0, KeySetLifetimes::default()).unwrap();
    let pins = keys.pins();
    let old_node_ca = keys.node_ca.cert_der().to_vec();
    let old_leaf = leaf(&keys, t0 + Duration::hours(1));

    let now = OffsetDateTime::now_utc();
    keys.renew_ca(RenewableCa::Node, now, Duration::days(4000))
        .unwrap();
    keys.renew_ca(RenewableCa::Serving, now, Duration::days(30))
        .unwrap();
    // Same keys: no pin changes; the node CA is capped at the root's notAfter.
    assert_eq!(keys.pins(), pins);
    assert_eq!(keys.node_ca.not_after(), keys.root_ca.not_after());
    assert_eq!(
        keys.serving_ca.not_after().unix_timestamp(),
        (now + Duration::days(30)).unix_timestamp()
    );
    assert_eq!(
        keys.node_ca.not_before().unix_timestamp(),
        (now - BACKDATE).unix_timestamp()
    );
    let new_node_ca = keys.node_ca.cert_der().to_vec();
    assert_ne!(new_node_ca, old_node_ca);
    let (_, old) = x509_parser::parse_x509_certificate(&old_node_ca).unwrap();
    let (_, new) = x509_parser::parse_x509_certificate(&new_node_ca).unwrap();
    assert_eq!(old.subject().as_raw(), new.subject().as_raw());
    assert_ne!(old.raw_serial(), new.raw_serial());
    let new_leaf = leaf(&keys, now);

    let dir = tempfile::tempdir().unwrap();
    let root = keys.root_ca.cert_der().to_vec();
    assert_eq!(
        verify(dir.path(), &root, &old_node_ca, &old_leaf),
        "leaf.pem: OK"
    );
    assert_eq!(
        verify(dir.path(), &root, &new_node_ca, &new_leaf),
        "leaf.pem: OK"
    );
    // Same key and subject (and so the same key identifiers): either CA certificate chains
    // either leaf.
    assert_eq!(
        verify(dir.path(), &root, &new_node_ca, &old_leaf),
        "leaf.pem: OK"
    );
    assert_eq!(
        verify(dir.path(), &root, &old_node_ca, &new_leaf),
        "leaf.pem: OK"
    );

    // The bundle round-trips the renewed set and stays consistent.
    let bytes = seal_bundle_with(&keys, &secret(), kdf()).unwrap();
    let loaded = open_bundle(&bytes, Some(&secret())).unwrap();
    assert_eq!(loaded.public.node_ca_der, new_node_ca);
    assert!(loaded.authenticated);
}

#[test]
fn pki_offline_root_stays_out_of_the_bundle_and_comes_back_for_renewal() {
    let t0 = OffsetDateTime::from_unix_timestamp(1_790_000_000).unwrap();
    let full = KeySet::generate(td(), t0, KeySetLifetimes::default()).unwrap();
    let root_key = full.root_ca.private_key().unwrap().pkcs8_der().to_vec();
    let mut keys = full.without_root_key();
    assert!(keys.root_ca.is_offline());
    assert!(keys.root_ca.private_key().is_none());

    for bytes in [
        seal_bundle_with(&keys, &secret(), kdf()).unwrap(),
        plaintext_bundle(&keys).unwrap(),
    ] {
        let doc: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(doc["rootKey"], "offline");
        assert!(doc["privateKeys"]["keys"].get("rootCa").is_none());
        let loaded = open_bundle(&bytes, Some(&secret())).unwrap();
        assert!(loaded.public.root_offline);
        let set = loaded.keys.unwrap();
        assert!(set.root_ca.is_offline());
        // Everything but certifying a CA works; certifying says what to do.
        leaf(&set, t0 + Duration::hours(1));
    }

    let refused = keys
        .renew_ca(
            RenewableCa::Node,
            t0 + Duration::days(1),
            Duration::days(730),
        )
        .unwrap_err();
    assert_eq!(refused, KeySetError::Ca(CaError::RootOffline));
    assert_eq!(
        refused.to_string(),
        "the root CA key is offline (kept out of the bundle by `pki init --offline-root`): pass --root-key FILE, the key file `pki init --offline-root` wrote"
    );

    // Another key is not the root's.
    let wrong = PrivateKey::generate(KeyRole::RootCa).unwrap();
    let err = KeySet::generate(td(), t0, KeySetLifetimes::default())
        .unwrap()
        .without_root_key()
        .with_root_key(wrong)
        .unwrap_err();
    assert!(
        matches!(err, KeySetError::Ca(CaError::KeyMismatch { .. })),
        "{err:?}"
    );

    let key = PrivateKey::from_pkcs8_der(KeyRole::RootCa, &root_key).unwrap();
    let mut keys = keys.with_root_key(key).unwrap();
    keys.renew_ca(
        RenewableCa::Node,
        t0 + Duration::days(1),
        Duration::days(730),
    )
    .unwrap();
    let keys = keys.without_root_key();
    let bytes = seal_bundle_with(&keys, &secret(), kdf()).unwrap();
    assert!(
        open_bundle(&bytes, Some(&secret()))
            .unwrap()
            .public
            .root_offline
    );
}

#[test]
fn pki_offline_root_flag_is_sealed() {
    let t0 = OffsetDateTime::from_unix_timestamp(1_790_000_000).unwrap();
    let keys = KeySet::generate(td(), t0, KeySetLifetimes::default())
        .unwrap()
        .without_root_key();
    let bytes = seal_bundle_with(&keys, &secret(), kdf()).unwrap();
    let mut doc: Value = serde_json::from_slice(&bytes).unwrap();
    doc.as_object_mut().unwrap().remove("rootKey");
    let edited = serde_json::to_vec(&doc).unwrap();
    assert_eq!(
        open_bundle(&edited, Some(&secret())).unwrap_err(),
        BundleError::PublicPartsChanged
    );
}

#[test]
fn pki_leaves_are_backdated_never_before_their_ca() {
    let t0 = OffsetDateTime::from_unix_timestamp(1_790_000_000).unwrap();
    let keys = KeySet::generate(td(), t0, KeySetLifetimes::default()).unwrap();
    // The CAs themselves are backdated at pki init.
    assert_eq!(keys.node_ca.not_before(), t0 - BACKDATE);
    let key = PrivateKey::generate(KeyRole::Node).unwrap();
    let csr = VerifiedCsr::verify(&build_csr(&key).unwrap()).unwrap();
    let later = t0 + Duration::hours(3);
    let issued = issue_node_certificate(&keys.node_ca, &csr, &decision(), later).unwrap();
    assert_eq!(issued.not_before, later - BACKDATE);
    // A leaf of the role's maximum keeps its span at the maximum (verifiers refuse more).
    assert_eq!(issued.not_after, later - BACKDATE + Duration::hours(24));
    // A shorter one counts its lifetime from issuance.
    let mut short = decision();
    short.requested_lifetime = Some(Duration::seconds(10));
    let issued = issue_node_certificate(&keys.node_ca, &csr, &short, later).unwrap();
    // ... and is backdated a tenth of it at most.
    assert_eq!(issued.not_before, later - Duration::seconds(1));
    assert_eq!(issued.not_after, later + Duration::seconds(10));
    // Right after the CA was made, notBefore stops at the CA's.
    let early = t0 - BACKDATE + Duration::minutes(1);
    let issued = issue_node_certificate(&keys.node_ca, &csr, &decision(), early).unwrap();
    assert_eq!(issued.not_before, keys.node_ca.not_before());
    assert_eq!(
        issued.not_after,
        keys.node_ca.not_before() + Duration::hours(24)
    );
}
