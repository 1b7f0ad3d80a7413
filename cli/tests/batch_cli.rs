//! `bcctl batch keygen | create | show | approve | sign-approvers` through the real binary, on both
//! backends (a throwaway Postgres database and a throwaway SQLite file each).
//!
//! The approver set is published in-process with `commands::quorum::settle_trust_bundle` (what a
//! serving process does at start); everything else goes through `bcctl`. Each refusal is checked
//! by its exit code and the exact code and words of its message: 2 for bad input, 3 when the
//! review refuses to sign, 1 otherwise (see `cli/src/verbs/batch/mod.rs`).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use base64::Engine;
use commands::quorum::{batch_view, settle_trust_bundle, BundleConfig, SettleOutcome};
use commands::{SimClock, SystemClock};
use domain::quorum::{
    ApproverKey, ApproverSet, ApproverSetOffer, BatchId, CreateBatch, PayloadDigest,
    ScopeLeafRequest, SetSignature, Tier, TrustDomain,
};
use events::store::testkit::TestDb;
use events::store::EventStore;
use serde_json::{json, Value};

const TRUST_DOMAIN: &str = "cli.example.com";
const EXIT_USAGE: i32 = 2;
const EXIT_REVIEW_REFUSED: i32 = 3;

fn bcctl(dir: &Path, url: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bcctl"))
        .current_dir(dir)
        .env("DATABASE_URL", url)
        .env("BC_PKI_BUNDLE", bundle_for(TRUST_DOMAIN))
        .env("USER", "alice")
        .env("BC_TRUST_DOMAIN", TRUST_DOMAIN)
        .env_remove("BC_DEPLOYMENT_SECRET")
        .env_remove("BC_DEPLOYMENT_SECRET_FILE")
        .args(args)
        .output()
        .expect("run bcctl")
}

/// A plaintext PKI bundle for trust domain `td` (made once per test process by `bcctl pki
/// init`): the deployment whose trust domain approvals are checked in.
pub fn bundle_for(td: &str) -> PathBuf {
    use std::collections::BTreeMap;
    use std::sync::{Mutex, OnceLock};
    static BUNDLES: OnceLock<Mutex<BTreeMap<String, PathBuf>>> = OnceLock::new();
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    let dir = DIR.get_or_init(|| tempfile::tempdir().expect("tempdir"));
    let mut bundles = BUNDLES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(path) = bundles.get(td) {
        return path.clone();
    }
    let path = dir.path().join(format!("{td}.json"));
    let out = Command::new(env!("CARGO_BIN_EXE_bcctl"))
        .current_dir(dir.path())
        .env_remove("BC_DEPLOYMENT_SECRET")
        .env_remove("BC_DEPLOYMENT_SECRET_FILE")
        .args(["pki", "init", "--trust-domain", td, "--plaintext", "--out"])
        .arg(&path)
        .output()
        .expect("bcctl pki init");
    assert!(
        out.status.success(),
        "pki init: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    bundles.insert(td.to_string(), path.clone());
    path
}

/// The actor a direct run records and derives batch ids from: `local:<user>@<host>`.
pub fn local_actor_id(user: &str) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into());
    format!("local:{user}@{host}")
}

