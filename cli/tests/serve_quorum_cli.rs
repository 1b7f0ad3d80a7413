//! `bcctl serve`'s `[quorum]` table: each refusal of a bad table (the process exits before it
//! opens anything), and the set published at start: the first set, an unsigned change kept out
//! with the warning naming the epoch to sign, then the same change signed by the held set's
//! threshold taken at epoch 2 (read back with `bcctl pki trust-version`).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use base64::Engine;
use domain::quorum::{ApproverKey, ApproverSet, Tier};
use serde_json::Value;

use crate::support::{bcctl_bin, Proc};

const TD: &str = "quorum.example.com";

fn bcctl(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(bcctl_bin());
    cmd.current_dir(dir).args(args);
    for var in [
        "BC_DEPLOYMENT_SECRET",
        "BC_DEPLOYMENT_SECRET_FILE",
        "BC_PKI_BUNDLE",
        "BC_ROLE",
        "DATABASE_URL",
        "BC_BATCH_EXPIRY_INTERVAL",
        "BC_COMMAND_POLL_INTERVAL",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("BC_LISTEN", "127.0.0.1:0")
        .env("BC_METRICS_LISTEN", "off")
        .env("BC_PKI_BUNDLE", "pki.json")
        .env(
            "DATABASE_URL",
            format!("sqlite://{}/events.db", dir.display()),
        )
        .stdin(Stdio::null());
    cmd
}

fn ok(dir: &Path, args: &[&str]) -> Value {
    let out = bcctl(dir, args).output().expect("bcctl");
    assert!(
        out.status.success(),
        "bcctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

fn keygen(dir: &Path, name: &str) -> ApproverKey {
    ok(dir, &["batch", "keygen", "--out", name, "--json"]);
    let text = std::fs::read_to_string(dir.join(format!("{name}.pub"))).expect("pub");
    let body: String = text.lines().filter(|l| !l.starts_with("-----")).collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(body)
        .expect("base64");
    ApproverKey::from_spki(&der).expect("spki")
}

fn deployment() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().expect("tempdir");
    ok(
        tmp.path(),
        &[
            "pki",
            "init",
            "--trust-domain",
            TD,
            "--out",
            "pki.json",
            "--plaintext",
            "--json",
        ],
    );
    tmp
}

/// Signs `set_args` for `epoch` with `key` into `out` (the JSON sign-approvers prints).
fn sign(dir: &Path, key: &str, epoch: u64, set_args: &[&str], out: &str) {
    let epoch = epoch.to_string();
    let mut args = vec![
        "batch",
        "sign-approvers",
        "--key",
        key,
        "--epoch",
        &epoch,
        "--trust-domain",
        TD,
        "--json",
    ];
    args.extend_from_slice(set_args);
    let json = ok(dir, &args);
    std::fs::write(dir.join(out), json.to_string()).expect("write signature");
}

#[test]
fn bad_quorum_tables_are_refused_before_anything_starts() {
    let tmp = deployment();
    let d = tmp.path();
    for name in ["a.pem", "b.pem"] {
        keygen(d, name);
    }
    sign(
        d,
        "a.pem",
        2,
        &["--approvers", "a.pem.pub,b.pem.pub", "--threshold", "1"],
        "epoch2.json",
    );
    sign(
        d,
        "a.pem",
        1,
        &["--approvers", "a.pem.pub", "--threshold", "1"],
        "other-set.json",
    );
    let keys = "approver_keys = [\"a.pem.pub\", \"b.pem.pub\"]\n";
    let cases: Vec<(String, &str)> = vec![
        (
            "approver_keys = [\"a.pem.pub\", \"a.pem.pub\"]\nthreshold = 1\n".into(),
            "configuration quorum: approver key",
        ),
        (
            format!("{keys}threshold = 0\n"),
            "approver threshold 0 must be a whole number from 1 to the key count (2)",
        ),
        (
            format!("{keys}threshold = 3\n"),
            "approver threshold 3 must be a whole number from 1 to the key count (2)",
        ),
        (
            format!("{keys}threshold = 2\ntiers = [\"5:1\", \"5:2\"]\n"),
            "not above the previous tier's 5: tiers must ascend strictly",
        ),
        (
            format!("{keys}threshold = 1\ntiers = [\"5:2\"]\n"),
            "more than the threshold 1 that applies above every tier",
        ),
        (
            format!("{keys}threshold = 1\ntiers = [\"five\"]\n"),
            "configuration quorum.tiers: \"five\" is not MAX:THRESHOLD",
        ),
        (
            format!("{keys}threshold = 1\nepoch = 0\n"),
            "configuration quorum.epoch: epoch 0 means no set was ever held",
        ),
        (
            "approver_keys = []\nthreshold = 1\n".into(),
            "configuration quorum.approver_keys: no approver keys",
        ),
        (
            "approver_keys = [\"missing.pub\"]\nthreshold = 1\n".into(),
            "configuration quorum.approver_keys: missing.pub: cannot read it",
        ),
        (
            "approver_keys = [\"a.pem\"]\nthreshold = 1\n".into(),
            "a.pem: 0 PUBLIC KEY blocks, expected exactly one",
        ),
        (
            format!("{keys}threshold = 1\nset_signatures = [\"epoch2.json\"]\n"),
            "epoch2.json signs epoch 2, not the configured epoch 1",
        ),
        (
            format!("{keys}threshold = 1\nset_signatures = [\"other-set.json\"]\n"),
            "other-set.json signs approver set",
        ),
        (
            format!("{keys}threshold = 1\nthreshhold = 1\n"),
            "unknown field `threshhold`",
        ),
    ];
    for (table, needle) in &cases {
        std::fs::write(d.join("serve.toml"), format!("[quorum]\n{table}")).expect("config");
        let out = bcctl(d, &["serve", "--config", "serve.toml"])
            .output()
            .expect("serve");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{table}: {err}");
        assert!(err.contains(needle), "{table}: {err:?} lacks {needle:?}");
    }
    std::fs::write(d.join("serve.toml"), "batch_expiry_interval = \"1ms\"\n").expect("config");
    let out = bcctl(d, &["serve", "--config", "serve.toml"])
        .output()
        .expect("serve");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("configuration batch_expiry_interval: 1ms is too short: at least \"10ms\""),
        "{err}"
    );
    assert!(!d.join("events.db").exists(), "nothing was opened");
}

fn serve_once(d: &Path, what: &str) -> String {
    let log = d.join(format!("{what}.log"));
    let mut serve = Proc::spawn(what, bcctl(d, &["serve", "--config", "serve.toml"]), log);
    serve.wait_line("listening on", Duration::from_secs(60));
    let text = serve.log_text();
    drop(serve);
    text
}

fn trust_version(d: &Path) -> Value {
    ok(
        d,
        &["pki", "trust-version", "--config", "serve.toml", "--json"],
    )
}

#[test]
fn the_configured_quorum_is_published_at_start_and_a_change_needs_the_held_sets_signatures() {
    let tmp = deployment();
    let d = tmp.path();
    let alice = keygen(d, "alice.pem");
    let bob = keygen(d, "bob.pem");
    let carol = keygen(d, "carol.pem");
    let dave = keygen(d, "dave.pem");
    let first = "[quorum]\napprover_keys = [\"alice.pem.pub\", \"bob.pem.pub\", \"carol.pem.pub\"]\nthreshold = 2\ntiers = [\"5:1\"]\n";
    std::fs::write(d.join("serve.toml"), first).expect("config");
    serve_once(d, "first");
    let set1 = ApproverSet::new(
        vec![alice.clone(), bob.clone(), carol],
        2,
        vec![Tier {
            max_scope_size: 5,
            threshold: 1,
        }],
        0,
    )
    .expect("set");
    let tv = trust_version(d);
    assert_eq!(tv["version"], 1, "{tv}");
    assert_eq!(tv["configurationMatches"], true, "{tv}");
    assert_eq!(tv["approverSetEpoch"], 1);
    assert_eq!(tv["approverSetSha256"], set1.digest().to_hex());
    assert_eq!(tv["quorumChanged"], false);

    // Carol out, dave in, at epoch 2, unsigned: kept out, with the epoch to sign.
    let change = "[quorum]\napprover_keys = [\"alice.pem.pub\", \"bob.pem.pub\", \"dave.pem.pub\"]\nthreshold = 2\ntiers = [\"5:1\"]\nepoch = 2\n";
    std::fs::write(d.join("serve.toml"), change).expect("config");
    let log = serve_once(d, "unsigned");
    assert!(
        log.contains("the configured approver set ([quorum]) is not published")
            && log.contains("approver-set-unsigned")
            && log.contains("bcctl batch sign-approvers --epoch 2"),
        "{log}"
    );
    let tv = trust_version(d);
    assert_eq!(tv["version"], 1, "{tv}");
    assert_eq!(tv["approverSetEpoch"], 1);
    assert_eq!(tv["quorumChanged"], true);
    assert_eq!(tv["signQuorumForEpoch"], 2);
    assert_eq!(tv["publishedApproverSetSha256"], set1.digest().to_hex());

    // Alice and bob (2 of the held set) sign it: taken at epoch 2.
    let new_set = [
        "--approvers",
        "alice.pem.pub,bob.pem.pub,dave.pem.pub",
        "--threshold",
        "2",
        "--tiers",
        "5:1",
    ];
    sign(d, "alice.pem", 2, &new_set, "alice-2.json");
    sign(d, "bob.pem", 2, &new_set, "bob-2.json");
    std::fs::write(
        d.join("serve.toml"),
        format!("{change}set_signatures = [\"alice-2.json\", \"bob-2.json\"]\n"),
    )
    .expect("config");
    serve_once(d, "signed");
    let set2 = ApproverSet::new(
        vec![alice, bob, dave],
        2,
        vec![Tier {
            max_scope_size: 5,
            threshold: 1,
        }],
        0,
    )
    .expect("set");
    let tv = trust_version(d);
    assert_eq!(tv["version"], 2, "{tv}");
    assert_eq!(tv["configurationMatches"], true, "{tv}");
    assert_eq!(tv["approverSetEpoch"], 2);
    assert_eq!(tv["approverSetSha256"], set2.digest().to_hex());
    assert_eq!(tv["quorumChanged"], false);
}
