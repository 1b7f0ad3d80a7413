//! The PKI bundle's key derivation (issue 17 item 7: "the deployment secret is stretched by
//! HKDF alone"): new bundles derive the seal key with Argon2id and record its parameters;
//! bundles sealed before (HKDF-SHA256 alone, a fixture written by the old `bcctl pki init`)
//! still open; a wrong secret is refused with the exact error for both; parameters a file asks
//! for are bounded before anything is allocated.

use domain::pki::bundle::{open_bundle, seal_bundle, seal_bundle_with, BundleError};
use domain::pki::bundle_kdf::{Argon2idParams, BundleKdf};
use domain::pki::keyset::{KeySet, KeySetLifetimes};
use domain::pki::secret::DeploymentSecret;
use domain::pki::spiffe::TrustDomain;
use serde_json::{json, Value};
use time::OffsetDateTime;

const SECRET: &str = "a deployment secret that is long enough for the seal";
/// Small parameters, so that the tests stay fast (the default is 64 MiB, 3 passes).
const SMALL: Argon2idParams = Argon2idParams {
    memory_kib: 256,
    iterations: 1,
    parallelism: 1,
};

/// Written by `bcctl pki init --trust-domain old.example.com` of the build before issue 17
/// (HKDF-SHA256 alone), under [`OLD_SECRET`].
const OLD_BUNDLE: &[u8] = include_bytes!("data/pki/bundle-hkdf-sha256.json");
const OLD_SECRET: &str = "the deployment secret of a bundle sealed before argon2id";

const WRONG_SECRET_MESSAGE: &str = "INVALID_CONFIG: the PKI bundle does not open with this BC_DEPLOYMENT_SECRET: it was sealed under another secret (or its kdf or kdfParams were changed)";

fn key_set() -> KeySet {
    KeySet::generate(
        TrustDomain::new("compute.example.com").unwrap(),
        OffsetDateTime::from_unix_timestamp(1_790_000_000).unwrap(),
        KeySetLifetimes::default(),
    )
    .unwrap()
}

fn secret(s: &str) -> DeploymentSecret {
    DeploymentSecret::new(s).unwrap()
}

fn private_keys(bytes: &[u8]) -> Value {
    let doc: Value = serde_json::from_slice(bytes).unwrap();
    doc["privateKeys"].clone()
}

fn edit(bytes: &[u8], f: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut doc: Value = serde_json::from_slice(bytes).unwrap();
    f(&mut doc);
    serde_json::to_vec(&doc).unwrap()
}

#[test]
fn a_new_bundle_records_argon2id_and_its_default_parameters_and_opens() {
    let keys = key_set();
    let bytes = seal_bundle(&keys, &secret(SECRET)).unwrap();
    let private = private_keys(&bytes);
    assert_eq!(private["kdf"], json!("Argon2id"));
    assert_eq!(
        private["kdfParams"],
        json!({"memoryKib": 65536, "iterations": 3, "parallelism": 1})
    );
    let loaded = open_bundle(&bytes, Some(&secret(SECRET))).unwrap();
    assert!(loaded.authenticated);
    assert_eq!(
        loaded.kdf,
        Some(BundleKdf::Argon2id(Argon2idParams::DEFAULT))
    );
    assert_eq!(loaded.keys.expect("keys").pins(), keys.pins());
    // Without the secret, the KDF is still named (`bcctl pki show`).
    let public_only = open_bundle(&bytes, None).unwrap();
    assert_eq!(
        public_only.kdf,
        Some(BundleKdf::Argon2id(Argon2idParams::DEFAULT))
    );
}

#[test]
fn small_parameters_are_recorded_as_given_and_open() {
    let keys = key_set();
    let bytes = seal_bundle_with(&keys, &secret(SECRET), BundleKdf::Argon2id(SMALL)).unwrap();
    assert_eq!(
        private_keys(&bytes)["kdfParams"],
        json!({"memoryKib": 256, "iterations": 1, "parallelism": 1})
    );
    let loaded = open_bundle(&bytes, Some(&secret(SECRET))).unwrap();
    assert_eq!(loaded.kdf, Some(BundleKdf::Argon2id(SMALL)));
    assert_eq!(loaded.keys.expect("keys").pins(), keys.pins());
}

