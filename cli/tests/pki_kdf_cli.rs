//! `bcctl pki init` seals with Argon2id and `bcctl pki show` says which key derivation a bundle
//! uses: Argon2id with its parameters for a new bundle, HKDF-SHA256 for one sealed before issue
//! 17 (the fixture the domain tests open).

use std::path::Path;
use std::process::Command;

use crate::support::bcctl_bin;

const SECRET: &str = "a deployment secret for the kdf cli test, long enough";
const OLD_SECRET: &str = "the deployment secret of a bundle sealed before argon2id";

fn bcctl(dir: &Path, secret: &str, args: &[&str]) -> serde_json::Value {
    let out = Command::new(bcctl_bin())
        .current_dir(dir)
        .env_remove("BC_DEPLOYMENT_SECRET_FILE")
        .env("BC_DEPLOYMENT_SECRET", secret)
        .args(args)
        .output()
        .expect("run bcctl");
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
