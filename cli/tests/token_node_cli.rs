//! `bcctl token …`, `bcctl node …` and `bcctl replay` through the real binary, on both backends:
//! JSON output, text tables, clear errors with exit code 1 on bad input or unknown ids.

use crate::support;

use std::path::Path;
use std::sync::Arc;
use support::{bcctl_at, ok_json};

use commands::identity::{IdentityConfig, JoinService};
use commands::SystemClock;
use domain::pki::{build_csr, open_bundle, seal_token, KeyRole, PrivateKey, TokenSecret};
use events::store::testkit::TestDb;

fn fails(dir: &Path, url: &str, args: &[&str], needle: &str) {
    fails_with(dir, url, args, needle, 1)
}

/// Input the verb itself finds invalid: a usage error, exit 2 (docs/CLI.md).
fn usage(dir: &Path, url: &str, args: &[&str], needle: &str) {
    fails_with(dir, url, args, needle, 2)
}

fn fails_with(dir: &Path, url: &str, args: &[&str], needle: &str, code: i32) {
    let out = bcctl_at(dir, url, args);
    assert_eq!(
        out.status.code(),
        Some(code),
        "bcctl {args:?} must exit {code}"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(needle),
        "bcctl {args:?}: {err:?} lacks {needle:?}"
    );
}

