//! `bcctl batch approve`'s decoded operations (`--operations-out`, PAYLOAD_REFUSED,
//! OPAQUE_PAYLOAD and `--allow-opaque`), passphrase-protected approver keys
//! (`keygen --passphrase-env`, BC_APPROVER_PASSPHRASE) and `bcctl batch cancel`, through the real
//! binary on a throwaway SQLite store. The approver set is published in-process (what `serve`
//! does at start).

use std::path::Path;
use std::process::{Command, Output};

use base64::Engine;
use commands::quorum::{settle_trust_bundle, BundleConfig};
use commands::SystemClock;
use domain::command::payloads::{DiskWipe, NodeReboot};
use domain::quorum::{ApproverKey, ApproverSet, ApproverSetOffer, TrustDomain};
use events::store::testkit::TestDb;
use prost::Message;
use serde_json::{json, Value};

use crate::support::bcctl_bin;

const TD: &str = "payload.example.com";
const REBOOT_URL: &str = "type.googleapis.com/bc.command.v1.NodeReboot";

fn bcctl(dir: &Path, url: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(bcctl_bin());
    cmd.current_dir(dir)
        .env("DATABASE_URL", url)
        .env("BC_PKI_BUNDLE", crate::batch_cli::bundle_for(TD))
        .env("USER", "bob")
        .env("BC_TRUST_DOMAIN", TD)
        .env_remove("BC_DEPLOYMENT_SECRET")
        .env_remove("BC_DEPLOYMENT_SECRET_FILE")
        .env_remove("BC_APPROVER_PASSPHRASE")
        .args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run bcctl")
}

