//! `bcctl audit verify` succeeds only when every leaf is covered by a verified checkpoint
//! signature (issue 17, item 3), running the real binary on real exports of `audit_tamper`'s
//! trail (checkpoints at 20, 36, 47; leaves 47..50 unsealed). Each way of passing off content no
//! signature covers is refused with its own exit code and reason: no checkpoint (5), checkpoints
//! removed (3), an unsealed tail rewritten or extended (4), a truncation to an earlier checkpoint
//! caught with `--checkpoint` or `--at-least-size` (6), a trail that does not extend the
//! checkpoint the auditor saw (3).

use std::path::Path;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use domain::audit::{AuditSigner, Checkpoint};
use serde_json::Value;

use crate::audit_tamper::{
    checkpoint_count, leaf_hash_of, read_lines, trail, write_lines, Run, Trail,
};

/// The exit codes `docs/AUDIT.md` documents.
const EXIT_TAMPERED: i32 = 3;
const EXIT_UNSEALED: i32 = 4;
const EXIT_NO_CHECKPOINT: i32 = 5;
const EXIT_TRUNCATED: i32 = 6;

/// The fault of a `--json` run that must have failed with `code`.
fn fault_with(r: &Run, code: i32) -> Value {
    assert_eq!(r.code, code, "exit code: {} {}", r.stdout, r.stderr);
    let v: Value = serde_json::from_str(r.stdout.trim()).expect("json report");
    assert_eq!(v["ok"], false, "{v}");
    v["fault"].clone()
}

fn ok_report(r: &Run) -> Value {
    assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
    let v: Value = serde_json::from_str(r.stdout.trim()).expect("json report");
    assert_eq!(v["ok"], true, "{v}");
    v
}

/// The event line of leaf `index`.
fn leaf(lines: &[Value], index: usize) -> &Value {
    &lines[1 + checkpoint_count(lines) + index]
}

fn position(lines: &[Value], index: usize) -> i64 {
    leaf(lines, index)["position"].as_i64().expect("position")
}

/// Rewrites leaf `index`'s payload as an attacker would: the recorded leaf hash recomputed.
fn rewrite(lines: &mut [Value], index: usize, payload: &[u8]) {
    let i = 1 + checkpoint_count(lines) + index;
    lines[i]["payload"] = Value::String(B64.encode(payload));
    lines[i]["leaf_hash"] = Value::String(leaf_hash_of(&lines[i]));
}

fn write(file: &Path, text: &str) {
    std::fs::write(file, text).expect("write");
}

#[tokio::test]
async fn a_sealed_export_verifies_and_an_unsealed_tail_needs_allow_unsealed() {
    let t = trail(false).await;
    // The default export ends at the last checkpoint: every leaf covered.
    let file = t.export("sealed.jsonl");
    let v = ok_report(&t.verify_file(&file));
    assert_eq!(v["leaves"], 47);
    assert_eq!(v["signedSize"], 47);
    assert_eq!(v["unsealedLeaves"], 0);
    assert!(v["signedNote"].as_str().expect("note").contains("\n47\n"));

    // With the tail: not ok (exit 4) unless accepted; the partial coverage is in the report.
    let file = t.export_with("tail.jsonl", &["--include-unsealed"]);
    let lines = read_lines(&file);
    let f = fault_with(&t.verify_file(&file), EXIT_UNSEALED);
    assert_eq!(f["kind"], "unsealed_leaves");
    assert_eq!(f["index"], 47);
    assert_eq!(f["position"], position(&lines, 47));
    let v = ok_report(&t.verify_file_with(&file, &["--allow-unsealed"]));
    assert_eq!(v["leaves"], 51);
    assert_eq!(v["signedSize"], 47);
    assert_eq!(v["unsealedLeaves"], 4);
    assert_eq!(v["unsealedFromIndex"], 47);
    assert_eq!(v["unsealedFromPosition"], position(&lines, 47));
}

#[tokio::test]
async fn a_fabricated_trail_without_checkpoint_exits_5() {
    let t = trail(false).await;
    let file = t.export("fabricated.jsonl");
    let lines = read_lines(&file);
    let first = 1 + checkpoint_count(&lines);
    // The first 20 events (before any sealed event), no checkpoint, no key.
    let mut forged = vec![lines[0].clone()];
    forged.extend_from_slice(&lines[first..first + 20]);
    forged[0]["checkpoints"] = Value::from(0);
    forged[0]["events"] = Value::from(20);
    forged[0]["origin"] = Value::Null;
    forged[0]["verifier_key"] = Value::Null;
    write_lines(&file, &forged);
    let r = t.verify_file(&file);
    let f = fault_with(&r, EXIT_NO_CHECKPOINT);
    assert_eq!(f["kind"], "no_checkpoint");
    assert_eq!(
        f["message"],
        "no checkpoint: none of the trail's 20 leaves is covered by a signature"
    );
    // In text too.
    let r = crate::audit_tamper::bcctl(&[
        "audit",
        "verify",
        "--bundle",
        file.to_str().expect("p"),
        "--pin",
        &t.pin,
    ]);
    assert_eq!(r.code, EXIT_NO_CHECKPOINT, "{} {}", r.stdout, r.stderr);
    assert!(
        r.stdout
            .starts_with("NOT COVERED (no_checkpoint): no checkpoint: "),
        "{}",
        r.stdout
    );
}

