//! `bcctl pki init` seals with Argon2id and `bcctl pki show` says which key derivation a bundle
//! uses: Argon2id with its parameters for a new bundle, HKDF-SHA256 for one sealed before issue
//! 17 (the fixture the domain tests open); `BC_PKI_ARGON2_MEMORY_KIB` and
//! `BC_PKI_ARGON2_ITERATIONS` set the cost a new bundle is sealed with, and are refused out of
//! bounds. (The suite sets both low for every other test: `support`; each test here says what
//! it runs with.)

use std::path::Path;
use std::process::{Command, Output};

use crate::support::bcctl_bin;

const SECRET: &str = "a deployment secret for the kdf cli test, long enough";
const OLD_SECRET: &str = "the deployment secret of a bundle sealed before argon2id";

const MEMORY: &str = "BC_PKI_ARGON2_MEMORY_KIB";
const PASSES: &str = "BC_PKI_ARGON2_ITERATIONS";

/// `bcctl args` with the secret and the cost variables given (`None`: unset).
fn run(dir: &Path, secret: &str, cost: [Option<&str>; 2], args: &[&str]) -> Output {
    let mut cmd = Command::new(bcctl_bin());
    cmd.current_dir(dir)
        .env_remove("BC_DEPLOYMENT_SECRET_FILE")
        .env("BC_DEPLOYMENT_SECRET", secret)
        .env_remove(MEMORY)
        .env_remove(PASSES);
    for (name, value) in [MEMORY, PASSES].into_iter().zip(cost) {
        if let Some(v) = value {
            cmd.env(name, v);
        }
    }
    cmd.args(args).output().expect("run bcctl")
}

/// `bcctl args` with the default cost, which must succeed and print JSON.
fn bcctl(dir: &Path, secret: &str, args: &[&str]) -> serde_json::Value {
    let out = run(dir, secret, [None, None], args);
    assert!(
        out.status.success(),
        "bcctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

#[test]
fn pki_show_names_the_key_derivation() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    bcctl(
        dir,
        SECRET,
        &[
            "pki",
            "init",
            "--trust-domain",
            "compute.example.com",
            "--out",
            "pki.json",
            "--json",
        ],
    );
    let shown = bcctl(
        dir,
        SECRET,
        &["pki", "show", "--file", "pki.json", "--json"],
    );
    assert_eq!(shown["kdf"], "Argon2id");
    assert_eq!(
        shown["kdfParams"],
        serde_json::json!({"memoryKib": 65536, "iterations": 3, "parallelism": 1})
    );
    assert_eq!(shown["publicAuthenticated"], true);

    let old = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../domain/tests/data/pki/bundle-hkdf-sha256.json");
    let shown = bcctl(
        dir,
        OLD_SECRET,
        &[
            "pki",
            "show",
            "--file",
            &old.display().to_string(),
            "--json",
        ],
    );
    assert_eq!(shown["kdf"], "HKDF-SHA256");
    assert_eq!(shown["kdfParams"], serde_json::Value::Null);
    assert_eq!(shown["publicAuthenticated"], true);
}

const INIT: &[&str] = &[
    "pki",
    "init",
    "--trust-domain",
    "compute.example.com",
    "--out",
    "pki.json",
    "--json",
];

#[test]
fn the_cost_variables_set_a_new_bundles_argon2id_parameters() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let out = run(dir, SECRET, [Some("2048"), Some("2")], INIT);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown = bcctl(
        dir,
        SECRET,
        &["pki", "show", "--file", "pki.json", "--json"],
    );
    assert_eq!(
        shown["kdfParams"],
        serde_json::json!({"memoryKib": 2048, "iterations": 2, "parallelism": 1})
    );
    assert_eq!(shown["publicAuthenticated"], true);
}

#[test]
fn a_cost_out_of_bounds_is_refused_before_any_key_is_made() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    for (cost, message) in [
        (
            [Some("4"), None],
            "BC_PKI_ARGON2_MEMORY_KIB / BC_PKI_ARGON2_ITERATIONS: privateKeys.kdfParams: \
             memoryKib 4 is not between 8 (8 per lane) and 1048576",
        ),
        (
            [None, Some("65")],
            "BC_PKI_ARGON2_MEMORY_KIB / BC_PKI_ARGON2_ITERATIONS: privateKeys.kdfParams: \
             iterations 65 is not between 1 and 64",
        ),
        (
            [Some("1 GiB"), None],
            "BC_PKI_ARGON2_MEMORY_KIB must be a whole number, got \"1 GiB\"",
        ),
    ] {
        let out = run(dir, SECRET, cost, INIT);
        assert_eq!(out.status.code(), Some(2), "{cost:?}");
        let error: serde_json::Value = serde_json::from_slice(&out.stderr).expect("JSON error");
        assert_eq!(error["error"]["message"], message, "{cost:?}");
        assert_eq!(error["error"]["exitCode"], 2, "{cost:?}");
        assert!(
            !dir.join("pki.json").exists(),
            "{cost:?}: a bundle was written"
        );
    }
}