fn ok_json(dir: &Path, url: &str, args: &[&str]) -> Value {
    let out = bcctl(dir, url, args);
    assert!(
        out.status.success(),
        "bcctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "bcctl {args:?}: not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// An error as text: under `--json` it is one JSON object (docs/CLI.md "Errors"), whose
/// message and exit code must be those of the text form.
pub fn as_text(stderr: &str, code: i32) -> String {
    match serde_json::from_str::<Value>(stderr.trim()) {
        Ok(v) if v.get("error").is_some() => {
            assert_eq!(v["error"]["exitCode"], code, "{stderr}");
            format!(
                "bcctl: {}\n",
                v["error"]["message"].as_str().expect("message")
            )
        }
        _ => stderr.to_string(),
    }
}

/// Runs a command that must fail with `code`, its stderr starting `bcctl: ` and holding every
/// one of `needles`; nothing on stdout. Returns stderr.
fn refused(dir: &Path, url: &str, args: &[&str], code: i32, needles: &[&str]) -> String {
    let out = bcctl(dir, url, args);
    let err = as_text(&String::from_utf8_lossy(&out.stderr), code);
    assert_eq!(
        out.status.code(),
        Some(code),
        "bcctl {args:?} must exit {code}: {err}"
    );
    assert!(err.starts_with("bcctl: "), "{err:?}");
    for needle in needles {
        assert!(
            err.contains(needle),
            "bcctl {args:?}: {err:?} lacks {needle:?}"
        );
    }
    assert!(
        out.stdout.is_empty(),
        "a refusal prints nothing on stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    err
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .expect("metadata")
        .permissions()
        .mode()
        & 0o777
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// An approver made by `bcctl batch keygen`.
struct Approver {
    key: PathBuf,
    public: ApproverKey,
}

impl Approver {
    fn key(&self) -> &str {
        self.key.to_str().expect("utf-8 path")
    }

    fn pub_file(&self) -> String {
        format!("{}.pub", self.key())
    }
}

fn read_public(path: &Path) -> ApproverKey {
    let text = std::fs::read_to_string(path).expect("read .pub");
    assert!(text.starts_with("-----BEGIN PUBLIC KEY-----\n"), "{text}");
    let body: String = text.lines().filter(|l| !l.starts_with("-----")).collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(body)
        .expect("base64");
    ApproverKey::from_spki(&der).expect("P-256 SPKI")
}

fn keygen(dir: &Path, name: &str) -> Approver {
    let key = dir.join(name);
    let out = ok_json(
        dir,
        "unused://",
        &[
            "batch",
            "keygen",
            "--out",
            key.to_str().expect("path"),
            "--json",
        ],
    );
    let public = read_public(&dir.join(format!("{name}.pub")));
    assert_eq!(
        out["kid"],
        public.kid().to_hex(),
        "the kid is SHA-256 of the SPKI"
    );
    assert_eq!(mode(&key), 0o600, "the private key is private");
    Approver { key, public }
}

async fn publish(store: &EventStore, keys: &[&Approver], threshold: u32, tiers: Vec<Tier>) {
    let set = ApproverSet::new(
        keys.iter().map(|a| a.public.clone()).collect(),
        threshold,
        tiers,
        0,
    )
    .expect("approver set");
    settle_trust_bundle(
        store,
        &SystemClock,
        &BundleConfig {
            trust_domain: TrustDomain::new(TRUST_DOMAIN).expect("td"),
            command_signing_roots: vec![vec![1, 2, 3]],
            active_root: vec![1, 2, 3],
            approvers: ApproverSetOffer {
                set,
                epoch: 1,
                signatures: vec![],
            },
            floor: 0,
            pin: None,
        },
    )
    .await
    .expect("settle the trust bundle");
}

fn digest_hex(i: usize) -> String {
    PayloadDigest::of(format!("image-{i}").as_bytes()).to_hex()
}

/// Bound leaves node-1 .. node-n, kind node.reimage.
fn bound_leaves(n: usize) -> Value {
    Value::Array(
        (1..=n)
            .map(|i| {
                json!({ "subject": format!("node-{i}"), "kind": "node.reimage",
                        "payload_sha256": digest_hex(i) })
            })
            .collect(),
    )
}

fn write(dir: &Path, name: &str, contents: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, contents).expect("write");
    path.to_str().expect("path").to_string()
}

fn create_args<'a>(leaves: &'a str, key: &'a str, reason: &'a str) -> Vec<&'a str> {
    vec![
        "batch",
        "create",
        "--tenant",
        "t1",
        "--idempotency-key",
        key,
        "--reason",
        reason,
        "--leaves",
        leaves,
        "--json",
    ]
}

fn approve_args<'a>(batch: &'a str, approver: &'a Approver) -> Vec<&'a str> {
    vec![
        "batch",
        "approve",
        "--batch",
        batch,
        "--key",
        approver.key(),
    ]
}

fn with<'a>(mut base: Vec<&'a str>, more: &[&'a str]) -> Vec<&'a str> {
    base.extend_from_slice(more);
    base
}

/// Keygen, create, show, approve with enough keys: the batch is approved and its signatures
/// verify for the deployment's trust domain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_happy_path_on_both_backends() {
    for db in TestDb::each().await.expect("databases") {
        crate::support::seed_nodes(db.url(), "t1", 12).await;
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let url = db.url().to_string();
        let store = db.store().await.expect("store");
        let alice = keygen(d, "alice.pem");
        let bob = keygen(d, "bob.pem");
        let carol = keygen(d, "carol.pem");
        assert_eq!(mode(Path::new(&alice.pub_file())), 0o644);
        publish(&store, &[&alice, &bob, &carol], 2, vec![]).await;

        let leaves = write(d, "leaves.json", &bound_leaves(3).to_string());
        let created = ok_json(d, &url, &create_args(&leaves, "k1", "reimage rack 7"));
        let batch = created["batchId"].as_str().expect("batchId").to_string();
        let root = created["scopeRoot"].as_str().expect("root").to_string();
        assert_eq!(
            batch,
            BatchId::derive("t1", &local_actor_id("alice"), "k1")
                .expect("id")
                .to_hex()
        );
        assert_eq!(created["size"], 3);
        assert_eq!(created["required"], 2);
        assert_eq!(created["status"], "pending");
        assert_eq!(created["retry"], false);
        // The same request again is a retry of the same batch.
        let again = ok_json(d, &url, &create_args(&leaves, "k1", "reimage rack 7"));
        assert_eq!(again["batchId"], batch.as_str());
        assert_eq!(again["retry"], true);

        let shown = ok_json(d, &url, &["batch", "show", "--batch", &batch, "--json"]);
        assert_eq!(shown["batchId"], batch.as_str());
        assert_eq!(shown["tenantId"], "t1");
        assert_eq!(shown["caller"], local_actor_id("alice"));
        assert_eq!(shown["trustDomain"], TRUST_DOMAIN);
        assert_eq!(shown["reason"], "reimage rack 7");
        assert_eq!(shown["status"], "pending");
        assert_eq!(shown["scopeRoot"], root.as_str());
        assert_eq!(shown["size"], 3);
        assert_eq!(shown["required"], 2);
        assert_eq!(shown["held"], 0);
        assert_eq!(shown["approvers"], json!([]));
        assert_eq!(shown["notAfterUs"], created["notAfterUs"]);
        let text = bcctl(d, &url, &["batch", "show", "--batch", &batch]);
        assert!(text.status.success());
        let text = String::from_utf8_lossy(&text.stdout);
        assert!(text.contains("reason: reimage rack 7"), "{text}");
        assert!(text.contains("status pending, 0 of 2 approvals"), "{text}");

        // Without --yes: the review summary and the root, nothing signed.
        let review = bcctl(d, &url, &approve_args(&batch, &alice));
        assert_eq!(review.status.code(), Some(0));
        let review = String::from_utf8_lossy(&review.stdout);
        assert!(review.contains("reason: reimage rack 7"), "{review}");
        assert!(
            review.contains("node.reimage (3 leaves): node-1 (payload "),
            "{review}"
        );
        assert!(
            review.contains(&format!("nothing signed: re-run with --yes --root {root}")),
            "{review}"
        );
        let review = ok_json(d, &url, &with(approve_args(&batch, &alice), &["--json"]));
        assert_eq!(review["signed"], false);
        assert_eq!(review["kinds"]["node.reimage"]["count"], 3);
        assert_eq!(
            ok_json(d, &url, &["batch", "show", "--batch", &batch, "--json"])["held"],
            0
        );

        // Alice approves the reviewed root and the expected subjects.
        let expect = write(d, "expect.txt", "node-1\nnode-2\nnode-3\n");
        let first = ok_json(
            d,
            &url,
            &with(
                approve_args(&batch, &alice),
                &["--yes", "--root", &root, "--expect", &expect, "--json"],
            ),
        );
        assert_eq!(first["signed"], true);
        assert_eq!(first["held"], 1);
        assert_eq!(first["required"], 2);
        assert_eq!(first["status"], "pending");
        // A key that already approved: reported, nothing signed.
        let twice = ok_json(
            d,
            &url,
            &with(approve_args(&batch, &alice), &["--yes", "--json"]),
        );
        assert_eq!(twice["alreadyApproved"], true);
        assert_eq!(twice["signed"], false);
        assert_eq!(twice["held"], 1);
        // Bob's approval reaches the threshold; the text output says so.
        let second = bcctl(
            d,
            &url,
            &with(approve_args(&batch, &bob), &["--yes", "--root", &root]),
        );
        assert!(
            second.status.success(),
            "{}",
            String::from_utf8_lossy(&second.stderr)
        );
        let second = String::from_utf8_lossy(&second.stdout);
        assert!(
            second.contains(&format!(
                "approved batch {batch}: 2 of 2 approvals, approved"
            )),
            "{second}"
        );

        let shown = ok_json(d, &url, &["batch", "show", "--batch", &batch, "--json"]);
        assert_eq!(shown["status"], "approved");
        assert_eq!(shown["held"], 2);
        let mut kids = vec![alice.public.kid().to_hex(), bob.public.kid().to_hex()];
        kids.sort();
        assert_eq!(shown["approvers"], json!(kids));
        // The recorded signatures are what a daemon of this trust domain accepts.
        let id = BatchId::from_hex(&batch).expect("id");
        let view = batch_view(&store, &id).await.expect("view").expect("batch");
        let set = ApproverSet::new(
            vec![
                alice.public.clone(),
                bob.public.clone(),
                carol.public.clone(),
            ],
            2,
            vec![],
            0,
        )
        .expect("set");
        let td = TrustDomain::new(TRUST_DOMAIN).expect("td");
        assert_eq!(view.approval().valid_approvers(&set, &td).len(), 2);
        let staging = TrustDomain::new("staging.example.com").expect("td");
        assert!(view.approval().valid_approvers(&set, &staging).is_empty());

        // An approved batch takes no more approvals.
        refused(
            d,
            &url,
            &with(approve_args(&batch, &carol), &["--yes"]),
            1,
            &[&format!(
                "INVALID_STATE: batch {batch} is approved, not pending: only a pending batch takes approvals"
            )],
        );
    }
}

/// Each review refusal of `approve`: nothing is signed, the batch keeps no approval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_approve_refusals_on_both_backends() {
    for db in TestDb::each().await.expect("databases") {
        crate::support::seed_nodes(db.url(), "t1", 12).await;
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let url = db.url().to_string();
        let store = db.store().await.expect("store");
        let alice = keygen(d, "alice.pem");
        let bob = keygen(d, "bob.pem");
        let mallory = keygen(d, "mallory.pem");
        publish(&store, &[&alice, &bob], 2, vec![]).await;
        let leaves = write(d, "leaves.json", &bound_leaves(3).to_string());
        let created = ok_json(d, &url, &create_args(&leaves, "k1", "reimage"));
        let batch = created["batchId"].as_str().expect("batchId").to_string();
        let root = created["scopeRoot"].as_str().expect("root").to_string();
        let held = || {
            let shown = ok_json(d, &url, &["batch", "show", "--batch", &batch, "--json"]);
            shown["held"].as_u64().expect("held")
        };

        // --root that is not the batch's root: SCOPE_CHANGED.
        let other_root = "ab".repeat(32);
        refused(
            d,
            &url,
            &with(
                approve_args(&batch, &alice),
                &["--yes", "--root", &other_root],
            ),
            EXIT_REVIEW_REFUSED,
            &[&format!(
                "SCOPE_CHANGED: the batch's root is {root}, not the reviewed {other_root}"
            )],
        );

        // --expect that does not match: SCOPE_UNEXPECTED names what is missing and extra.
        let expect = write(d, "expect.txt", "node-1\nnode-2\nnode-9\n");
        refused(
            d,
            &url,
            &with(
                approve_args(&batch, &alice),
                &["--yes", "--expect", &expect],
            ),
            EXIT_REVIEW_REFUSED,
            &[r#"SCOPE_UNEXPECTED: missing ["node-9"], not expected ["node-3"]"#],
        );
        // The same as a JSON array of subjects, and as { subject, kind } commands.
        let expect = write(d, "expect.json", r#"["node-1", "node-2"]"#);
        refused(
            d,
            &url,
            &with(
                approve_args(&batch, &alice),
                &["--yes", "--expect", &expect],
            ),
            EXIT_REVIEW_REFUSED,
            &[r#"SCOPE_UNEXPECTED: missing [], not expected ["node-3"]"#],
        );
        let expect = write(
            d,
            "expect-commands.json",
            &json!([
                { "subject": "node-1", "kind": "node.reimage" },
                { "subject": "node-2", "kind": "node.reimage" },
                { "subject": "node-3", "kind": "node.reboot" },
            ])
            .to_string(),
        );
        refused(
            d,
            &url,
            &with(
                approve_args(&batch, &alice),
                &["--yes", "--expect", &expect],
            ),
            EXIT_REVIEW_REFUSED,
            &[
                r#"SCOPE_UNEXPECTED: missing [("node-3", "node.reboot")], not expected [("node-3", "node.reimage")]"#,
            ],
        );
        let expect = write(d, "expect-bad.json", r#"[{"subject": "node-1"}]"#);
        refused(
            d,
            &url,
            &with(
                approve_args(&batch, &alice),
                &["--yes", "--expect", &expect],
            ),
            EXIT_USAGE,
            &[
                "INVALID_INPUT: ",
                "expected subjects or { subject, kind } objects",
            ],
        );

        // A key file readable by others: INVALID_STATE, before anything is read or signed.
        chmod(&alice.key, 0o644);
        refused(
            d,
            &url,
            &with(approve_args(&batch, &alice), &["--yes"]),
            1,
            &[&format!(
                "INVALID_STATE: approver key {} is readable by others (mode 644); run chmod 600 {}",
                alice.key(),
                alice.key()
            )],
        );
        chmod(&alice.key, 0o640);
        refused(
            d,
            &url,
            &with(approve_args(&batch, &alice), &["--yes"]),
            1,
            &["INVALID_STATE: ", "readable by others (mode 640)"],
        );
        chmod(&alice.key, 0o600);

        // A key outside the published set: the server refuses it.
        refused(
            d,
            &url,
            &with(approve_args(&batch, &mallory), &["--yes", "--json"]),
            1,
            &[&format!(
                "PERMISSION_DENIED: {} is not an approver key of the current set",
                mallory.public.kid()
            )],
        );

        // Window longer than --max-hours (the batch ends in 24 h): INVALID_STATE; a bad value
        // is INVALID_INPUT.
        refused(
            d,
            &url,
            &with(
                approve_args(&batch, &alice),
                &["--yes", "--max-hours", "23"],
            ),
            1,
            &[
                &format!("INVALID_STATE: batch {batch}'s window stays open until "),
                "more than --max-hours 23 from now",
            ],
        );
        refused(
            d,
            &url,
            &with(
                approve_args(&batch, &alice),
                &["--yes", "--max-hours", "721"],
            ),
            EXIT_USAGE,
            &["INVALID_INPUT: --max-hours 721 is outside 1 to 720"],
        );

        // Unknown or malformed batch ids.
        let unknown = "cd".repeat(32);
        refused(
            d,
            &url,
            &with(approve_args(&unknown, &alice), &["--yes"]),
            1,
            &[&format!("NOT_FOUND: batch {unknown} not found")],
        );
        refused(
            d,
            &url,
            &["batch", "show", "--batch", &unknown],
            1,
            &[&format!("NOT_FOUND: batch {unknown} not found")],
        );
        refused(
            d,
            &url,
            &["batch", "show", "--batch", "xyz"],
            EXIT_USAGE,
            &["INVALID_INPUT: --batch: expected 64 hex characters"],
        );
        assert_eq!(held(), 0, "no refusal recorded an approval");

        // Unbound leaves: refused without --allow-unbound, naming them; taken with it.
        let unbound = write(
            d,
            "unbound.json",
            &json!([
                { "subject": "node-1", "kind": "node.reboot" },
                { "subject": "node-2", "kind": "node.reboot" },
                { "subject": "node-3", "kind": "node.reimage", "payload_sha256": digest_hex(3) },
            ])
            .to_string(),
        );
        let created = ok_json(d, &url, &create_args(&unbound, "k2", "reboot"));
        let loose = created["batchId"].as_str().expect("batchId").to_string();
        refused(
            d,
            &url,
            &with(approve_args(&loose, &alice), &["--yes"]),
            EXIT_REVIEW_REFUSED,
            &["UNBOUND_SCOPE: 2 leaves admit any payload (node-"],
        );
        let review = bcctl(d, &url, &approve_args(&loose, &alice));
        assert_eq!(review.status.code(), Some(EXIT_REVIEW_REFUSED));
        let taken = ok_json(
            d,
            &url,
            &with(
                approve_args(&loose, &alice),
                &["--yes", "--allow-unbound", "--json"],
            ),
        );
        assert_eq!(taken["held"], 1);
        let review = bcctl(
            d,
            &url,
            &with(approve_args(&loose, &bob), &["--allow-unbound"]),
        );
        let review = String::from_utf8_lossy(&review.stdout);
        assert!(review.contains("node-1 (any payload)"), "{review}");

        // A window that has closed: INVALID_STATE (a batch created in the past, in-process).
        let past = SimClock::at_us(time_now_us() - 3_600_000_000);
        let closed = commands::quorum::create_batch(
            &store,
            &past,
            &CreateBatch {
                tenant: "t1".into(),
                caller: "alice@example.com".into(),
                idempotency_key: "k3".into(),
                reason: "old".into(),
                leaves: vec![ScopeLeafRequest {
                    subject: "node-1".into(),
                    kind: "node.reimage".into(),
                    payload_sha256: Some(PayloadDigest::of(b"x")),
                    payload: None,
                }],
                not_after_seconds: Some(60),
            },
        )
        .await
        .expect("create in the past");
        let closed = closed.batch_id.to_hex();
        refused(
            d,
            &url,
            &with(approve_args(&closed, &alice), &["--yes"]),
            1,
            &[&format!(
                "INVALID_STATE: batch {closed}'s window closed at "
            )],
        );
    }
}

fn time_now_us() -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970");
    i64::try_from(now.as_micros()).expect("fits")
}

/// Create's refusals: a reused idempotency key is CONFLICT, bad input INVALID_INPUT (exit 2);
/// the bounds themselves are accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_create_refusals_on_both_backends() {
    for db in TestDb::each().await.expect("databases") {
        crate::support::seed_nodes(db.url(), "t1", 12).await;
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let url = db.url().to_string();
        let leaves = write(d, "leaves.json", &bound_leaves(2).to_string());
        let created = ok_json(d, &url, &create_args(&leaves, "k1", "reimage"));
        // No approver set published: nothing to wait for.
        assert_eq!(created["required"], 0);
        assert_eq!(created["status"], "approved");
        let batch = created["batchId"].as_str().expect("id").to_string();

        // The same key for another request (another reason, other leaves): CONFLICT.
        let conflict = format!(
            "CONFLICT: the idempotency key already created batch {batch} from a different request: use a new key"
        );
        refused(
            d,
            &url,
            &create_args(&leaves, "k1", "reimage again"),
            1,
            &[&conflict],
        );
        let other = write(d, "other.json", &bound_leaves(3).to_string());
        refused(
            d,
            &url,
            &create_args(&other, "k1", "reimage"),
            1,
            &[&conflict],
        );
        let mut args = create_args(&leaves, "k1", "reimage");
        args.extend_from_slice(&["--not-after-seconds", "3600"]);
        refused(d, &url, &args, 1, &[&conflict]);

        // No leaves.
        let empty = write(d, "empty.json", "[]");
        refused(
            d,
            &url,
            &create_args(&empty, "k2", "reimage"),
            EXIT_USAGE,
            &["bcctl: INVALID_INPUT: a batch scope needs at least one leaf"],
        );
        // More than 50,000 leaves.
        let many = write(d, "many.json", &bound_leaves(50_001).to_string());
        refused(
            d,
            &url,
            &create_args(&many, "k2", "reimage"),
            EXIT_USAGE,
            &["INVALID_INPUT: a batch scope has 50001 leaves; at most 50000 are allowed"],
        );
        // A reason of 501 characters (counted as characters, not bytes); 500 is fine.
        let long: String = "é".repeat(501);
        refused(
            d,
            &url,
            &create_args(&leaves, "k2", &long),
            EXIT_USAGE,
            &["INVALID_INPUT: the reason is 501 characters long; at most 500 are allowed"],
        );
        let longest: String = "é".repeat(500);
        ok_json(d, &url, &create_args(&leaves, "k-500", &longest));
        refused(
            d,
            &url,
            &create_args(&leaves, "k2", ""),
            EXIT_USAGE,
            &["INVALID_INPUT: the batch needs a reason"],
        );
        // not-after outside 60 s .. 72 h; both ends are fine.
        for (seconds, ok) in [
            ("59", false),
            ("60", true),
            ("259200", true),
            ("259201", false),
            ("0", false),
        ] {
            let mut args = create_args(&leaves, seconds, "reimage");
            args.extend_from_slice(&["--not-after-seconds", seconds]);
            if ok {
                let created = ok_json(d, &url, &args);
                assert_eq!(created["status"], "approved");
            } else {
                refused(
                    d,
                    &url,
                    &args,
                    EXIT_USAGE,
                    &[&format!(
                        "INVALID_INPUT: notAfterSeconds {seconds} is outside 60 to 259200 (72 h)"
                    )],
                );
            }
        }
        let mut args = create_args(&leaves, "k2", "reimage");
        args.extend_from_slice(&["--not-after-seconds", "-5"]);
        let out = bcctl(d, &url, &args);
        assert_eq!(out.status.code(), Some(2), "clap refuses a negative window");
        // Malformed leaves: not JSON, a bad digest, a control character, an empty kind.
        let bad = write(d, "bad.json", "{ not json");
        refused(
            d,
            &url,
            &create_args(&bad, "k2", "reimage"),
            EXIT_USAGE,
            &["INVALID_INPUT: ", "bad.json"],
        );
        let bad = write(
            d,
            "bad-digest.json",
            r#"[{"subject": "node-1", "kind": "node.reimage", "payload_sha256": "abc"}]"#,
        );
        refused(
            d,
            &url,
            &create_args(&bad, "k2", "reimage"),
            EXIT_USAGE,
            &["INVALID_INPUT: ", "expected 64 hex characters"],
        );
        let bad = write(
            d,
            "bad-subject.json",
            &json!([{ "subject": "node-1\u{1b}[2J", "kind": "node.reimage" }]).to_string(),
        );
        refused(
            d,
            &url,
            &create_args(&bad, "k2", "reimage"),
            EXIT_USAGE,
            &["INVALID_INPUT: ", "control character"],
        );
        let bad = write(
            d,
            "bad-kind.json",
            &json!([{ "subject": "node-1", "kind": "" }]).to_string(),
        );
        refused(
            d,
            &url,
            &create_args(&bad, "k2", "reimage"),
            EXIT_USAGE,
            &["INVALID_INPUT: ", "the leaf's kind is empty"],
        );
        let missing = d.join("missing.json");
        refused(
            d,
            &url,
            &create_args(missing.to_str().expect("path"), "k2", "reimage"),
            1,
            &["missing.json: No such file or directory"],
        );
        // Nothing was created by any refusal: k2 is still free.
        let fresh = ok_json(d, &url, &create_args(&leaves, "k2", "reimage"));
        assert_eq!(fresh["retry"], false);
    }
}

/// keygen never overwrites; sign-approvers signs a set that the published set's approvers can
/// move to a higher epoch, and refuses bad input and readable keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_keygen_and_sign_approvers_on_both_backends() {
    for db in TestDb::each().await.expect("databases") {
        crate::support::seed_nodes(db.url(), "t1", 12).await;
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let url = db.url().to_string();
        let store = db.store().await.expect("store");
        let alice = keygen(d, "alice.pem");
        let bob = keygen(d, "bob.pem");
        let dave = keygen(d, "dave.pem");
        refused(
            d,
            &url,
            &["batch", "keygen", "--out", alice.key()],
            1,
            &[&format!(
                "INVALID_STATE: {} already exists: batch keygen never overwrites a key",
                alice.pub_file()
            )],
        );
        std::fs::remove_file(alice.pub_file()).expect("rm .pub");
        refused(
            d,
            &url,
            &["batch", "keygen", "--out", alice.key()],
            1,
            &[&format!(
                "INVALID_STATE: {} already exists: batch keygen never overwrites a key",
                alice.key()
            )],
        );
        // A new pair for Alice (her .pub is gone).
        let alice = keygen(d, "alice2.pem");
        publish(&store, &[&alice, &bob], 2, vec![]).await;

        // Alice and Bob sign the next set (adding Dave, with a tier) for epoch 2.
        let approvers = format!(
            "{},{},{}",
            alice.pub_file(),
            bob.pub_file(),
            dave.pub_file()
        );
        let sign = |who: &Approver| {
            ok_json(
                d,
                &url,
                &[
                    "batch",
                    "sign-approvers",
                    "--key",
                    who.key(),
                    "--epoch",
                    "2",
                    "--approvers",
                    &approvers,
                    "--threshold",
                    "2",
                    "--tiers",
                    "5:1",
                    "--unbatched",
                    "0",
                    "--json",
                ],
            )
        };
        let signed: Vec<Value> = [&alice, &bob].into_iter().map(sign).collect();
        let next = ApproverSet::new(
            vec![
                alice.public.clone(),
                bob.public.clone(),
                dave.public.clone(),
            ],
            2,
            vec![Tier {
                max_scope_size: 5,
                threshold: 1,
            }],
            0,
        )
        .expect("next set");
        for s in &signed {
            assert_eq!(s["epoch"], 2);
            assert_eq!(s["approverSetSha256"], next.digest().to_hex());
        }
        assert_eq!(signed[0]["kid"], alice.public.kid().to_hex());
        let signatures: Vec<SetSignature> = signed
            .iter()
            .map(|s| serde_json::from_value(s.clone()).expect("a { kid, sig }"))
            .collect();
        let config = |trust_domain: &str| BundleConfig {
            trust_domain: TrustDomain::new(trust_domain).expect("td"),
            command_signing_roots: vec![vec![1, 2, 3]],
            active_root: vec![1, 2, 3],
            approvers: ApproverSetOffer {
                set: next.clone(),
                epoch: 2,
                signatures: signatures.clone(),
            },
            floor: 0,
            pin: None,
        };
        // Signed for this trust domain, they do not move a deployment of another one.
        let staging = settle_trust_bundle(&store, &SystemClock, &config("staging.example.com"))
            .await
            .expect_err("signatures for another trust domain");
        assert!(
            staging.to_string().contains("approver-set-unsigned"),
            "{staging}"
        );
        let settled = settle_trust_bundle(&store, &SystemClock, &config(TRUST_DOMAIN))
            .await
            .expect("the signed set is taken");
        assert_eq!(settled.outcome, SettleOutcome::Published { previous: 1 });

        // A small batch now needs one approval (tier 5:1): Dave alone approves it.
        let leaves = write(d, "leaves.json", &bound_leaves(2).to_string());
        let created = ok_json(d, &url, &create_args(&leaves, "k1", "reimage"));
        assert_eq!(created["required"], 1);
        let batch = created["batchId"].as_str().expect("id").to_string();
        let approved = ok_json(
            d,
            &url,
            &with(approve_args(&batch, &dave), &["--yes", "--json"]),
        );
        assert_eq!(approved["status"], "approved");

        // Refusals.
        let base = |epoch: &'static str, tiers: &'static str| -> Vec<String> {
            [
                "batch",
                "sign-approvers",
                "--key",
                alice.key(),
                "--epoch",
                epoch,
                "--approvers",
                &approvers,
                "--threshold",
                "2",
                "--tiers",
                tiers,
            ]
            .iter()
            .map(|s| s.to_string())
            .collect()
        };
        let run = |args: Vec<String>, code: i32, needle: &str| {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            refused(d, &url, &args, code, &[needle]);
        };
        run(
            base("0", "5:1"),
            EXIT_USAGE,
            "INVALID_INPUT: --epoch must be 1 or more",
        );
        run(
            base("3", "5-1"),
            EXIT_USAGE,
            r#"INVALID_INPUT: --tiers "5-1": expected MAX:THRESHOLD"#,
        );
        run(
            base("3", "5:3"),
            EXIT_USAGE,
            "INVALID_INPUT: quorum tier 0 needs 3 approvals, more than the threshold 2 that applies above every tier",
        );
        let mut args = base("3", "5:1");
        args[7] = format!("{},{}", alice.pub_file(), alice.key());
        run(
            args,
            EXIT_USAGE,
            &format!(
                "INVALID_INPUT: {} is not a PUBLIC KEY PEM file: no BEGIN line",
                alice.key()
            ),
        );
        chmod(&alice.key, 0o604);
        run(
            base("3", "5:1"),
            1,
            &format!(
                "INVALID_STATE: approver key {} is readable by others (mode 604)",
                alice.key()
            ),
        );
        chmod(&alice.key, 0o600);
        let mut args = base("3", "5:1");
        args.extend(["--trust-domain".to_string(), "Not A Domain".to_string()]);
        run(args, EXIT_USAGE, "INVALID_INPUT: --trust-domain: ");
    }
}
