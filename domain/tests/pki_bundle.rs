//! The PKI bundle: sealed and plaintext round trips, and each refusal with its typed error.

use domain::pki::bundle::{open_bundle, plaintext_bundle, seal_bundle, BundleError, Protection};
use domain::pki::keys::KeyRole;
use domain::pki::keyset::{KeySet, KeySetLifetimes};
use domain::pki::secret::{DeploymentSecret, SecretError, DEPLOYMENT_SECRET_ENV};
use domain::pki::spiffe::TrustDomain;
use serde_json::Value;
use time::OffsetDateTime;

const SECRET: &str = "correct horse battery staple, long enough for sure";

fn now() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_790_000_000).unwrap()
}

fn key_set() -> KeySet {
    KeySet::generate(
        TrustDomain::new("compute.example.com").unwrap(),
        now(),
        KeySetLifetimes::default(),
    )
    .unwrap()
}

fn secret() -> DeploymentSecret {
    DeploymentSecret::new(SECRET).unwrap()
}

fn edit(bytes: &[u8], f: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut doc: Value = serde_json::from_slice(bytes).unwrap();
    f(&mut doc);
    serde_json::to_vec(&doc).unwrap()
}

#[test]
fn pki_sealed_round_trip_authenticates_and_restores_every_key() {
    let keys = key_set();
    let bytes = seal_bundle(&keys, &secret()).unwrap();
    let text = std::str::from_utf8(&bytes).unwrap();
    assert!(!text.contains("PRIVATE KEY"), "sealed bundle leaks a key");

    let loaded = open_bundle(&bytes, Some(&secret())).unwrap();
    assert_eq!(loaded.protection, Protection::Sealed);
    assert!(loaded.authenticated);
    let back = loaded.keys.expect("keys");
    assert_eq!(back.pins(), keys.pins());
    assert_eq!(back.trust_domain, keys.trust_domain);
    for role in KeyRole::KEY_SET {
        assert_eq!(back.public_key(role), keys.public_key(role), "{role}");
    }
    assert_eq!(
        back.node_ca.private_key().pkcs8_der(),
        keys.node_ca.private_key().pkcs8_der()
    );
    assert_eq!(loaded.public.pins().unwrap(), keys.pins());

    // Without the secret: the public half only, not authenticated.
    let public_only = open_bundle(&bytes, None).unwrap();
    assert!(!public_only.authenticated);
    assert!(public_only.keys.is_none());
    assert_eq!(public_only.public.pins().unwrap(), keys.pins());

    // Reformatting the JSON is harmless.
    let compact = edit(&bytes, |_| {});
    assert_ne!(compact, bytes);
    assert!(
        open_bundle(&compact, Some(&secret()))
            .unwrap()
            .authenticated
    );
}

#[test]
fn pki_plaintext_round_trip_is_marked_and_never_authenticated() {
    let keys = key_set();
    let bytes = plaintext_bundle(&keys).unwrap();
    let doc: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(doc["privateKeys"]["mode"], "plaintext");
    assert_eq!(doc["format"], "bc-pki-bundle");
    assert_eq!(doc["version"], 1);
    for secret in [None, Some(secret())] {
        let loaded = open_bundle(&bytes, secret.as_ref()).unwrap();
        assert_eq!(loaded.protection, Protection::Plaintext);
        assert!(!loaded.authenticated);
        assert_eq!(loaded.keys.unwrap().pins(), keys.pins());
    }
}

#[test]
fn pki_wrong_secret_is_refused() {
    let bytes = seal_bundle(&key_set(), &secret()).unwrap();
    let other = DeploymentSecret::new("another secret that is also long enough").unwrap();
    assert_eq!(
        open_bundle(&bytes, Some(&other)).unwrap_err(),
        BundleError::WrongSecret
    );
}

#[test]
fn pki_short_or_missing_secret_is_refused_naming_the_variable() {
    let err = DeploymentSecret::new("only-31-characters-long-secret!").unwrap_err();
    assert_eq!(err, SecretError::TooShort { chars: 31 });
    assert!(err.to_string().contains(DEPLOYMENT_SECRET_ENV));
    assert_eq!(DEPLOYMENT_SECRET_ENV, "BC_DEPLOYMENT_SECRET");
    let missing = DeploymentSecret::from_env_value(Some("")).unwrap_err();
    assert_eq!(missing, SecretError::Missing);
    assert!(missing.to_string().contains("BC_DEPLOYMENT_SECRET"));
}

#[test]
fn pki_changed_public_key_or_certificate_is_refused() {
    let keys = key_set();
    let bytes = seal_bundle(&keys, &secret()).unwrap();

    // Someone without the secret swaps the audit key for their own.
    let pem = {
        let doc: Value = serde_json::from_slice(&plaintext_bundle(&key_set()).unwrap()).unwrap();
        doc["publicKeys"]["auditSigning"].clone()
    };
    let swapped = edit(&bytes, |doc| doc["publicKeys"]["auditSigning"] = pem);
    assert_eq!(
        open_bundle(&swapped, Some(&secret())).unwrap_err(),
        BundleError::PublicPartsChanged
    );
    // Without the secret it still reads, unauthenticated: the caller must warn.
    assert!(!open_bundle(&swapped, None).unwrap().authenticated);

    // Or adds another command-signing root (swaps the certificate).
    let other = plaintext_bundle(&key_set()).unwrap();
    let other: Value = serde_json::from_slice(&other).unwrap();
    let swapped = edit(&bytes, |doc| {
        doc["certificates"]["commandSigningRoot"] =
            other["certificates"]["commandSigningRoot"].clone()
    });
    assert_eq!(
        open_bundle(&swapped, Some(&secret())).unwrap_err(),
        BundleError::PublicPartsChanged
    );
}

