//! The approvers' side in direct mode, through the real binary on both backends: approvals are
//! verified in the DEPLOYMENT's trust domain (its PKI bundle's), whatever the approver says;
//! `batch list`, `batch scope` and `batch submit-approval` (what the admin API offers
//! approvers); the caller of `batch create` / `batch cancel` is the actor, never a flag.

use std::path::Path;
use std::process::{Command, Output};

use base64::Engine;
use commands::quorum::{settle_trust_bundle, BundleConfig};
use commands::SystemClock;
use domain::quorum::{
    batch_approval_signing_input, ApproverKey, ApproverSet, ApproverSetOffer, BatchId, ScopeHash,
    TrustDomain,
};
use events::store::testkit::TestDb;
use events::store::EventStore;
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, ECDSA_P256_SHA256_ASN1_SIGNING};
use serde_json::{json, Value};

use crate::batch_cli::{as_text, bundle_for, local_actor_id};

const TD: &str = "approvers.example.com";

fn bcctl(dir: &Path, url: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_bcctl"));
    cmd.current_dir(dir)
        .env("DATABASE_URL", url)
        .env("BC_PKI_BUNDLE", bundle_for(TD))
        .env("USER", "olga")
        .env_remove("BC_TRUST_DOMAIN")
        .env_remove("BC_DEPLOYMENT_SECRET")
        .env_remove("BC_DEPLOYMENT_SECRET_FILE")
        .args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run bcctl")
}