#[tokio::test]
async fn checkpoints_removed_and_an_event_rewritten_exits_3() {
    let t = trail(false).await;
    let file = t.export("removed.jsonl");
    let mut lines = read_lines(&file);
    let at20 = position(&lines, 20);
    rewrite(&mut lines, 5, b"rewritten");
    lines.drain(1..4);
    lines[0]["checkpoints"] = Value::from(0);
    write_lines(&file, &lines);
    let f = fault_with(&t.verify_file(&file), EXIT_TAMPERED);
    assert_eq!(f["kind"], "checkpoint_removed");
    assert_eq!(f["index"], 20);
    assert_eq!(f["position"], at20);
    assert_eq!(
        f["message"],
        format!(
            "checkpoints were removed: leaf 20 (position {at20}) records checkpoint 1, but the trail carries only 0"
        )
    );
}

#[tokio::test]
async fn the_last_checkpoint_removed_and_its_leaves_rewritten_exits_4() {
    // The sealed export ends before checkpoint 3's own sealed event: without checkpoint 3, its
    // leaves are an unsealed tail, whatever they say.
    let t = trail(false).await;
    let file = t.export("last_removed.jsonl");
    let mut lines = read_lines(&file);
    let at36 = position(&lines, 36);
    rewrite(&mut lines, 40, b"rewritten");
    lines.remove(3);
    lines[0]["checkpoints"] = Value::from(2);
    write_lines(&file, &lines);
    let f = fault_with(&t.verify_file(&file), EXIT_UNSEALED);
    assert_eq!(f["kind"], "unsealed_leaves");
    assert_eq!(f["index"], 36);
    assert_eq!(f["position"], at36);
    assert_eq!(
        f["message"],
        format!(
            "11 unsealed leaves: from index 36 (position {at36}) on, no checkpoint signature covers them (the last checkpoint covers 36); seal them (bcctl audit seal), export without --include-unsealed, or accept them with --allow-unsealed"
        )
    );
}

#[tokio::test]
async fn a_rewritten_unsealed_tail_exits_4() {
    let t = trail(false).await;
    let file = t.export_with("rewritten_tail.jsonl", &["--include-unsealed"]);
    let mut lines = read_lines(&file);
    let at47 = position(&lines, 47);
    rewrite(&mut lines, 49, b"rewritten after the last seal");
    write_lines(&file, &lines);
    let f = fault_with(&t.verify_file(&file), EXIT_UNSEALED);
    assert_eq!(f["kind"], "unsealed_leaves");
    assert_eq!(
        f["message"],
        format!(
            "4 unsealed leaves: from index 47 (position {at47}) on, no checkpoint signature covers them (the last checkpoint covers 47); seal them (bcctl audit seal), export without --include-unsealed, or accept them with --allow-unsealed"
        )
    );
}

#[tokio::test]
async fn an_extended_unsealed_tail_exits_4() {
    let t = trail(false).await;
    let file = t.export("extended.jsonl");
    let mut lines = read_lines(&file);
    // Two forged events after the last checkpoint, indexes and leaf hashes right.
    for (k, at) in [(47u64, 900_001i64), (48, 900_002)] {
        let mut forged = leaf(&lines, 46).clone();
        forged["index"] = Value::from(k);
        forged["position"] = Value::from(at);
        forged["event_id"] = Value::String(format!("{k:032x}"));
        forged["payload"] = Value::String(B64.encode(format!("forged {k}")));
        forged["leaf_hash"] = Value::String(leaf_hash_of(&forged));
        lines.push(forged);
    }
    lines[0]["events"] = Value::from(49);
    write_lines(&file, &lines);
    let f = fault_with(&t.verify_file(&file), EXIT_UNSEALED);
    assert_eq!(f["kind"], "unsealed_leaves");
    assert_eq!(f["index"], 47);
    assert_eq!(f["position"], 900_001);
    assert_eq!(
        f["message"],
        "2 unsealed leaves: from index 47 (position 900001) on, no checkpoint signature covers them (the last checkpoint covers 47); seal them (bcctl audit seal), export without --include-unsealed, or accept them with --allow-unsealed"
    );
}

/// The sealed export cut back to its second checkpoint: a valid shorter trail on its own.
fn truncate_to_second_checkpoint(file: &Path) {
    let lines = read_lines(file);
    let first = 1 + checkpoint_count(&lines);
    let mut cut = vec![lines[0].clone(), lines[1].clone(), lines[2].clone()];
    cut.extend_from_slice(&lines[first..first + 36]);
    cut[0]["checkpoints"] = Value::from(2);
    cut[0]["events"] = Value::from(36);
    write_lines(file, &cut);
}