#[test]
fn an_old_hkdf_bundle_still_opens_and_says_so() {
    let private = private_keys(OLD_BUNDLE);
    assert_eq!(private["kdf"], json!("HKDF-SHA256"));
    assert!(private.get("kdfParams").is_none());
    let loaded = open_bundle(OLD_BUNDLE, Some(&secret(OLD_SECRET))).unwrap();
    assert!(loaded.authenticated, "the seal vouches for the public half");
    assert_eq!(loaded.kdf, Some(BundleKdf::HkdfSha256));
    let keys = loaded.keys.expect("keys");
    assert_eq!(keys.trust_domain.as_str(), "old.example.com");
    // The pins the old `bcctl pki init` printed for it.
    assert_eq!(
        keys.pins().node_ca.to_string(),
        "sha256/RTJUdkjCiw2wM27920H46Xatw99O80/XxFsjXRIb1U0="
    );
    assert_eq!(keys.pins(), loaded.public.pins().unwrap());
    assert_eq!(
        BundleKdf::HkdfSha256.describe(),
        "HKDF-SHA256 only (sealed before Argon2id; re-seal it)"
    );
    // The HKDF-only derivation is still written on request, and opens the same way.
    let again = seal_bundle_with(&keys, &secret(SECRET), BundleKdf::HkdfSha256).unwrap();
    assert_eq!(private_keys(&again)["kdf"], json!("HKDF-SHA256"));
    assert!(
        open_bundle(&again, Some(&secret(SECRET)))
            .unwrap()
            .authenticated
    );
}

#[test]
fn a_wrong_secret_is_refused_with_the_exact_error_for_both_kdfs() {
    let new = seal_bundle_with(&key_set(), &secret(SECRET), BundleKdf::Argon2id(SMALL)).unwrap();
    let wrong = secret("not the deployment secret, but long enough");
    for bytes in [&new[..], OLD_BUNDLE] {
        let e = open_bundle(bytes, Some(&wrong)).unwrap_err();
        assert_eq!(e, BundleError::WrongSecret);
        assert_eq!(e.to_string(), WRONG_SECRET_MESSAGE);
    }
}

#[test]
fn changed_parameters_do_not_open() {
    let bytes = seal_bundle_with(&key_set(), &secret(SECRET), BundleKdf::Argon2id(SMALL)).unwrap();
    let changed = edit(&bytes, |d| {
        d["privateKeys"]["kdfParams"]["iterations"] = json!(2);
    });
    assert_eq!(
        open_bundle(&changed, Some(&secret(SECRET))).unwrap_err(),
        BundleError::WrongSecret
    );
    // Downgrading an Argon2id bundle to HKDF-only does not open either.
    let downgraded = edit(&bytes, |d| {
        d["privateKeys"]["kdf"] = json!("HKDF-SHA256");
        d["privateKeys"]
            .as_object_mut()
            .unwrap()
            .remove("kdfParams");
    });
    assert_eq!(
        open_bundle(&downgraded, Some(&secret(SECRET))).unwrap_err(),
        BundleError::WrongSecret
    );
}

#[test]
fn a_file_cannot_ask_for_unbounded_memory_or_an_unknown_kdf() {
    let bytes = seal_bundle_with(&key_set(), &secret(SECRET), BundleKdf::Argon2id(SMALL)).unwrap();
    let huge = edit(&bytes, |d| {
        d["privateKeys"]["kdfParams"]["memoryKib"] = json!(u32::MAX);
    });
    // Refused before any secret is used, and before anything is allocated.
    for s in [None, Some(secret(SECRET))] {
        match open_bundle(&huge, s.as_ref()) {
            Err(BundleError::Malformed { field, reason }) => {
                assert_eq!(field, "privateKeys.kdfParams");
                assert_eq!(
                    reason,
                    "memoryKib 4294967295 is not between 8 (8 per lane) and 1048576"
                );
            }
            other => panic!("expected a malformed kdfParams, got {other:?}"),
        }
    }
    let unknown = edit(&bytes, |d| {
        d["privateKeys"]["kdf"] = json!("scrypt");
    });
    assert!(matches!(
        open_bundle(&unknown, None),
        Err(BundleError::Malformed {
            field: "privateKeys.kdf",
            ..
        })
    ));
    let missing = edit(&bytes, |d| {
        d["privateKeys"]
            .as_object_mut()
            .unwrap()
            .remove("kdfParams");
    });
    match open_bundle(&missing, None) {
        Err(BundleError::Malformed { field, reason }) => {
            assert_eq!(
                (field, reason.as_str()),
                ("privateKeys.kdf", "Argon2id without kdfParams")
            );
        }
        other => panic!("expected a malformed kdf, got {other:?}"),
    }
}
