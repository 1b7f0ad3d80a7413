//! `bcctl pki trust-version` and `bcctl pki rotate-command-root` through the real binary, on a
//! throwaway SQLite store and a plaintext bundle (the decisions themselves are
//! `domain::trust_bundle`'s, tested on both backends in commands' suite). The first bundle is
//! published in-process with `commands::quorum::settle_trust_bundle` (what `bcctl serve` does at
//! start).

use std::path::{Path, PathBuf};
use std::process::Output;

use commands::quorum::{settle_trust_bundle, BundleConfig};
use commands::SystemClock;
use domain::quorum::{ApproverKey, ApproverSet, ApproverSetOffer, TrustDomain};
use events::store::testkit::TestDb;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::support::{bcctl_at, ok_json};

const TD: &str = "trust.example.com";

fn refused(out: &Output, code: i32, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{err}");
    assert!(err.contains(needle), "{err:?} lacks {needle:?}");
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

struct Deployment {
    _dir: tempfile::TempDir,
    dir: PathBuf,
    pki: String,
    db: TestDb,
}

async fn deployment() -> Deployment {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().to_path_buf();
    let pki = d.join("pki.json").display().to_string();
    let db = TestDb::sqlite().expect("sqlite");
    db.store().await.expect("migrate");
    ok_json(
        &d,
        db.url(),
        &[
            "pki",
            "init",
            "--trust-domain",
            TD,
            "--plaintext",
            "--out",
            &pki,
            "--json",
        ],
    );
    Deployment {
        _dir: dir,
        dir: d,
        pki,
        db,
    }
}

fn root_der(pki: &str) -> Vec<u8> {
    let bytes = std::fs::read(pki).expect("read bundle");
    let loaded = domain::pki::open_bundle(&bytes, None).expect("open");
    loaded
        .keys
        .expect("plaintext keys")
        .command_signing_root
        .cert_der()
        .to_vec()
}

async fn publish(d: &Deployment) {
    let root = root_der(&d.pki);
    let store = d.db.store().await.expect("store");
    settle_trust_bundle(
        &store,
        &SystemClock,
        &BundleConfig {
            trust_domain: TrustDomain::new(TD).expect("td"),
            command_signing_roots: vec![root.clone()],
            active_root: root,
            approvers: ApproverSetOffer {
                set: ApproverSet::none(),
                epoch: 0,
                signatures: vec![],
            },
            floor: 0,
            pin: None,
        },
    )
    .await
    .expect("settle");
}

fn sha(der: &[u8]) -> String {
    hex::encode(Sha256::digest(der))
}

fn run(d: &Deployment, args: &[&str]) -> Output {
    let mut all: Vec<&str> = args.to_vec();
    all.extend_from_slice(&["--pki", &d.pki]);
    bcctl_at(&d.dir, d.db.url(), &all)
}

fn run_json(d: &Deployment, args: &[&str]) -> Value {
    let out = run(d, args);
    assert!(
        out.status.success(),
        "bcctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trust_version_is_not_found_before_anything_is_published() {
    let d = deployment().await;
    refused(
        &run(&d, &["pki", "trust-version", "--json"]),
        1,
        "NOT_FOUND: no trust bundle is published yet",
    );
}

fn keygen(d: &Path, name: &str) -> ApproverKey {
    let key = d.join(name);
    ok_json(
        d,
        "unused://",
        &[
            "batch",
            "keygen",
            "--out",
            key.to_str().expect("path"),
            "--json",
        ],
    );
    let text = std::fs::read_to_string(d.join(format!("{name}.pub"))).expect("pub");
    let body: String = text.lines().filter(|l| !l.starts_with("-----")).collect();
    use base64::Engine;
    let der = base64::engine::general_purpose::STANDARD
        .decode(body)
        .expect("base64");
    ApproverKey::from_spki(&der).expect("spki")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trust_version_compares_the_configured_quorum_with_the_published_bundle() {
    let d = deployment().await;
    publish(&d).await;
    let same = run_json(&d, &["pki", "trust-version", "--json"]);
    assert_eq!(same["version"], 1);
    assert_eq!(same["configurationMatches"], true);
    assert_eq!(same["nextVersion"], 1);
    assert_eq!(same["approverSetEpoch"], 0);
    assert_eq!(same["approverSetSha256"], Value::Null);
    assert_eq!(same["quorumChanged"], false);
    assert_eq!(same["connectedDaemons"], 0);
    assert_eq!(same["behind"], 0);
    assert!(same.get("signQuorumForEpoch").is_none(), "{same}");
    assert!(same.get("publishedApproverSetSha256").is_none(), "{same}");

    let alice = keygen(&d.dir, "alice.pem");
    let bob = keygen(&d.dir, "bob.pem");
    let config = d.dir.join("serve.toml");
    std::fs::write(
        &config,
        "[quorum]\napprover_keys = [\"alice.pem.pub\", \"bob.pem.pub\"]\nthreshold = 1\n",
    )
    .expect("config");
    let set = ApproverSet::new(vec![alice, bob], 1, vec![], 0).expect("set");
    let changed = run_json(
        &d,
        &[
            "pki",
            "trust-version",
            "--json",
            "--config",
            config.to_str().expect("path"),
        ],
    );
    assert_eq!(changed["version"], 1);
    assert_eq!(changed["configurationMatches"], false);
    assert_eq!(changed["nextVersion"], 2);
    assert_eq!(changed["approverSetSha256"], set.digest().to_hex());
    assert_eq!(changed["publishedApproverSetSha256"], Value::Null);
    assert_eq!(changed["quorumChanged"], true);
    assert_eq!(changed["signQuorumForEpoch"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotate_command_root_runs_add_switch_drop_in_order() {
    let d = deployment().await;
    let old = sha(&root_der(&d.pki));
    refused(
        &run(&d, &["pki", "rotate-command-root", "--stage", "add"]),
        1,
        "NOT_FOUND: no trust bundle is published yet",
    );
    publish(&d).await;
    refused(
        &run(&d, &["pki", "rotate-command-root", "--stage", "switch"]),
        1,
        "INVALID_STATE: invalid state: switch comes after add (`bcctl pki rotate-command-root --stage add`): the rotation is at stage none",
    );
    refused(
        &run(&d, &["pki", "rotate-command-root", "--stage", "drop"]),
        1,
        "INVALID_STATE: invalid state: drop comes after switch (`bcctl pki rotate-command-root --stage switch`): the rotation is at stage none",
    );

    let added = run_json(
        &d,
        &["pki", "rotate-command-root", "--stage", "add", "--json"],
    );
    assert_eq!(added["version"], 2);
    assert_eq!(added["rotationStage"], "added");
    assert_eq!(added["activeRootSha256"], old);
    let roots = added["roots"].as_array().expect("roots");
    assert_eq!(roots.len(), 2, "{added}");
    let new = roots
        .iter()
        .find(|r| r["sha256"] != old)
        .expect("the new root")["sha256"]
        .as_str()
        .expect("hex")
        .to_string();
    // The bundle holds both: its own root unchanged, the new one beside it.
    assert_eq!(sha(&root_der(&d.pki)), old);
    let bundle = std::fs::read_to_string(&d.pki).expect("bundle");
    assert!(bundle.contains("nextCommandSigningRoot"), "{bundle}");
    refused(
        &run(&d, &["pki", "rotate-command-root", "--stage", "add"]),
        1,
        "INVALID_STATE: a rotation is already in progress (stage added): run `bcctl pki rotate-command-root --stage switch` next",
    );

    let switched = run_json(
        &d,
        &["pki", "rotate-command-root", "--stage", "switch", "--json"],
    );
    assert_eq!(switched["rotationStage"], "switched");
    assert_eq!(switched["activeRootSha256"], new);
    assert_eq!(switched["version"], 2, "a switch publishes no new content");

    refused(
        &run(&d, &["pki", "rotate-command-root", "--stage", "drop"]),
        1,
        "INVALID_STATE: invalid state: the switch was less than 24 hours ago",
    );
    let dropped = run_json(
        &d,
        &[
            "pki",
            "rotate-command-root",
            "--stage",
            "drop",
            "--force",
            "--json",
        ],
    );
    assert_eq!(dropped["version"], 3);
    assert_eq!(dropped["rotationStage"], "none");
    assert_eq!(dropped["roots"].as_array().map(Vec::len), Some(1));
    assert_eq!(dropped["roots"][0]["sha256"], new);
    // The new root is now the bundle's own, and the bundle keeps no second root.
    assert_eq!(sha(&root_der(&d.pki)), new);
    let bundle = std::fs::read_to_string(&d.pki).expect("bundle");
    assert!(!bundle.contains("nextCommandSigningRoot"), "{bundle}");
    let tv = run_json(&d, &["pki", "trust-version", "--json"]);
    assert_eq!(tv["version"], 3);
    assert_eq!(tv["configurationMatches"], true);
}