fn ok(dir: &Path, url: &str, args: &[&str], env: &[(&str, &str)]) -> Value {
    let out = bcctl(dir, url, args, env);
    assert!(
        out.status.success(),
        "bcctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

fn refused(out: &Output, code: i32, needle: &str) {
    let err = crate::batch_cli::as_text(&String::from_utf8_lossy(&out.stderr), code);
    assert_eq!(out.status.code(), Some(code), "{err}");
    assert!(err.starts_with("bcctl: "), "{err}");
    assert!(err.contains(needle), "{err:?} lacks {needle:?}");
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

fn public(dir: &Path, name: &str) -> ApproverKey {
    let text = std::fs::read_to_string(dir.join(format!("{name}.pub"))).expect("pub");
    let body: String = text.lines().filter(|l| !l.starts_with("-----")).collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(body)
        .expect("base64");
    ApproverKey::from_spki(&der).expect("spki")
}

async fn publish(db: &TestDb, keys: Vec<ApproverKey>) {
    let store = db.store().await.expect("store");
    settle_trust_bundle(
        &store,
        &SystemClock,
        &BundleConfig {
            trust_domain: TrustDomain::new(TD).expect("td"),
            command_signing_roots: vec![vec![1, 2, 3]],
            active_root: vec![1, 2, 3],
            approvers: ApproverSetOffer {
                set: ApproverSet::new(keys, 1, vec![], 0).expect("set"),
                epoch: 1,
                signatures: vec![],
            },
            floor: 0,
            pin: None,
        },
    )
    .await
    .expect("settle");
}

fn payload(type_url: &str, bytes: &[u8]) -> Value {
    json!({ "type_url": type_url, "value": hex::encode(bytes) })
}

fn create(dir: &Path, url: &str, key: &str, leaves: &Value) -> String {
    let file = dir.join(format!("{key}.json"));
    std::fs::write(&file, leaves.to_string()).expect("leaves");
    let out = ok(
        dir,
        url,
        &[
            "batch",
            "create",
            "--tenant",
            "t1",
            "--idempotency-key",
            key,
            "--reason",
            "maintenance",
            "--leaves",
            file.to_str().expect("path"),
            "--json",
        ],
        &[],
    );
    out["batchId"].as_str().expect("batch id").to_string()
}

struct Setup {
    _dir: tempfile::TempDir,
    db: TestDb,
}

impl Setup {
    fn dir(&self) -> &Path {
        self._dir.path()
    }
    fn url(&self) -> &str {
        self.db.url()
    }
}

/// A store with one published approver (`alice.pem`, threshold 1).
async fn setup() -> Setup {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = TestDb::sqlite().expect("sqlite");
    crate::support::seed_nodes(db.url(), "t1", 12).await;
    ok(
        dir.path(),
        db.url(),
        &["batch", "keygen", "--out", "alice.pem", "--json"],
        &[],
    );
    publish(&db, vec![public(dir.path(), "alice.pem")]).await;
    Setup { _dir: dir, db }
}

fn review(s: &Setup, batch: &str, more: &[&str]) -> Output {
    let mut args = vec!["batch", "approve", "--batch", batch, "--key", "alice.pem"];
    args.extend_from_slice(more);
    bcctl(s.dir(), s.url(), &args, &[])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_decodes_each_distinct_operation_and_writes_them_in_full() {
    let s = setup().await;
    let long_reason = format!("{}{}", "k".repeat(50), "z".repeat(50));
    let kernel = NodeReboot {
        reason: "kernel".into(),
        delay_seconds: 5,
    }
    .encode_to_vec();
    let long = NodeReboot {
        reason: long_reason.clone(),
        delay_seconds: 0,
    }
    .encode_to_vec();
    let leaves = json!([
        { "subject": "node-1", "kind": "node.reboot", "payload": payload(REBOOT_URL, &kernel) },
        { "subject": "node-2", "kind": "node.reboot", "payload": payload(REBOOT_URL, &kernel) },
        { "subject": "node-3", "kind": "node.reboot", "payload": payload(REBOOT_URL, &long) },
    ]);
    let batch = create(s.dir(), s.url(), "ops", &leaves);
    let out = review(&s, &batch, &["--operations-out", "ops.json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let kernel_digest = domain::quorum::PayloadDigest::of(&kernel).to_hex();
    assert!(
        text.contains(&format!(
            "node.reboot payload {}: {{delay_seconds: 5, reason: \"kernel\"}} on 2 subject(s)",
            &kernel_digest[..12]
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!("\"{}…{}\"", "k".repeat(29), "z".repeat(29))),
        "{text}"
    );
    assert!(text.contains("nothing signed"), "{text}");
    let ops: Value =
        serde_json::from_str(&std::fs::read_to_string(s.dir().join("ops.json")).expect("ops"))
            .expect("JSON");
    let ops = ops.as_array().expect("array");
    assert_eq!(ops.len(), 2, "{ops:?}");
    let both = ops
        .iter()
        .find(|o| o["payloadSha256"] == kernel_digest)
        .expect("the kernel reboot");
    assert_eq!(both["subjects"], json!(["node-1", "node-2"]));
    assert_eq!(
        both["payload"],
        json!({ "reason": "kernel", "delay_seconds": 5 })
    );
    assert_eq!(both["typeUrl"], REBOOT_URL);
    let other = ops
        .iter()
        .find(|o| o["payloadSha256"] != kernel_digest)
        .expect("the other");
    assert_eq!(other["payload"]["reason"], long_reason, "in full");
    assert_eq!(other["subjects"], json!(["node-3"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_refuses_payloads_it_cannot_show_whole() {
    let s = setup().await;
    let mut extra = NodeReboot {
        reason: "x".into(),
        delay_seconds: 1,
    }
    .encode_to_vec();
    extra.extend_from_slice(&[0x18, 0x01]); // field 3: not in NodeReboot
    let batch = create(
        s.dir(),
        s.url(),
        "unknown-fields",
        &json!([{ "subject": "node-1", "kind": "node.reboot", "payload": payload(REBOOT_URL, &extra) }]),
    );
    refused(
        &review(&s, &batch, &[]),
        3,
        "PAYLOAD_REFUSED: leaf 0 (node-1 node.reboot): payload-unknown-fields: the bc.command.v1.NodeReboot payload carries fields",
    );

    let wipe = DiskWipe {
        device: "/dev/sda".into(),
        method: "zero".into(),
    }
    .encode_to_vec();
    // A relabelled payload is refused by the server when the batch is created (spec 003: the
    // kind's own payload type from the registry), not only by an approver's review.
    let file = s.dir().join("relabelled.json");
    let leaves = json!([{ "subject": "node-1", "kind": "node.reboot",
                          "payload": payload("type.googleapis.com/bc.command.v1.DiskWipe", &wipe) }]);
    std::fs::write(&file, leaves.to_string()).expect("leaves");
    let args = [
        "batch",
        "create",
        "--tenant",
        "t1",
        "--idempotency-key",
        "relabelled",
        "--reason",
        "maintenance",
        "--leaves",
        file.to_str().expect("path"),
    ];
    refused(
        &bcctl(s.dir(), s.url(), &args, &[]),
        2,
        "INVALID_INPUT: scope leaf 0: payload typeUrl \"type.googleapis.com/bc.command.v1.DiskWipe\" is not the payload type of node.reboot; node.reboot payloads are type.googleapis.com/bc.command.v1.NodeReboot",
    );

    let batch = create(
        s.dir(),
        s.url(),
        "opaque",
        &json!([{ "subject": "node-1", "kind": "acme.flash",
                  "payload": payload("type.googleapis.com/acme.v1.Flash", &[1, 2, 3]) }]),
    );
    refused(
        &review(&s, &batch, &[]),
        3,
        "OPAQUE_PAYLOAD: 1 leaves carry payloads of kinds this build cannot decode (node-1 acme.flash)",
    );
    let out = review(
        &s,
        &batch,
        &["--allow-opaque", "--operations-out", "opaque.json"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ops: Value =
        serde_json::from_str(&std::fs::read_to_string(s.dir().join("opaque.json")).expect("ops"))
            .expect("JSON");
    assert_eq!(ops[0]["opaquePayloadHex"], "010203");
    assert_eq!(ops[0]["payload"], Value::Null);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encrypted_approver_keys_need_their_passphrase() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let db = TestDb::sqlite().expect("sqlite");
    crate::support::seed_nodes(db.url(), "t1", 12).await;
    refused(
        &bcctl(
            d,
            db.url(),
            &[
                "batch",
                "keygen",
                "--out",
                "enc.pem",
                "--passphrase-env",
                "NO_SUCH_VAR",
            ],
            &[],
        ),
        1,
        "MISSING_ENV: set NO_SUCH_VAR to the passphrase that encrypts the new approver key",
    );
    assert!(!d.join("enc.pem").exists());
    let made = ok(
        d,
        db.url(),
        &[
            "batch",
            "keygen",
            "--out",
            "enc.pem",
            "--passphrase-env",
            "MY_PASS",
            "--json",
        ],
        &[("MY_PASS", "correct horse battery staple")],
    );
    assert_eq!(made["encrypted"], true);
    let text = std::fs::read_to_string(d.join("enc.pem")).expect("key");
    assert!(
        text.starts_with("-----BEGIN ENCRYPTED PRIVATE KEY-----\n"),
        "{text}"
    );
    publish(&db, vec![public(d, "enc.pem")]).await;
    let batch = create(
        d,
        db.url(),
        "enc",
        &json!([{ "subject": "node-1", "kind": "node.reimage", "payload_sha256": "00".repeat(32) }]),
    );
    let approve = [
        "batch", "approve", "--batch", &batch, "--key", "enc.pem", "--yes", "--json",
    ];
    refused(
        &bcctl(d, db.url(), &approve, &[]),
        1,
        "MISSING_ENV: set BC_APPROVER_PASSPHRASE to the passphrase approver key enc.pem is encrypted with",
    );
    refused(
        &bcctl(
            d,
            db.url(),
            &approve,
            &[("BC_APPROVER_PASSPHRASE", "wrong")],
        ),
        1,
        "PERMISSION_DENIED: approver key enc.pem does not open with BC_APPROVER_PASSPHRASE",
    );
    let signed = ok(
        d,
        db.url(),
        &approve,
        &[("BC_APPROVER_PASSPHRASE", "correct horse battery staple")],
    );
    assert_eq!(signed["signed"], true, "{signed}");
    assert_eq!(signed["status"], "approved", "{signed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_closes_a_batch_once() {
    let s = setup().await;
    let batch = create(
        s.dir(),
        s.url(),
        "cancel",
        &json!([{ "subject": "node-1", "kind": "node.reimage", "payload_sha256": "11".repeat(32) }]),
    );
    refused(
        &bcctl(
            s.dir(),
            s.url(),
            &["batch", "cancel", &batch, "--reason", " "],
            &[],
        ),
        2,
        "INVALID_INPUT: --reason must say why",
    );
    refused(
        &bcctl(
            s.dir(),
            s.url(),
            &["batch", "cancel", "abc", "--reason", "x"],
            &[],
        ),
        2,
        "INVALID_INPUT: --batch:",
    );
    let out = ok(
        s.dir(),
        s.url(),
        &[
            "batch",
            "cancel",
            &batch,
            "--reason",
            "wrong nodes",
            "--json",
        ],
        &[],
    );
    assert_eq!(out["status"], "cancelled", "{out}");
    // Who cancels is the actor (the local user directly), never a flag.
    assert_eq!(out["cancelledBy"], crate::batch_cli::local_actor_id("bob"));
    // Cancelling again is a no-op that succeeds and says so (docs/CLI.md "Idempotency").
    let again = bcctl(
        s.dir(),
        s.url(),
        &["batch", "cancel", &batch, "--reason", "again"],
        &[],
    );
    assert_eq!(again.status.code(), Some(0), "{again:?}");
    assert_eq!(
        String::from_utf8_lossy(&again.stdout),
        format!("batch {batch} already cancelled: nothing to do\n")
    );
    let again = ok(
        s.dir(),
        s.url(),
        &["batch", "cancel", &batch, "--reason", "again", "--json"],
        &[],
    );
    assert_eq!(again["alreadyCancelled"], true, "{again}");
    refused(
        &review(&s, &batch, &[]),
        1,
        &format!("INVALID_STATE: batch {batch} is cancelled, not pending"),
    );
}
