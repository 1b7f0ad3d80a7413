//! `bcctl audit` end to end, running the real binary: a clean trail verifies (database, export,
//! --pin and --pki), proofs verify, and every case of the tamper matrix is caught, named, and
//! exits with the tampered code (3); usage errors exit with 2. What is not covered by a signature
//! (unsealed tails, no checkpoint, truncation) is `audit_coverage`'s, on this file's trail.

use std::path::{Path, PathBuf};
use std::process::Command;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use domain::audit::{AuditPublicKey, AuditSigner, Checkpoint};
use domain::pki::{plaintext_bundle, KeySet, KeySetLifetimes, TrustDomain};
use events::store::testkit::TestDb;
use events::store::testkit_tamper as tamper;
use events::store::{EventStore, ExpectedVersion};
use events::NewEvent;
use projections::audit::ReadFrom;
use serde_json::Value;
use sha2::{Digest, Sha256};

pub(crate) const TENANT: &str = "acme";

pub(crate) struct Trail {
    pub(crate) db: TestDb,
    _dir: tempfile::TempDir,
    pub(crate) dir: PathBuf,
    pub(crate) pki: PathBuf,
    pub(crate) pin: String,
    pub(crate) keys: KeySet,
}

pub(crate) struct Run {
    pub(crate) code: i32,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

pub(crate) fn bcctl(args: &[&str]) -> Run {
    bcctl_with_secret(args, None)
}

/// `bcctl`, with `BC_DEPLOYMENT_SECRET` set to `secret` or removed.
fn bcctl_with_secret(args: &[&str], secret: Option<&str>) -> Run {
    // BCCTL_UNDER_TEST runs these tests against another build (e.g. main's, to see them fail).
    let bin =
        std::env::var_os("BCCTL_UNDER_TEST").unwrap_or_else(|| env!("CARGO_BIN_EXE_bcctl").into());
    let mut cmd = Command::new(bin);
    cmd.args(args)
        .env_remove("DATABASE_URL")
        .env_remove("BC_AUDIT_PIN")
        .env_remove("BC_DEPLOYMENT_SECRET");
    if let Some(secret) = secret {
        cmd.env("BC_DEPLOYMENT_SECRET", secret);
    }
    let out = cmd.output().expect("run bcctl");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn event(tenant: &str, n: u64) -> NewEvent {
    NewEvent::from_bytes(
        events::new_event_id(),
        "test.happened",
        1,
        tenant,
        1_767_225_600_000_000 + n as i64,
        format!("payload of {tenant} number {n}").into_bytes(),
    )
}

async fn append(store: &EventStore, tenant: &str, from: u64, count: u64) {
    for n in from..from + count {
        store
            .append(
                &format!("tenant/{tenant}/s{}", n % 3),
                ExpectedVersion::Any,
                &[event(tenant, n)],
            )
            .await
            .expect("append");
    }
}

/// A tenant with three checkpoints (sizes 20, 36, 47; their sealed events are leaves 20, 36 and
/// 47) and 4 unsealed leaves (47..50), plus another tenant's events interleaved.
pub(crate) async fn trail(postgres: bool) -> Trail {
    let db = if postgres {
        TestDb::postgres().await.expect("pg")
    } else {
        TestDb::sqlite().expect("sqlite")
    };
    let store = db.store().await.expect("store");
    let dir = tempfile::tempdir().expect("dir");
    let keys = KeySet::generate(
        TrustDomain::new("audit.example.org").expect("td"),
        time::OffsetDateTime::now_utc(),
        KeySetLifetimes::default(),
    )
    .expect("keys");
    let pki = dir.path().join("pki.json");
    std::fs::write(&pki, plaintext_bundle(&keys).expect("bundle")).expect("write bundle");
    let pin = AuditPublicKey::from_spki_der(keys.audit_signing.public_key().spki_der())
        .expect("key")
        .pin()
        .to_string();
    let url = db.url().to_string();
    let seal = |tenant: &str| {
        let r = bcctl(&[
            "audit",
            "seal",
            "--tenant",
            tenant,
            "--pki",
            pki.to_str().expect("path"),
            "--database-url",
            &url,
        ]);
        assert_eq!(r.code, 0, "seal: {} {}", r.stdout, r.stderr);
    };
    append(&store, TENANT, 0, 20).await;
    append(&store, "other", 0, 5).await;
    seal(TENANT);
    append(&store, TENANT, 20, 15).await;
    seal(TENANT);
    append(&store, "other", 5, 5).await;
    append(&store, TENANT, 35, 10).await;
    seal(TENANT);
    append(&store, TENANT, 45, 3).await;
    // Sealing the other tenant sequences everything: acme's last sealed event and its 3 later
    // events become leaves 47..50, after acme's last checkpoint.
    seal("other");
    let path = dir.path().to_path_buf();
    Trail {
        db,
        _dir: dir,
        dir: path,
        pki,
        pin,
        keys,
    }
}

impl Trail {
    pub(crate) fn url(&self) -> &str {
        self.db.url()
    }

    pub(crate) fn verify_db(&self, extra: &[&str]) -> Run {
        bcctl(
            &[
                "audit",
                "verify",
                "--tenant",
                TENANT,
                "--database-url",
                self.url(),
                "--pin",
                &self.pin,
                "--json",
            ]
            .iter()
            .chain(extra)
            .copied()
            .collect::<Vec<_>>(),
        )
    }

    pub(crate) fn export(&self, name: &str) -> PathBuf {
        self.export_with(name, &[])
    }

    /// `bcctl audit export` with more arguments (e.g. `--include-unsealed`).
    pub(crate) fn export_with(&self, name: &str, extra: &[&str]) -> PathBuf {
        let out = self.dir.join(name);
        let mut args = vec![
            "audit",
            "export",
            "--tenant",
            TENANT,
            "--out",
            out.to_str().expect("path"),
            "--database-url",
            self.url(),
        ];
        args.extend_from_slice(extra);
        let r = bcctl(&args);
        assert_eq!(r.code, 0, "export: {} {}", r.stdout, r.stderr);
        out
    }

    pub(crate) fn verify_file(&self, file: &Path) -> Run {
        self.verify_file_with(file, &[])
    }

    /// `bcctl audit verify --bundle FILE --pin PIN --json` with more arguments.
    pub(crate) fn verify_file_with(&self, file: &Path, extra: &[&str]) -> Run {
        let mut args = vec![
            "audit",
            "verify",
            "--bundle",
            file.to_str().expect("path"),
            "--pin",
            &self.pin,
            "--json",
        ];
        args.extend_from_slice(extra);
        bcctl(&args)
    }

    pub(crate) fn signer(&self) -> AuditSigner {
        AuditSigner::from_pkcs8(
            self.keys.audit_signing.pkcs8_der(),
            &ring::rand::SystemRandom::new(),
        )
        .expect("signer")
    }
}

/// The fault of a `--json` verify run that must have failed as tampered.
pub(crate) fn fault(r: &Run) -> Value {
    assert_eq!(
        r.code, 3,
        "expected exit 3 (tampered): {} {}",
        r.stdout, r.stderr
    );
    let v: Value = serde_json::from_str(r.stdout.trim()).expect("json report");
    assert_eq!(v["ok"], false);
    v["fault"].clone()
}

pub(crate) fn read_lines(file: &Path) -> Vec<Value> {
    std::fs::read_to_string(file)
        .expect("read export")
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect()
}

pub(crate) fn write_lines(file: &Path, lines: &[Value]) {
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(file, text).expect("write export");
}

pub(crate) fn checkpoint_count(lines: &[Value]) -> usize {
    lines[0]["checkpoints"].as_u64().expect("count") as usize
}

/// The leaf hash of an event line, as an attacker would recompute it.
pub(crate) fn leaf_hash_of(line: &Value) -> String {
    let payload = B64
        .decode(line["payload"].as_str().expect("payload"))
        .expect("b64");
    let event_id: [u8; 16] = hex::decode(line["event_id"].as_str().expect("id"))
        .expect("hex")
        .try_into()
        .expect("16");
    let leaf = domain::audit::AuditLeaf {
        tenant_id: line["tenant_id"].as_str().expect("tenant"),
        index: line["index"].as_u64().expect("index"),
        position: line["position"].as_i64().expect("position"),
        stream_id: line["stream_id"].as_str().expect("stream"),
        stream_version: line["stream_version"].as_i64().expect("version"),
        event_type: line["event_type"].as_str().expect("type"),
        schema_version: line["schema_version"].as_u64().expect("schema") as u32,
        occurred_at_us: line["occurred_at_us"].as_i64().expect("at"),
        event_id,
        payload_sha256: Sha256::digest(&payload).into(),
        actor: match (line["actor_id"].as_str(), line["actor_role"].as_str()) {
            (Some(id), Some(role)) => Some(domain::audit::LeafActor { id, role }),
            _ => None,
        },
    };
    hex::encode(leaf.leaf_hash().expect("leaf"))
}

pub(crate) async fn position_of(url: &str, index: u64) -> i64 {
    let store = EventStore::connect(url).await.expect("connect");
    let leaf = projections::audit::read::leaves(&mut ReadFrom::Store(&store), "acme", index, 1)
        .await
        .expect("q")
        .pop()
        .expect("the leaf");
    assert_eq!(leaf.index, index);
    leaf.position
}

#[tokio::test]
async fn clean_trail_verifies_every_way() {
    let t = trail(false).await;
    // The store holds 4 leaves after the last checkpoint (its own sealed event, 3 events):
    // accepted only when asked, and reported.
    let r = t.verify_db(&["--allow-unsealed"]);
    assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
    let v: Value = serde_json::from_str(r.stdout.trim()).expect("json");
    assert_eq!(v["ok"], true);
    assert_eq!(v["checkpoints"], 3);
    assert_eq!(v["signedSize"], 47);
    assert_eq!(v["unsealedLeaves"], 4);
    assert_eq!(v["unsealedFromIndex"], 47);
    let r = t.verify_db(&[]);
    assert_eq!(
        r.code, 4,
        "not every leaf is covered: {} {}",
        r.stdout, r.stderr
    );
    let file = t.export("trail.jsonl");
    let r = t.verify_file(&file);
    assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
    let r = bcctl(&[
        "audit",
        "verify",
        "--bundle",
        file.to_str().expect("p"),
        "--pki",
        t.pki.to_str().expect("p"),
    ]);
    assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
    assert!(
        r.stdout
            .starts_with("OK: tenant acme: every leaf is covered by a verified signature: 47 leaves, 3 checkpoints, signed size 47 root "),
        "{}",
        r.stdout
    );

    // An inclusion proof, checked; then a tampered one.
    let position = position_of(t.url(), 7).await;
    let r = bcctl(&[
        "audit",
        "prove",
        "--tenant",
        TENANT,
        "--position",
        &position.to_string(),
        "--database-url",
        t.url(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let proof_file = t.dir.join("proof.json");
    std::fs::write(&proof_file, &r.stdout).expect("write");
    let r = bcctl(&[
        "audit",
        "verify-proof",
        proof_file.to_str().expect("p"),
        "--pin",
        &t.pin,
    ]);
    assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
    let mut proof: Value =
        serde_json::from_str(&std::fs::read_to_string(&proof_file).expect("r")).expect("json");
    proof["event"]["payload"] = Value::String(B64.encode(b"another payload"));
    std::fs::write(&proof_file, proof.to_string()).expect("write");
    let r = bcctl(&[
        "audit",
        "verify-proof",
        proof_file.to_str().expect("p"),
        "--pin",
        &t.pin,
    ]);
    assert_eq!(r.code, 3, "{} {}", r.stdout, r.stderr);
    assert!(r.stderr.contains("leaf 7"), "{}", r.stderr);
}

#[tokio::test]
async fn a_sealed_pki_bundle_is_authenticated_with_the_secret() {
    const SECRET: &str = "an audit test deployment secret, long enough";
    let t = trail(false).await;
    let sealed = t.dir.join("sealed.json");
    let secret = domain::pki::DeploymentSecret::new(SECRET).expect("secret");
    std::fs::write(
        &sealed,
        domain::pki::seal_bundle(&t.keys, &secret).expect("seal"),
    )
    .expect("write");
    let file = t.export("trail.jsonl");
    let args = [
        "audit",
        "verify",
        "--bundle",
        file.to_str().expect("p"),
        "--pki",
        sealed.to_str().expect("p"),
    ];
    let warning = "the PKI bundle's public half is not authenticated";
    // With the secret: the audit key comes from an authenticated bundle, no warning.
    let r = bcctl_with_secret(&args, Some(SECRET));
    assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
    assert!(!r.stderr.contains(warning), "{}", r.stderr);
    // Without: still verifies, with the warning.
    let r = bcctl_with_secret(&args, None);
    assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
    assert!(r.stderr.contains(warning), "{}", r.stderr);
    // Another secret, or one too short: a usage error, never a silent unauthenticated read.
    let r = bcctl_with_secret(&args, Some("another deployment secret, also long enough"));
    assert_eq!(r.code, 2, "{} {}", r.stdout, r.stderr);
    assert!(r.stderr.contains("--pki"), "{}", r.stderr);
    let r = bcctl_with_secret(&args, Some("short"));
    assert_eq!(r.code, 2, "{} {}", r.stdout, r.stderr);
    assert!(r.stderr.contains("BC_DEPLOYMENT_SECRET"), "{}", r.stderr);
}

#[tokio::test]
async fn usage_errors_exit_2() {
    let r = bcctl(&["audit", "verify", "--tenant", TENANT]);
    assert_eq!(r.code, 2, "no key: {}", r.stderr);
    let r = bcctl(&[
        "audit",
        "verify",
        "--tenant",
        TENANT,
        "--database-url",
        "sqlite:///nonexistent/x.db",
        "--pin",
        "md5/abc",
    ]);
    assert_eq!(r.code, 2, "bad pin: {}", r.stderr);
    let r = bcctl(&["audit", "verify", "--pin", "sha256/AAAA"]);
    assert_eq!(r.code, 2, "no source: {}", r.stderr);
}

async fn payload_byte_changed_in_the_database(postgres: bool) {
    let t = trail(postgres).await;
    let position = position_of(t.url(), 25).await;
    tamper::overwrite_payload_byte(t.url(), position)
        .await
        .expect("tamper");
    let f = fault(&t.verify_db(&[]));
    assert_eq!(f["kind"], "tampered_leaf", "{f}");
    assert_eq!(f["index"], 25);
    assert_eq!(f["position"], position);
}

#[tokio::test]
async fn payload_byte_changed_in_the_database_sqlite() {
    payload_byte_changed_in_the_database(false).await;
}

#[tokio::test]
async fn payload_byte_changed_in_the_database_postgres() {
    payload_byte_changed_in_the_database(true).await;
}

#[tokio::test]
async fn event_deleted_in_the_database() {
    let t = trail(false).await;
    let position = position_of(t.url(), 11).await;
    tamper::delete_event(t.url(), position)
        .await
        .expect("tamper");
    let f = fault(&t.verify_db(&[]));
    assert_eq!(f["kind"], "missing_event", "{f}");
    assert_eq!(f["index"], 11);
    assert_eq!(f["position"], position);
}

#[tokio::test]
async fn event_deleted_with_its_leaf_row() {
    let t = trail(false).await;
    let position = position_of(t.url(), 11).await;
    tamper::delete_event_and_leaf(t.url(), position)
        .await
        .expect("tamper");
    let f = fault(&t.verify_db(&[]));
    assert_eq!(f["kind"], "missing_leaf", "{f}");
    assert_eq!(f["index"], 11);
}

#[tokio::test]
async fn two_events_swapped_in_the_database() {
    let t = trail(false).await;
    let (p5, p6) = (position_of(t.url(), 5).await, position_of(t.url(), 6).await);
    tamper::swap_leaf_positions(t.url(), p5, p6)
        .await
        .expect("tamper");
    let f = fault(&t.verify_db(&[]));
    assert_eq!(f["kind"], "tampered_leaf", "{f}");
    assert_eq!(f["index"], 5);
    assert_eq!(f["position"], p6);
}

#[tokio::test]
async fn two_events_swapped_in_the_export() {
    let t = trail(false).await;
    let file = t.export("swapped.jsonl");
    let mut lines = read_lines(&file);
    let first = 1 + checkpoint_count(&lines);
    lines.swap(first + 5, first + 6);
    write_lines(&file, &lines);
    let f = fault(&t.verify_file(&file));
    assert_eq!(f["kind"], "missing_leaf", "{f}");
    assert_eq!(f["index"], 5);
}

#[tokio::test]
async fn event_inserted_in_the_export() {
    // A careful attacker: a forged event at index 30, every later index shifted and every later
    // leaf hash recomputed, the header's count raised. The signed root no longer matches.
    let t = trail(false).await;
    let file = t.export("inserted.jsonl");
    let mut lines = read_lines(&file);
    let first = 1 + checkpoint_count(&lines);
    let mut forged = lines[first + 30].clone();
    forged["payload"] = Value::String(B64.encode(b"forged"));
    forged["event_id"] = Value::String("00".repeat(16));
    lines.insert(first + 30, forged);
    for line in lines.iter_mut().skip(first + 31) {
        let i = line["index"].as_u64().expect("index");
        line["index"] = Value::from(i + 1);
    }
    for line in lines.iter_mut().skip(first + 30) {
        line["leaf_hash"] = Value::String(leaf_hash_of(line));
    }
    let n = lines[0]["events"].as_u64().expect("n");
    lines[0]["events"] = Value::from(n + 1);
    write_lines(&file, &lines);
    let f = fault(&t.verify_file(&file));
    assert_eq!(f["kind"], "root_mismatch", "{f}");
    assert_eq!(f["checkpoint"], 2);
    assert_eq!(
        f["index"], 20,
        "the first leaf the signed root no longer covers"
    );
}

#[tokio::test]
async fn event_duplicated_in_the_export() {
    // A second copy of an event at an index already taken.
    let t = trail(false).await;
    let file = t.export("dup.jsonl");
    let mut lines = read_lines(&file);
    let first = 1 + checkpoint_count(&lines);
    let copy = lines[first + 9].clone();
    lines.insert(first + 10, copy);
    write_lines(&file, &lines);
    let f = fault(&t.verify_file(&file));
    assert_eq!(f["kind"], "extra_leaf", "{f}");
    assert_eq!(f["index"], 9);
}

#[tokio::test]
async fn tail_truncated() {
    let t = trail(false).await;
    let file = t.export("truncated.jsonl");
    let mut lines = read_lines(&file);
    let first = 1 + checkpoint_count(&lines);
    lines.truncate(first + 40);
    write_lines(&file, &lines);
    let f = fault(&t.verify_file(&file));
    assert_eq!(f["kind"], "missing_leaf", "{f}");
    assert_eq!(f["index"], 40);
}

#[tokio::test]
async fn checkpoint_signature_altered() {
    let t = trail(false).await;
    let file = t.export("badsig.jsonl");
    let mut lines = read_lines(&file);
    let note = lines[2]["signed_note"].as_str().expect("note").to_string();
    let (text, sig_line) = note.rsplit_once("\n\n").expect("note shape");
    let (name, sig) = sig_line.trim_end().rsplit_once(' ').expect("sig line");
    let mut raw = B64.decode(sig).expect("b64");
    let last = raw.len() - 1;
    raw[last] ^= 0x01;
    lines[2]["signed_note"] = Value::String(format!("{text}\n\n{name} {}\n", B64.encode(raw)));
    write_lines(&file, &lines);
    let f = fault(&t.verify_file(&file));
    assert_eq!(f["kind"], "bad_signature", "{f}");
    assert_eq!(f["checkpoint"], 2);
    assert_eq!(f["index"], 20);
}

#[tokio::test]
async fn checkpoint_signed_by_another_key() {
    let t = trail(false).await;
    let file = t.export("otherkey.jsonl");
    let mut lines = read_lines(&file);
    let rng = ring::rand::SystemRandom::new();
    let pkcs8 = ring::signature::EcdsaKeyPair::generate_pkcs8(
        &ring::signature::ECDSA_P256_SHA256_ASN1_SIGNING,
        &rng,
    )
    .expect("key");
    let other = AuditSigner::from_pkcs8(pkcs8.as_ref(), &rng).expect("signer");
    let note = lines[1]["signed_note"].as_str().expect("note").to_string();
    let (text, _) = note.rsplit_once("\n\n").expect("shape");
    let cp = Checkpoint::parse(&format!("{text}\n")).expect("body");
    lines[1]["signed_note"] = Value::String(cp.sign(&other, &rng).expect("sign"));
    write_lines(&file, &lines);
    let f = fault(&t.verify_file(&file));
    assert_eq!(f["kind"], "wrong_key", "{f}");
    assert_eq!(f["checkpoint"], 1);

    // The whole export re-signed with the other key and its verifier key swapped in: the pin
    // refuses it.
    lines[0]["verifier_key"] = Value::String(other.public_key().to_verifier_key());
    write_lines(&file, &lines);
    let f = fault(&t.verify_file(&file));
    assert_eq!(f["kind"], "key_or_origin", "{f}");
    assert!(f["message"].as_str().expect("m").contains("pinned"), "{f}");
}

pub(crate) fn note_sha256(note: &str) -> String {
    hex::encode(Sha256::digest(note.as_bytes()))
}

#[tokio::test]
async fn fork_two_checkpoints_of_one_size() {
    let t = trail(false).await;
    let file = t.export("fork.jsonl");
    let mut lines = read_lines(&file);
    let rng = ring::rand::SystemRandom::new();
    let cp2 = lines[2].clone();
    let body = cp2["signed_note"]
        .as_str()
        .expect("note")
        .rsplit_once("\n\n")
        .expect("s")
        .0
        .to_string();
    let mut head = Checkpoint::parse(&format!("{body}\n")).expect("body");
    head.root = [7u8; 32];
    let forged_note = head.sign(&t.signer(), &rng).expect("sign");
    let mut forged = cp2.clone();
    forged["seq"] = Value::from(3);
    forged["root_hash"] = Value::String(hex::encode([7u8; 32]));
    forged["signed_note"] = Value::String(forged_note);
    forged["previous_note_sha256"] =
        Value::String(note_sha256(cp2["signed_note"].as_str().expect("n")));
    forged["consistency_proof"] = Value::Array(vec![]);
    lines.insert(3, forged);
    let n = checkpoint_count(&lines);
    lines[0]["checkpoints"] = Value::from(n + 1);
    write_lines(&file, &lines);
    let f = fault(&t.verify_file(&file));
    assert_eq!(f["kind"], "fork", "{f}");
    assert_eq!(f["checkpoint"], 3);
}

#[tokio::test]
async fn checkpoint_not_extending_the_previous_one() {
    let t = trail(false).await;
    let file = t.export("notext.jsonl");
    let mut lines = read_lines(&file);
    let rng = ring::rand::SystemRandom::new();
    let body = lines[3]["signed_note"]
        .as_str()
        .expect("note")
        .rsplit_once("\n\n")
        .expect("s")
        .0
        .to_string();
    let mut head = Checkpoint::parse(&format!("{body}\n")).expect("body");
    head.root = [9u8; 32];
    lines[3]["signed_note"] = Value::String(head.sign(&t.signer(), &rng).expect("sign"));
    lines[3]["root_hash"] = Value::String(hex::encode([9u8; 32]));
    write_lines(&file, &lines);
    let f = fault(&t.verify_file(&file));
    assert_eq!(f["kind"], "not_extension", "{f}");
    assert_eq!(f["checkpoint"], 3);
    assert_eq!(f["index"], 36);
}

#[tokio::test]
async fn checkpoint_chain_broken() {
    let t = trail(false).await;
    let file = t.export("chain.jsonl");
    let mut lines = read_lines(&file);
    lines[3]["previous_note_sha256"] = Value::String("ab".repeat(32));
    write_lines(&file, &lines);
    let f = fault(&t.verify_file(&file));
    assert_eq!(f["kind"], "broken_chain", "{f}");
    assert_eq!(f["checkpoint"], 3);
}