fn ok(dir: &Path, url: &str, args: &[&str]) -> Value {
    let out = bcctl(dir, url, args, &[]);
    assert!(
        out.status.success(),
        "bcctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// A refusal: exit `code`, standard error exactly `bcctl: <message>`, nothing on stdout.
fn refused_exactly(out: &Output, code: i32, message: &str) {
    let err = as_text(&String::from_utf8_lossy(&out.stderr), code);
    assert_eq!(out.status.code(), Some(code), "{err}");
    assert_eq!(err.trim_end(), format!("bcctl: {message}"));
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

/// Publishes `keys` (threshold `threshold`) as the deployment's approver set, as serve does.
async fn publish(store: &EventStore, keys: Vec<ApproverKey>, threshold: u32) {
    settle_trust_bundle(
        store,
        &SystemClock,
        &BundleConfig {
            trust_domain: TrustDomain::new(TD).expect("td"),
            command_signing_roots: vec![vec![1, 2, 3]],
            active_root: vec![1, 2, 3],
            approvers: ApproverSetOffer {
                set: ApproverSet::new(keys, threshold, vec![], 0).expect("set"),
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

/// Signs the batch's approval input for `td` with the PKCS#8 PEM key at `key`.
fn sign_for(key: &Path, shown: &Value, td: &str) -> String {
    let text = std::fs::read_to_string(key).expect("key");
    let body: String = text.lines().filter(|l| !l.starts_with("-----")).collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(body)
        .expect("base64");
    let pair =
        EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &der, &SystemRandom::new())
            .expect("P-256 key");
    let message = batch_approval_signing_input(
        &BatchId::from_hex(shown["batchId"].as_str().expect("id")).expect("id"),
        &ScopeHash::from_hex(shown["scopeRoot"].as_str().expect("root")).expect("root"),
        u32::try_from(shown["size"].as_u64().expect("size")).expect("size"),
        shown["notAfterUs"].as_i64().expect("end"),
        &TrustDomain::new(td).expect("td"),
    );
    let sig = pair.sign(&SystemRandom::new(), &message).expect("sign");
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sig.as_ref())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_are_checked_in_the_deployments_trust_domain_on_both_backends() {
    for db in TestDb::each().await.expect("databases") {
        crate::support::seed_nodes(db.url(), "t1", 4).await;
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let url = db.url().to_string();
        let store = db.store().await.expect("store");
        let mut keys = Vec::new();
        for name in ["a.pem", "b.pem"] {
            ok(d, &url, &["batch", "keygen", "--out", name, "--json"]);
            keys.push(public(d, name));
        }
        publish(&store, keys.clone(), 2).await;
        let kid_a = keys[0].kid().to_hex();

        // --caller is gone: the caller is the actor (the local user in direct mode).
        std::fs::write(
            d.join("leaves.json"),
            json!([{ "subject": "node-1", "kind": "node.reimage",
                     "payload_sha256": "ab".repeat(32) },
                   { "subject": "node-2", "kind": "node.reimage",
                     "payload_sha256": "cd".repeat(32) }])
            .to_string(),
        )
        .expect("leaves");
        let create = [
            "batch",
            "create",
            "--tenant",
            "t1",
            "--idempotency-key",
            "k1",
            "--reason",
            "reimage",
            "--leaves",
            "leaves.json",
            "--json",
        ];
        let mut with_caller = create.to_vec();
        with_caller.extend(["--caller", "mallory"]);
        let out = bcctl(d, &url, &with_caller, &[]);
        assert_eq!(
            out.status.code(),
            Some(2),
            "--caller is refused by the parser"
        );
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("unexpected argument '--caller'"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let created = ok(d, &url, &create);
        let batch = created["batchId"].as_str().expect("id").to_string();
        let actor = local_actor_id("olga");
        assert_eq!(
            batch,
            BatchId::derive("t1", &actor, "k1").expect("id").to_hex()
        );

        // list: the pending batch, with the deployment's trust domain.
        let listed = ok(d, &url, &["batch", "list", "--status", "pending", "--json"]);
        let batches = listed["batches"].as_array().expect("batches");
        assert_eq!(batches.len(), 1, "{listed}");
        assert_eq!(batches[0]["batchId"], batch.as_str());
        assert_eq!(batches[0]["caller"], actor.as_str());
        assert_eq!(batches[0]["trustDomain"], TD);
        let none = ok(
            d,
            &url,
            &["batch", "list", "--status", "approved", "--json"],
        );
        assert_eq!(none["batches"], json!([]));
        refused_exactly(
            &bcctl(d, &url, &["batch", "list", "--status", "done"], &[]),
            2,
            r#"INVALID_INPUT: --status "done": expected pending, approved, expired or cancelled"#,
        );

        // scope: every leaf at its index, digests as created.
        let scope = ok(d, &url, &["batch", "scope", "--batch", &batch, "--json"]);
        assert_eq!(scope["size"], 2);
        assert_eq!(scope["scopeRoot"], created["scopeRoot"]);
        let entries = scope["entries"].as_array().expect("entries");
        assert_eq!(entries.len(), 2);
        for (i, e) in entries.iter().enumerate() {
            assert_eq!(e["index"], i);
            assert_eq!(e["kind"], "node.reimage");
            assert_eq!(e["payload"], Value::Null);
        }
        let mut digests: Vec<&str> = entries
            .iter()
            .map(|e| e["payloadSha256"].as_str().expect("digest"))
            .collect();
        digests.sort();
        assert_eq!(digests, vec!["ab".repeat(32), "cd".repeat(32)]);

        // The old bug: an approver's own --trust-domain (or BC_TRUST_DOMAIN) is not the
        // deployment's: refused before anything is signed.
        let approve = [
            "batch", "approve", "--batch", &batch, "--key", "a.pem", "--yes",
        ];
        let wrong = format!(
            "INVALID_INPUT: --trust-domain staging.example.com is not this deployment's (its PKI bundle's) trust domain {TD}: an approval bound to staging.example.com would never admit a command there"
        );
        refused_exactly(
            &bcctl(
                d,
                &url,
                &approve,
                &[("BC_TRUST_DOMAIN", "staging.example.com")],
            ),
            2,
            &wrong,
        );
        let shown = ok(d, &url, &["batch", "show", "--batch", &batch, "--json"]);
        assert_eq!(shown["held"], 0, "nothing was recorded");
        assert_eq!(shown["trustDomain"], TD);

        // A signature made for another trust domain, submitted: the deployment refuses it,
        // naming its own trust domain.
        let staging_sig = sign_for(&d.join("a.pem"), &shown, "staging.example.com");
        let submit = |sig: &str| {
            bcctl(
                d,
                &url,
                &[
                    "batch",
                    "submit-approval",
                    "--batch",
                    &batch,
                    "--kid",
                    &kid_a,
                    "--sig",
                    sig,
                    "--json",
                ],
                &[],
            )
        };
        refused_exactly(
            &submit(&staging_sig),
            1,
            &format!(
                "PERMISSION_DENIED: the approval by {kid_a} does not verify for trust domain {TD} (this deployment's) over this batch's id, root, size and end: an approval signed for another trust domain or another batch is refused; sign it with `bcctl batch approve` against this deployment"
            ),
        );
        refused_exactly(
            &submit("!!"),
            2,
            "INVALID_INPUT: --sig: not base64url (an ASN.1 DER ECDSA signature)",
        );
        // The right trust domain: recorded once, a repeat records nothing.
        let good = sign_for(&d.join("a.pem"), &shown, TD);
        let first = submit(&good);
        assert!(
            first.status.success(),
            "{}",
            String::from_utf8_lossy(&first.stderr)
        );
        let first: Value = serde_json::from_slice(&first.stdout).expect("JSON");
        assert_eq!(
            first,
            json!({ "batchId": batch, "kid": kid_a, "signed": true, "recorded": true,
                    "held": 1, "required": 2, "status": "pending" })
        );
        let again: Value = serde_json::from_slice(&submit(&good).stdout).expect("JSON");
        assert_eq!(again["recorded"], false);
        assert_eq!(again["held"], 1);

        // approve with the deployment's trust domain (no flag: read from the bundle) releases it.
        let done = ok(
            d,
            &url,
            &[
                "batch", "approve", "--batch", &batch, "--key", "b.pem", "--yes", "--json",
            ],
        );
        assert_eq!(done["status"], "approved", "{done}");
        assert_eq!(done["held"], 2);

        // Without a readable bundle there is no trust domain to check in: refused.
        let out = bcctl(
            d,
            &url,
            &approve,
            &[("BC_PKI_BUNDLE", "/nonexistent/pki.json")],
        );
        let err = as_text(&String::from_utf8_lossy(&out.stderr), 1);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.starts_with("bcctl: INVALID_STATE: approvals are checked in the deployment's own trust domain, read from its PKI bundle, which cannot be read: "),
            "{err}"
        );

        // cancel records the actor as who cancelled.
        let created = ok(
            d,
            &url,
            &[
                "batch",
                "create",
                "--tenant",
                "t1",
                "--idempotency-key",
                "k2",
                "--reason",
                "second",
                "--leaves",
                "leaves.json",
                "--json",
            ],
        );
        let second = created["batchId"].as_str().expect("id");
        let cancelled = ok(
            d,
            &url,
            &[
                "batch",
                "cancel",
                second,
                "--reason",
                "not needed",
                "--json",
            ],
        );
        assert_eq!(cancelled["cancelledBy"], actor.as_str());
        assert_eq!(cancelled["status"], "cancelled");
    }
}
