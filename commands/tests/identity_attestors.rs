//! The attestor registry's wiring and the identity configuration's attestor settings: the keys
//! a deployment derives for its attestors, what each configured attestor is given, which
//! built-ins run without a table, the pending-join retry hint (moved from unit tests in
//! `src/identity/`, so the crate needs no unit-test build: issue 39).

use std::path::Path;
use std::sync::{Arc, Mutex};

use commands::identity::attestors::{
    deployment_key, hkdf_sha256_32, tpm_challenge_key, AttestorRegistry, BUILTIN_IDS, FACTORIES,
    TPM_CHALLENGE_INFO,
};
use commands::identity::{parse_pending_retry, IdentityConfig};
use domain::attest::{AnyAttestor, AttestorConfig, Configured, FromDeployment};
use domain::pki::{KeySet, KeySetLifetimes, TrustDomain};

fn keys() -> KeySet {
    let td = TrustDomain::new("example.org").unwrap();
    KeySet::generate(
        td,
        time::OffsetDateTime::now_utc(),
        KeySetLifetimes::default(),
    )
    .unwrap()
}

/// Keeps the key the deployment derived for it under `probe`, and the node CA it was given.
#[derive(Debug, Default)]
struct Probe(Mutex<Option<([u8; 32], Vec<u8>)>>);

impl AttestorConfig for Probe {
    fn id(&self) -> &str {
        "probe"
    }
    fn attestor(&self, from: &FromDeployment<'_>) -> Result<Arc<dyn AnyAttestor>, String> {
        let seen = ((from.derive_key)(b"probe"), from.node_ca_der.to_vec());
        *self.0.lock().unwrap() = Some(seen);
        (from.read_file)(Path::new("/etc/probe"))?;
        Err("the probe read a file that is not there".into())
    }
}

#[test]
fn the_tpm_challenge_key_is_the_one_derived_before_attestors_built_themselves() {
    // HKDF-SHA256, no salt, over the encryption key's PKCS#8, info "bc tpm challenge state
    // v1" (ring's HKDF here, a second implementation): challenge states sealed before still
    // open.
    struct Len;
    impl ring::hkdf::KeyType for Len {
        fn len(&self) -> usize {
            32
        }
    }
    let keys = keys();
    let prk = ring::hkdf::Salt::new(ring::hkdf::HKDF_SHA256, &[])
        .extract(keys.join_encryption.private_key().pkcs8_der());
    let mut want = [0u8; 32];
    prk.expand(&[b"bc tpm challenge state v1"], Len)
        .unwrap()
        .fill(&mut want)
        .unwrap();
    assert_eq!(tpm_challenge_key(&keys), want);
    assert_eq!(deployment_key(&keys, TPM_CHALLENGE_INFO), want);
}

#[test]
fn configured_attestors_get_the_deployments_keys_and_its_reader() {
    let keys = keys();
    let probe = Arc::new(Probe::default());
    let configured = [Configured::Config(probe.clone())];
    let read = |p: &Path| Err(format!("{}: no such file", p.display()));
    let err = AttestorRegistry::configured(&configured, &keys, &read).err();
    assert_eq!(err.as_deref(), Some("/etc/probe: no such file"));
    let seen = probe.0.lock().unwrap().clone().expect("built");
    assert_eq!(seen.0, deployment_key(&keys, b"probe"));
    assert_eq!(seen.1, keys.node_ca.cert_der());
}

#[test]
fn without_tables_every_built_in_but_tpm_and_cloud_iid_runs() {
    let keys = keys();
    let configured = domain::attest::configure(FACTORIES, &Default::default()).unwrap();
    let none = |_: &Path| -> Result<Vec<u8>, String> { unreachable!("no file named") };
    let registry = AttestorRegistry::configured(&configured, &keys, &none).unwrap();
    assert_eq!(
        registry.ids(),
        ["join-token", "x509pop", "provisioned", "discovery"]
    );
    let td = keys.trust_domain.clone();
    let mut builtin = AttestorRegistry::builtin_for(&keys, &IdentityConfig::new(td)).ids();
    builtin.sort();
    let mut configured = registry.ids();
    configured.sort();
    assert_eq!(builtin, configured);
    assert_eq!(
        BUILTIN_IDS,
        [
            "join-token",
            "x509pop",
            "provisioned",
            "tpm",
            "discovery",
            "cloud-iid"
        ]
    );
    assert_eq!(
        AttestorRegistry::builtin().ids(),
        ["join-token", "provisioned"]
    );
    let table = serde_json::json!({ "ek_roots": ["/r.pem"] });
    let err = AttestorRegistry::empty()
        .register_factory(&domain::attest::tpm::FACTORY, Some(&table))
        .err();
    assert!(err.is_some_and(|e| e.starts_with("the tpm attestor needs what the deployment")));
}

#[test]
fn hkdf_matches_rfc_5869_test_case_1() {
    // RFC 5869 A.1, the first 32 bytes of its OKM.
    let ikm = [0x0b; 22];
    let salt: Vec<u8> = (0x00..=0x0c).collect();
    let info: Vec<u8> = (0xf0..=0xf9).collect();
    assert_eq!(
        hex::encode(hkdf_sha256_32(&salt, &ikm, &info)),
        "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf"
    );
}

#[test]
fn the_x509pop_grace_and_the_ramdisk_lifetime_follow_their_attestors_tables() {
    let td = domain::pki::TrustDomain::new("example.org").unwrap();
    let mut tables = domain::attest::AttestorTables::new();
    tables.insert("x509pop".into(), serde_json::json!({ "grace": "2d" }));
    tables.insert("discovery".into(), serde_json::json!({ "cert_ttl": "30m" }));
    let factories = FACTORIES;
    let configured = domain::attest::configure(factories, &tables).unwrap();
    let config = IdentityConfig::new(td).with_attestor_settings(&configured);
    assert_eq!(config.x509pop_grace.as_secs(), 2 * 86_400);
    assert_eq!(
        config.discovery.ramdisk_lifetime(),
        time::Duration::minutes(30)
    );
}

#[test]
fn the_pending_retry_hint_defaults_to_30_s_and_takes_1_to_3600() {
    assert_eq!(parse_pending_retry(None), Ok(30));
    assert_eq!(parse_pending_retry(Some("1")), Ok(1));
    assert_eq!(parse_pending_retry(Some(" 3600 ")), Ok(3600));
    for bad in ["0", "3601", "-1", "1.5", "", "30s"] {
        assert_eq!(
            parse_pending_retry(Some(bad)),
            Err(format!(
                "must be whole seconds from 1 to 3600, got {bad:?}; unset it for the \
                 default of 30 s"
            )),
            "{bad:?}"
        );
    }
}