/// Joins a node with the token `secret` through a JoinService on `db` and the plaintext bundle
/// `pki init --plaintext` wrote in `d/.bcctl`, claiming `macs`; its node id.
pub(crate) async fn join_with(db: &TestDb, d: &Path, secret: &str, macs: &[&str]) -> String {
    let bytes = std::fs::read(d.join(".bcctl/pki.json")).expect("bundle");
    let keys = open_bundle(&bytes, None)
        .expect("bundle")
        .keys
        .expect("plaintext keys");
    let td = keys.trust_domain.clone();
    let recipient = keys.join_encryption.public_key().clone();
    let store = db.store().await.expect("store");
    let svc = JoinService::new(
        store,
        Arc::new(keys),
        Arc::new(SystemClock),
        IdentityConfig::new(td),
    )
    .expect("svc");
    let key = PrivateKey::generate(KeyRole::Node).expect("key");
    let csr = build_csr(&key).expect("csr");
    let sealed = seal_token(
        &recipient,
        &TokenSecret::parse(secret).expect("secret"),
        &domain::identity::sha256(&csr),
    )
    .expect("seal");
    let signed = gateway::wire::join(
        svc.joins(),
        &proto::JoinRequest {
            csr,
            attestor: String::new(),
            sealed_token: sealed.as_bytes().to_vec(),
            role: "node".into(),
            claims: Some(proto::HardwareClaims {
                macs: macs.iter().map(|m| m.to_string()).collect(),
                ..Default::default()
            }),
            attestation: Vec::new(),
            agent_version: String::new(),
        },
    )
    .await
    .expect("join");
    assert!(!signed.response.is_empty());
    svc.list_nodes(None)
        .await
        .expect("nodes")
        .into_iter()
        .max_by_key(|n| n.position)
        .expect("the node joined")
        .node_id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_and_node_commands_on_both_backends() {
    for db in TestDb::each().await.expect("databases") {
        db.store().await.expect("the store, migrated"); // the verbs never create one
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let url = db.url().to_string();
        let init = bcctl_at(
            d,
            &url,
            &[
                "pki",
                "init",
                "--trust-domain",
                "cli.example.com",
                "--plaintext",
            ],
        );
        assert!(init.status.success());

        // token create: secret once, the stored token; flags parsed.
        let created = ok_json(
            d,
            &url,
            &[
                "token",
                "create",
                "--tenant",
                "t1",
                "--site",
                "s1",
                "--pool",
                "p1",
                "--role",
                "node",
                "--uses",
                "3",
                "--expires-in",
                "2h",
                "--expect-mac",
                "aa:bb:cc:dd:ee:ff",
                "--json",
            ],
        );
        let secret = created["secret"].as_str().expect("secret").to_string();
        assert!(secret.starts_with("bcjt_"));
        let token = &created["token"];
        let token_id = token["tokenId"].as_str().expect("id").to_string();
        assert_eq!(token["usesLeft"], 3);
        assert_eq!(token["expectMac"], "aa:bb:cc:dd:ee:ff");
        assert_eq!(token["allowReclaim"], false);
        assert_eq!(
            token["expiresAtUs"].as_i64().unwrap_or(0) - token["createdAtUs"].as_i64().unwrap_or(0),
            7_200_000_000
        );
        assert!(
            !serde_json::to_string(&ok_json(d, &url, &["token", "list", "--json"]))
                .unwrap_or_default()
                .contains(&secret),
            "the secret is never listed"
        );
        let listed = ok_json(d, &url, &["token", "list", "--tenant", "t1", "--json"]);
        assert_eq!(listed.as_array().map(Vec::len), Some(1));
        let other = ok_json(d, &url, &["token", "list", "--tenant", "t2", "--json"]);
        assert_eq!(other.as_array().map(Vec::len), Some(0));

        // Text table.
        let text = bcctl_at(d, &url, &["token", "list"]);
        let text = String::from_utf8_lossy(&text.stdout);
        assert!(text.starts_with("TOKEN"), "{text}");
        assert!(text.contains(&token_id));

        // Bad input: exit 2, the flag named.
        usage(
            d,
            &url,
            &[
                "token", "create", "--tenant", "t1", "--site", "s1", "--role", "admin",
            ],
            "--role",
        );
        usage(
            d,
            &url,
            &[
                "token",
                "create",
                "--tenant",
                "t1",
                "--site",
                "s1",
                "--expires-in",
                "soon",
            ],
            "--expires-in",
        );
        fails(
            d,
            &url,
            &[
                "token", "create", "--tenant", "t1", "--site", "s1", "--uses", "0",
            ],
            "INVALID_INPUT",
        );
        // The old flag is refused, pointing at its replacement (a claimed hardware key reclaims
        // nothing any more).
        usage(
            d,
            &url,
            &[
                "token",
                "create",
                "--tenant",
                "t1",
                "--site",
                "s1",
                "--allow-reclaim",
            ],
            "--reclaim NODE",
        );
        fails(d, &url, &["token", "revoke", "tok_nope"], "tok_nope");
        fails(d, &url, &["node", "show", "node_nope"], "no node node_nope");
        fails(d, &url, &["node", "revoke", "node_nope"], "node_nope");
        fails_with(d, &url, &["replay", "--at", "yesterday"], "--at", 2);
        fails(
            d,
            &url,
            &["token", "list", "--pki", "missing.json"],
            "missing.json",
        );

        // A node joins (through the JoinService on the same store and bundle keys).
        join_with(&db, d, &secret, &["AA:BB:CC:DD:EE:FF"]).await;

        let nodes = ok_json(d, &url, &["node", "list", "--json"]);
        let node_id = nodes[0]["nodeId"].as_str().expect("node").to_string();
        let shown = ok_json(d, &url, &["node", "show", &node_id, "--json"]);
        assert_eq!(shown["node"]["status"], "active");
        assert_eq!(shown["certificates"].as_array().map(Vec::len), Some(1));
        let text = bcctl_at(d, &url, &["node", "show", &node_id]);
        assert!(String::from_utf8_lossy(&text.stdout).contains("certificates:"));

        // The position of the node's state before the revocation.
        let cut = shown["node"]["position"]
            .as_i64()
            .expect("position")
            .to_string();
        fails_with(
            d,
            &url,
            &["replay", "--at", "1000000"],
            "the log ends at",
            2,
        );
        let revoked = ok_json(
            d,
            &url,
            &[
                "node",
                "revoke",
                &node_id,
                "--reason",
                "key leaked",
                "--json",
            ],
        );
        assert_eq!(revoked["identityGeneration"], 2);
        let shown = ok_json(d, &url, &["node", "show", &node_id, "--json"]);
        assert!(shown["certificates"][0]["revokedAtUs"].is_i64());
        let retired = ok_json(d, &url, &["node", "retire", &node_id, "--json"]);
        assert_eq!(retired["status"], "retired");
        fails(d, &url, &["node", "retire", &node_id], "INVALID_STATE");
        // Deleting needs --yes; without it nothing changes.
        usage(
            d,
            &url,
            &["node", "delete", &node_id, "--json"],
            &format!(
                "INVALID_INPUT: deleting node {node_id} revokes every certificate it holds and \
                 cannot be undone; run again with --yes to delete it"
            ),
        );
        let unchanged = ok_json(d, &url, &["node", "show", &node_id, "--json"]);
        assert_eq!(unchanged["status"], "retired");
        let deleted = ok_json(d, &url, &["node", "delete", &node_id, "--yes", "--json"]);
        assert_eq!(deleted["status"], "deleted");

        let tok = ok_json(d, &url, &["token", "revoke", &token_id, "--json"]);
        assert!(tok["revokedAtUs"].is_i64());
        // Revoking what is revoked succeeds and says so.
        let again = bcctl_at(d, &url, &["token", "revoke", &token_id]);
        assert_eq!(again.status.code(), Some(0));
        assert!(String::from_utf8_lossy(&again.stdout).starts_with(&format!(
            "join token {token_id} is already revoked; nothing changed\n"
        )));

        // replay --node: the node's history up to the cut, the live tables untouched.
        let replay = ok_json(
            d,
            &url,
            &["replay", "--at", &cut, "--node", &node_id, "--json"],
        );
        assert_eq!(replay["nodes"][0]["status"], "active");
        let types: Vec<&str> = replay["events"]
            .as_array()
            .expect("events")
            .iter()
            .filter_map(|e| e["type"].as_str())
            .collect();
        // The CSR key's single use is on the node's stream (issue 18).
        assert_eq!(
            types,
            [
                "node.joined",
                "node.certificate.issued",
                "attestation.evidence.used"
            ]
        );
        let live = ok_json(d, &url, &["node", "show", &node_id, "--json"]);
        assert_eq!(live["status"], "deleted");
        let text = bcctl_at(d, &url, &["replay", "--at", &cut, "--node", &node_id]);
        assert!(String::from_utf8_lossy(&text.stdout).contains("node.joined"));
    }
}

/// The operator commands on tokens and nodes never unseal the key set: with the bundle's keys
/// sealed and no deployment secret in their environment (`bcctl_at` removes it) they run; they
/// used to stop at the sealed keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_and_node_commands_need_no_deployment_secret() {
    let db = TestDb::sqlite().expect("sqlite");
    db.store().await.expect("the store, migrated"); // the verbs never create one
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let url = db.url().to_string();
    let init = std::process::Command::new(support::bcctl_bin())
        .current_dir(d)
        .env("DATABASE_URL", &url)
        .env(
            "BC_DEPLOYMENT_SECRET",
            "a deployment secret long enough for the sealed bundle",
        )
        .args(["pki", "init", "--trust-domain", "cli.example.com"])
        .output()
        .expect("run bcctl");
    assert!(
        init.status.success(),
        "pki init: {}",
        String::from_utf8_lossy(&init.stderr)
    );
    let bytes = std::fs::read(d.join(".bcctl/pki.json")).expect("bundle");
    assert!(
        open_bundle(&bytes, None)
            .expect("public half")
            .keys
            .is_none(),
        "the bundle's keys are sealed"
    );

    let created = ok_json(
        d,
        &url,
        &[
            "token", "create", "--tenant", "t1", "--site", "s1", "--json",
        ],
    );
    let token_id = created["token"]["tokenId"]
        .as_str()
        .expect("id")
        .to_string();
    let listed = ok_json(d, &url, &["token", "list", "--json"]);
    assert_eq!(listed.as_array().map(Vec::len), Some(1));
    let revoked = ok_json(d, &url, &["token", "revoke", &token_id, "--json"]);
    assert!(revoked["revokedAtUs"].as_i64().is_some(), "{revoked}");
    assert_eq!(
        ok_json(d, &url, &["node", "list", "--json"]),
        serde_json::json!([])
    );
    // An unknown node is the command's own refusal, not a locked bundle.
    fails(d, &url, &["node", "revoke", "node_nope"], "node_nope");
    fails(d, &url, &["node", "show", "node_nope"], "no node node_nope");
}