#[test]
fn pki_changed_trust_domain_is_refused() {
    let bytes = seal_bundle(&key_set(), &secret()).unwrap();
    let moved = edit(&bytes, |doc| {
        doc["trustDomain"] = "staging.example.com".into()
    });
    assert_eq!(
        open_bundle(&moved, Some(&secret())).unwrap_err(),
        BundleError::SealBroken {
            trust_domain: "staging.example.com".into()
        }
    );
}

#[test]
fn pki_tampered_ciphertext_unknown_fields_and_garbage_are_refused() {
    let bytes = seal_bundle(&key_set(), &secret()).unwrap();
    let tampered = edit(&bytes, |doc| {
        let ct = doc["privateKeys"]["ciphertext"]
            .as_str()
            .unwrap()
            .to_owned();
        let flipped = if ct.starts_with('A') { "B" } else { "A" };
        doc["privateKeys"]["ciphertext"] = format!("{flipped}{}", &ct[1..]).into();
    });
    assert!(matches!(
        open_bundle(&tampered, Some(&secret())).unwrap_err(),
        BundleError::SealBroken { .. }
    ));
    let extra = edit(&bytes, |doc| doc["extraRoot"] = "x".into());
    assert!(matches!(
        open_bundle(&extra, Some(&secret())).unwrap_err(),
        BundleError::Json(_)
    ));
    assert!(matches!(
        open_bundle(b"not json", None).unwrap_err(),
        BundleError::Json(_)
    ));
    let v2 = edit(&bytes, |doc| doc["version"] = 2.into());
    assert!(matches!(
        open_bundle(&v2, None).unwrap_err(),
        BundleError::UnsupportedFormat { version: 2, .. }
    ));
}

#[test]
fn pki_plaintext_with_mismatched_key_is_refused() {
    let a = plaintext_bundle(&key_set()).unwrap();
    let b: Value = serde_json::from_slice(&plaintext_bundle(&key_set()).unwrap()).unwrap();
    let mixed = edit(&a, |doc| {
        doc["privateKeys"]["keys"]["joinSigning"] = b["privateKeys"]["keys"]["joinSigning"].clone()
    });
    assert!(matches!(
        open_bundle(&mixed, None).unwrap_err(),
        BundleError::Malformed { .. }
    ));
    let mixed_ca = edit(&a, |doc| {
        doc["privateKeys"]["keys"]["nodeCa"] = b["privateKeys"]["keys"]["nodeCa"].clone()
    });
    assert!(matches!(
        open_bundle(&mixed_ca, None).unwrap_err(),
        BundleError::Keys(_)
    ));
}

/// Moves the parts out of a key set, for `KeySet::from_parts` with one of them replaced.
fn assemble(
    mut set: KeySet,
    change: impl FnOnce(&mut KeySet),
) -> Result<KeySet, domain::pki::keyset::KeySetError> {
    change(&mut set);
    let KeySet {
        trust_domain,
        root_ca,
        node_ca,
        serving_ca,
        join_signing,
        join_encryption,
        audit_signing,
        command_signing_root,
        operator_ca: _,
        ssh_ca: _,
    } = set;
    KeySet::from_parts(
        trust_domain,
        root_ca,
        node_ca,
        serving_ca,
        join_signing,
        join_encryption,
        audit_signing,
        command_signing_root,
    )
}

#[test]
fn pki_key_set_refuses_a_reused_key_a_foreign_intermediate_and_one_outliving_the_root() {
    use domain::pki::keys::PrivateKey;
    use domain::pki::keyset::KeySetError;
    use domain::pki::RootCa;

    // As generated, the parts assemble.
    assemble(key_set(), |_| {}).expect("a generated set assembles");

    // One key pair doing two jobs (the audit key is the JoinService signing key).
    let reused = assemble(key_set(), |s| {
        s.audit_signing =
            PrivateKey::from_pkcs8_der(KeyRole::AuditSigning, s.join_signing.pkcs8_der()).unwrap();
    })
    .unwrap_err();
    assert!(
        matches!(
            reused,
            KeySetError::KeyReused {
                first: "JoinService signing key",
                second: "audit signing key"
            }
        ),
        "{reused:?}"
    );

    // A node CA certified by another deployment's root.
    let other = key_set();
    let foreign = assemble(key_set(), |s| s.node_ca = other.node_ca).unwrap_err();
    assert!(
        matches!(foreign, KeySetError::NotIssuedByRoot("node CA")),
        "{foreign:?}"
    );

    // A root re-issued with the same key for one year, under a two-year serving CA.
    let short = assemble(key_set(), |s| {
        let key = PrivateKey::from_pkcs8_der(
            KeyRole::RootCa,
            s.root_ca.private_key().unwrap().pkcs8_der(),
        )
        .unwrap();
        s.root_ca =
            RootCa::generate(&s.trust_domain, key, now(), time::Duration::days(365)).unwrap();
    })
    .unwrap_err();
    assert!(
        matches!(short, KeySetError::OutlivesRoot("node CA")),
        "{short:?}"
    );
}
