//! The operator CA in the key set and the bundle (issue 23): made by `generate`, absent from an
//! older bundle and added by `add_operator_ca` (once, with the root's key), round-tripped sealed
//! and plaintext, and refused when its certificate and key do not go together.

use domain::pki::bundle::{open_bundle, plaintext_bundle, seal_bundle_with, BundleError};
use domain::pki::keys::{KeyRole, PrivateKey};
use domain::pki::keyset::{KeySet, KeySetError, KeySetLifetimes};
use domain::pki::spiffe::TrustDomain;
use domain::pki::{Argon2idParams, BundleKdf, CaError, DeploymentSecret};
use serde_json::Value;
use time::{Duration, OffsetDateTime};

fn now() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_790_000_000).expect("time")
}

fn key_set() -> KeySet {
    KeySet::generate(
        TrustDomain::new("ops.example.com").expect("td"),
        now(),
        KeySetLifetimes::default(),
    )
    .expect("keys")
}

fn secret() -> DeploymentSecret {
    DeploymentSecret::new("a deployment secret that is long enough to pass").expect("secret")
}

fn small_kdf() -> BundleKdf {
    BundleKdf::Argon2id(Argon2idParams {
        memory_kib: 64,
        iterations: 1,
        parallelism: 1,
    })
}

/// A key set as a bundle written before issue 23 holds it: no operator CA.
fn old_key_set() -> KeySet {
    let mut keys = key_set();
    keys.operator_ca = None;
    keys
}

#[test]
fn generate_makes_an_operator_ca_under_the_root_that_round_trips_sealed_and_plaintext() {
    let keys = key_set();
    let ca = keys
        .operator_ca
        .as_ref()
        .expect("generate makes an operator CA");
    assert!(domain::pki::issued_by(
        ca.cert_der(),
        keys.root_ca.cert_der()
    ));
    assert!(ca.not_after() <= keys.root_ca.not_after());
    assert_eq!(ca.private_key().role(), KeyRole::OperatorCa);
    assert_eq!(
        keys.public_key(KeyRole::OperatorCa),
        Some(ca.public_key()),
        "the set's public key for the role"
    );
    let sealed = seal_bundle_with(&keys, &secret(), small_kdf()).expect("seal");
    let text = String::from_utf8(sealed.clone()).expect("utf8");
    assert!(text.contains("\"operatorCa\""), "the certificate is public");
    let opened = open_bundle(&sealed, Some(&secret())).expect("open");
    let back = opened.keys.expect("keys");
    let back_ca = back.operator_ca.as_ref().expect("operator CA read back");
    assert_eq!(back_ca.cert_der(), ca.cert_der());
    assert_eq!(
        back_ca.private_key().pkcs8_der(),
        ca.private_key().pkcs8_der()
    );
    assert_eq!(
        opened.public.operator_ca_der.as_deref(),
        Some(ca.cert_der())
    );
    assert_eq!(back.pins(), keys.pins());
    assert_eq!(
        opened.public.pins().expect("pins").operator_ca,
        Some(ca.public_key().pin())
    );
    // Without the secret, the public half carries the certificate.
    let public = open_bundle(&sealed, None).expect("public half");
    assert_eq!(
        public.public.operator_ca_der.as_deref(),
        Some(ca.cert_der())
    );

    let plain = plaintext_bundle(&keys).expect("plaintext");
    let back = open_bundle(&plain, None).expect("open").keys.expect("keys");
    assert_eq!(
        back.operator_ca.as_ref().map(|c| c.cert_der().to_vec()),
        Some(ca.cert_der().to_vec())
    );
}

