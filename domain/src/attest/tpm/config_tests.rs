//! `[attestors.tpm]` read, its refusals naming their keys, and the attestor built with what the
//! deployment gives (the EK root files through the shell's reader, the derived challenge key).

use std::path::Path;

use super::*;
use crate::attest::factory::toml_table;
use crate::pki::TrustDomain;

/// Serves `/root.pem` (two CERTIFICATE blocks) and nothing else.
fn read(path: &Path) -> Result<Vec<u8>, String> {
    match path.to_str() {
        Some("/root.pem") => Ok(
            b"-----BEGIN CERTIFICATE-----\nAQID\n-----END CERTIFICATE-----\n\
              -----BEGIN CERTIFICATE-----\nBAU=\n-----END CERTIFICATE-----\n"
                .to_vec(),
        ),
        _ => Err("No such file or directory (os error 2)".to_owned()),
    }
}

/// The deployment's side: `read`, and a key that says which `info` it was derived under.
fn with_deployment<R>(f: impl FnOnce(&FromDeployment<'_>) -> R) -> R {
    let td = TrustDomain::new("example.org").unwrap();
    let derive = |info: &[u8]| {
        let mut key = [0u8; 32];
        let n = info.len().min(32);
        key[..n].copy_from_slice(&info[..n]);
        key
    };
    f(&FromDeployment {
        trust_domain: &td,
        node_ca_der: &[],
        derive_key: &derive,
        read_file: &read,
    })
}

fn settings(text: &str) -> Result<Option<TpmSettings>, String> {
    TpmSettings::from_table(toml_table(text, "tpm")?.as_ref())
}

#[test]
fn the_tpm_table_is_read_whole_and_absent_means_no_tpm_attestor() {
    let der_a = vec![1u8, 2, 3];
    let der_b = vec![4u8, 5];
    let digest = "ab".repeat(32);
    let text = format!(
        "[tpm]\nek_roots = [\"/root.pem\"]\npcr_policy = {{ \"7\" = [\"{digest}\"], \"0\" = \
         [\"{}\"] }}\nnode_key = \"any\"\nchallenge_ttl = \"90s\"\n\
         [tpm.enrollment]\ntenant = \"acme\"\nsite = \"par1\"\npool = \"edge\"\n",
        digest.to_uppercase()
    );
    let t = with_deployment(|from| settings(&text).unwrap().unwrap().config(from)).unwrap();
    assert_eq!(t.ek_roots, vec![der_a, der_b]);
    assert_eq!(
        t.pcr_policy.into_iter().collect::<Vec<_>>(),
        vec![(0, vec![[0xab; 32]]), (7, vec![[0xab; 32]])]
    );
    assert_eq!(t.node_key, NodeKeyPolicy::Any);
    assert_eq!(t.challenge_ttl, Duration::from_secs(90));
    assert_eq!(
        t.enrollment,
        Some(Placement {
            tenant_id: "acme".into(),
            site_id: "par1".into(),
            pool_id: "edge".into(),
        })
    );
    let minimal = "[tpm]\nek_roots = [\"/root.pem\"]\n";
    let t = settings(minimal).unwrap().unwrap();
    assert_eq!(
        (
            t.node_key,
            t.challenge_ttl,
            t.enrollment.clone(),
            t.pcr_policy.len()
        ),
        (NodeKeyPolicy::Certified, MAX_CHALLENGE_TTL, None, 0)
    );
    // The challenge key is the deployment's, derived under the tpm attestor's own info.
    let config = with_deployment(|from| t.config(from)).unwrap();
    assert_eq!(&config.challenge_key[..25], TPM_CHALLENGE_INFO);
    assert!(TpmSettings::from_table(None).unwrap().is_none());
    assert!(settings("[x509pop]\n").unwrap().is_none());
}

#[test]
fn each_bad_key_is_refused_by_its_name() {
    let with_root = |rest: &str| settings(&format!("[tpm]\nek_roots = [\"/root.pem\"]\n{rest}"));
    let cases = [
        (
            settings("[tpm]\npcr_policy = {}\n"),
            "attestors.tpm.ek_roots: is required",
        ),
        (
            with_root("pcr_policy = { \"7\" = [\"abcd\"] }\n"),
            "attestors.tpm.pcr_policy: PCR 7: \"abcd\" is not a SHA-256 value (64 hex digits)",
        ),
        (
            with_root("pcr_policy = { \"24\" = [\"abcd\"] }\n"),
            "attestors.tpm.pcr_policy: PCR \"24\" is not an index from 0 to 23",
        ),
        (
            with_root("pcr_policy = { \"7\" = [] }\n"),
            "attestors.tpm.pcr_policy: PCR 7 lists no value",
        ),
        (
            with_root("challenge_ttl = \"6m\"\n"),
            "attestors.tpm.challenge_ttl: 360s is not above 0 and at most 300s",
        ),
        (
            with_root("challenge_ttl = \"soon\"\n"),
            "attestors.tpm.challenge_ttl: \"soon\" does not start with a whole number",
        ),
        (
            with_root("node_key = \"sometimes\"\n"),
            "attestors.tpm.node_key: \"sometimes\" is not \"certified\" or \"any\"",
        ),
        (
            with_root("grace = \"1d\"\n"),
            "[attestors.tpm]: unknown field `grace`",
        ),
    ];
    for (got, want) in cases {
        let err = got.unwrap_err();
        assert!(err.starts_with(want), "{err:?} is not {want:?}");
    }
    let missing = settings("[tpm]\nek_roots = [\"/missing.pem\"]\n")
        .unwrap()
        .unwrap();
    let err = with_deployment(|from| missing.config(from)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "attestors.tpm.ek_roots: /missing.pem: cannot read the EK root: No such file or \
         directory (os error 2)"
    );
}

#[test]
fn the_factory_builds_the_attestor_only_with_the_table() {
    let none =
        (crate::attest::tpm::FACTORY.build)(&crate::attest::AttestorSetup { table: None }).unwrap();
    assert!(none.is_none());
    let table = toml_table("[tpm]\nek_roots = [\"/root.pem\"]\n", "tpm").unwrap();
    let configured = (crate::attest::tpm::FACTORY.build)(&crate::attest::AttestorSetup {
        table: table.as_ref(),
    })
    .unwrap()
    .expect("configured");
    assert!(configured.config::<TpmSettings>().is_some());
    let attestor = with_deployment(|from| configured.attestor(from)).unwrap();
    assert_eq!(attestor.id(), "tpm");
    assert_eq!(crate::attest::tpm::FACTORY.lists[0].name, "tpm-allow");
}