#[tokio::test]
async fn a_truncation_to_an_earlier_checkpoint_is_caught_with_checkpoint_exits_6() {
    let t = trail(false).await;
    let file = t.export("seen.jsonl");
    // What the auditor keeps from a verification: the report (it carries the signed note).
    let seen = t.dir.join("seen.json");
    let r = t.verify_file(&file);
    ok_report(&r);
    write(&seen, &r.stdout);
    let seen_line = t.dir.join("seen_line.json");
    write(&seen_line, &read_lines(&file)[3].to_string());

    let cut = t.export("cut.jsonl");
    truncate_to_second_checkpoint(&cut);
    // On its own the shorter trail verifies: every leaf it holds is covered.
    ok_report(&t.verify_file(&cut));
    let message = "truncated: the trail's last checkpoint covers 36 leaves, fewer than the 47 of the checkpoint you gave; the trail was cut back or rolled back";
    for known in [&seen, &seen_line] {
        let r = t.verify_file_with(&cut, &["--checkpoint", known.to_str().expect("p")]);
        let f = fault_with(&r, EXIT_TRUNCATED);
        assert_eq!(f["kind"], "truncated");
        assert_eq!(f["message"], message);
    }
    // The untruncated trail extends what was seen.
    ok_report(&t.verify_file_with(&file, &["--checkpoint", seen.to_str().expect("p")]));
}

#[tokio::test]
async fn a_truncation_to_an_earlier_checkpoint_is_caught_with_at_least_size_exits_6() {
    let t = trail(false).await;
    let cut = t.export("cut.jsonl");
    truncate_to_second_checkpoint(&cut);
    let f = fault_with(
        &t.verify_file_with(&cut, &["--at-least-size", "47"]),
        EXIT_TRUNCATED,
    );
    assert_eq!(f["kind"], "truncated");
    assert_eq!(
        f["message"],
        "truncated: the trail's last checkpoint covers 36 leaves, fewer than the 47 of --at-least-size; the trail was cut back or rolled back"
    );
    ok_report(&t.verify_file_with(&cut, &["--at-least-size", "36"]));
}

#[tokio::test]
async fn a_trail_that_does_not_extend_the_seen_checkpoint_exits_3() {
    // The auditor saw a checkpoint of size 36 (signed by the real key) whose root is not the
    // root of this trail's first 36 leaves: the log forked, or leaves were rewritten.
    let t = trail(false).await;
    let file = t.export("trail.jsonl");
    let lines = read_lines(&file);
    let body = lines[2]["signed_note"]
        .as_str()
        .expect("note")
        .rsplit_once("\n\n")
        .expect("shape")
        .0
        .to_string();
    let mut head = Checkpoint::parse(&format!("{body}\n")).expect("body");
    assert_eq!(head.size, 36);
    head.root = [7u8; 32];
    let rng = ring::rand::SystemRandom::new();
    let forked = t.dir.join("forked.note");
    write(&forked, &head.sign(&t.signer(), &rng).expect("sign"));
    let r = t.verify_file_with(&file, &["--checkpoint", forked.to_str().expect("p")]);
    let f = fault_with(&r, EXIT_TAMPERED);
    assert_eq!(f["kind"], "inconsistent_with_checkpoint");
    assert_eq!(
        f["message"],
        "the trail does not extend the checkpoint you gave (size 36): its first 36 leaves have another root, so a leaf before index 36 was changed, inserted, removed or reordered, or the log forked"
    );
    // The real checkpoint 2, as a plain note file: consistent.
    let real = t.dir.join("real.note");
    write(&real, lines[2]["signed_note"].as_str().expect("note"));
    ok_report(&t.verify_file_with(&file, &["--checkpoint", real.to_str().expect("p")]));

    // A note not signed by the pinned key is the auditor's mistake: a usage error.
    let pkcs8 = ring::signature::EcdsaKeyPair::generate_pkcs8(
        &ring::signature::ECDSA_P256_SHA256_ASN1_SIGNING,
        &rng,
    )
    .expect("key");
    let other = AuditSigner::from_pkcs8(pkcs8.as_ref(), &rng).expect("signer");
    write(&forked, &head.sign(&other, &rng).expect("sign"));
    let r = t.verify_file_with(&file, &["--checkpoint", forked.to_str().expect("p")]);
    assert_eq!(r.code, 2, "{} {}", r.stdout, r.stderr);
    assert!(
        r.stderr
            .contains("--checkpoint: not a checkpoint of audit.example.org/audit/acme signed by the pinned audit key"),
        "{}",
        r.stderr
    );
}

#[tokio::test]
async fn the_database_with_unsealed_leaves_is_not_covered() {
    let t: Trail = trail(true).await;
    let f = fault_with(&t.verify_db(&[]), EXIT_UNSEALED);
    assert_eq!(f["kind"], "unsealed_leaves");
    assert_eq!(f["index"], 47);
    let v = ok_report(&t.verify_db(&["--allow-unsealed", "--at-least-size", "47"]));
    assert_eq!(v["unsealedLeaves"], 4);
    let f = fault_with(&t.verify_db(&["--at-least-size", "48"]), EXIT_TRUNCATED);
    assert_eq!(f["kind"], "truncated");
}