#[test]
fn an_older_bundle_reads_without_one_and_add_operator_ca_adds_it_once() {
    let old = old_key_set();
    let bytes = seal_bundle_with(&old, &secret(), small_kdf()).expect("seal");
    assert!(!String::from_utf8_lossy(&bytes).contains("operatorCa"));
    let loaded = open_bundle(&bytes, Some(&secret())).expect("an older bundle opens");
    assert!(loaded.public.operator_ca_der.is_none());
    let mut keys = loaded.keys.expect("keys");
    assert!(keys.operator_ca.is_none());
    assert_eq!(keys.pins().operator_ca, None);
    assert!(
        !serde_json::to_string(&keys.pins())
            .expect("json")
            .contains("operatorCa"),
        "pki show prints no operator CA pin for a bundle without one"
    );

    keys.add_operator_ca(now(), Duration::days(730))
        .expect("added");
    let ca_der = keys.operator_ca.as_ref().expect("ca").cert_der().to_vec();
    assert!(domain::pki::issued_by(&ca_der, keys.root_ca.cert_der()));
    let err = keys
        .add_operator_ca(now(), Duration::days(730))
        .expect_err("second time refused");
    assert_eq!(err, KeySetError::OperatorCaPresent);
    assert_eq!(err.to_string(), "the bundle already has an operator CA");

    let rewritten = seal_bundle_with(&keys, &secret(), small_kdf()).expect("seal");
    let back = open_bundle(&rewritten, Some(&secret()))
        .expect("open")
        .keys
        .expect("keys");
    assert_eq!(
        back.operator_ca.as_ref().map(|c| c.cert_der().to_vec()),
        Some(ca_der)
    );
}

#[test]
fn add_operator_ca_needs_the_root_key() {
    let mut keys = old_key_set().without_root_key();
    let err = keys
        .add_operator_ca(now(), Duration::days(730))
        .expect_err("offline root");
    assert_eq!(err, KeySetError::Ca(CaError::RootOffline));
    assert_eq!(err.to_string(), CaError::RootOffline.to_string());
    assert!(err.to_string().contains("pass --root-key FILE"));
}

#[test]
fn an_operator_ca_certificate_without_its_key_or_a_foreign_one_is_refused() {
    let keys = key_set();
    let plain = plaintext_bundle(&keys).expect("plaintext");
    let edit = |f: &dyn Fn(&mut Value)| {
        let mut doc: Value = serde_json::from_slice(&plain).expect("json");
        f(&mut doc);
        serde_json::to_vec(&doc).expect("json")
    };
    let no_key = edit(&|doc| {
        doc["privateKeys"]["keys"]
            .as_object_mut()
            .expect("keys")
            .remove("operatorCa");
    });
    match open_bundle(&no_key, None) {
        Err(BundleError::Malformed { field, reason }) => {
            assert_eq!(field, "privateKeys.operatorCa");
            assert_eq!(
                reason,
                "missing: the bundle has an operator CA certificate but not its key"
            );
        }
        other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
    }
    let no_cert = edit(&|doc| {
        doc["certificates"]
            .as_object_mut()
            .expect("certs")
            .remove("operatorCa");
    });
    assert!(matches!(
        open_bundle(&no_cert, None),
        Err(BundleError::Malformed {
            field: "privateKeys.operatorCa",
            ..
        })
    ));

    // Another deployment's operator CA (same trust domain, another root) is not this root's.
    let other = key_set();
    let foreign = other.operator_ca.expect("ca");
    let foreign_cert = domain::pki::pem_encode("CERTIFICATE", foreign.cert_der());
    let foreign_key = domain::pki::pem_encode("PRIVATE KEY", foreign.private_key().pkcs8_der());
    let swapped = edit(&|doc| {
        doc["certificates"]["operatorCa"] = Value::String(foreign_cert.clone());
        doc["privateKeys"]["keys"]["operatorCa"] = Value::String(foreign_key.clone());
    });
    match open_bundle(&swapped, None) {
        Err(BundleError::Keys(KeySetError::NotIssuedByRoot(name))) => {
            assert_eq!(name, "operator CA")
        }
        other => panic!("expected NotIssuedByRoot, got {:?}", other.map(|_| ())),
    }

    // A key that does two jobs: the node CA's key, certified by the root as the operator CA.
    let node_key =
        PrivateKey::from_pkcs8_der(KeyRole::OperatorCa, keys.node_ca.private_key().pkcs8_der())
            .expect("key");
    let reused = keys
        .root_ca
        .issue_operator_ca(node_key, now(), Duration::days(1))
        .expect("ca");
    let keys_again = KeySet::from_parts(
        keys.trust_domain.clone(),
        keys.root_ca,
        keys.node_ca,
        keys.serving_ca,
        keys.join_signing,
        keys.join_encryption,
        keys.audit_signing,
        keys.command_signing_root,
    )
    .expect("parts");
    assert_eq!(
        keys_again.with_operator_ca(reused).map(|_| ()),
        Err(KeySetError::KeyReused {
            first: "node CA key",
            second: "operator CA key"
        })
    );
}
