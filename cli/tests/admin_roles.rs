//! One refusal per role boundary of the admin API, on the real binaries over Postgres (the
//! harness of `admin_e2e.rs`), each with its exact message: an auditor cannot revoke a node, an
//! approver cannot create a token, an operator cannot rotate the command root, a node
//! certificate cannot call at all, a revoked operator certificate is refused at the handshake,
//! and an approval signed for another trust domain is refused by the server (which checks it in
//! the deployment's own trust domain, whatever the approver signed for).

use std::path::Path;
use std::time::{Duration, Instant};

use base64::Engine;
use domain::pki::{
    build_csr, issue_node_certificate, open_bundle, DeploymentSecret, KeyRole,
    NodeCertificateDecision, NodeRole, PrivateKey, Serial, SpiffeId, VerifiedCsr,
};
use domain::quorum::{batch_approval_signing_input, BatchId, ScopeHash, TrustDomain};
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, ECDSA_P256_SHA256_ASN1_SIGNING};
use serde_json::{json, Value};

use crate::admin_e2e::{stderr, AdminDeployment, Person, TD};

/// Standard error of a refused call, which must exit `code` and print nothing on stdout.
fn refused(out: &std::process::Output, code: i32) -> String {
    assert_eq!(out.status.code(), Some(code), "{}", stderr(out));
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    stderr(out)
}

fn pem(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let lines: Vec<&str> = b64
        .as_bytes()
        .chunks(64)
        .map(|c| std::str::from_utf8(c).expect("base64 is ASCII"))
        .collect();
    format!(
        "-----BEGIN {label}-----\n{}\n-----END {label}-----\n",
        lines.join("\n")
    )
}

/// The first object anywhere in `v` whose `name` is `name`.
fn find_named<'a>(v: &'a Value, name: &str) -> Option<&'a Value> {
    match v {
        Value::Object(map) if map.get("name").and_then(Value::as_str) == Some(name) => Some(v),
        Value::Object(map) => map.values().find_map(|x| find_named(x, name)),
        Value::Array(items) => items.iter().find_map(|x| find_named(x, name)),
        _ => None,
    }
}

/// A directory with a profile whose certificate is a NODE certificate of this deployment
/// (issued from its node CA), the serving CA copied from `like`.
fn node_profile(d: &AdminDeployment, like: &Person) -> std::path::PathBuf {
    let bytes = std::fs::read(d.srv.join("pki.json")).expect("bundle");
    let secret = DeploymentSecret::new(crate::admin_e2e::SECRET).expect("secret");
    let keys = open_bundle(&bytes, Some(&secret))
        .expect("open the bundle")
        .keys
        .expect("keys");
    let key = PrivateKey::generate(KeyRole::Node).expect("key");
    let csr = VerifiedCsr::verify(&build_csr(&key).expect("csr")).expect("csr");
    let decision = NodeCertificateDecision {
        spiffe_id: SpiffeId::parse(&format!("spiffe://{TD}/site/s1/node/node-0")).expect("id"),
        role: NodeRole::Node,
        serial: Serial::generate().expect("serial"),
        requested_lifetime: None,
        statements: vec![],
    };
    let cert = issue_node_certificate(
        &keys.node_ca,
        &csr,
        &decision,
        time::OffsetDateTime::now_utc() - time::Duration::minutes(5),
    )
    .expect("node certificate");
    let dir = d.srv.parent().expect("root").join("node-machine");
    std::fs::create_dir_all(&dir).expect("dir");
    let chain = pem("CERTIFICATE", &cert.der) + &pem("CERTIFICATE", keys.node_ca.cert_der());
    std::fs::write(dir.join("operator.pem"), chain).expect("cert");
    write_private(
        &dir.join("operator.key"),
        &pem("PRIVATE KEY", key.pkcs8_der()),
    );
    std::fs::copy(like.dir.join("serving-ca.pem"), dir.join("serving-ca.pem")).expect("ca");
    std::fs::write(
        dir.join("profile.toml"),
        format!(
            "server = {:?}\ncert = \"operator.pem\"\nkey = \"operator.key\"\nca = \"serving-ca.pem\"\ntrust_domain = {TD:?}\n",
            d.admin
        ),
    )
    .expect("profile");
    dir
}

fn write_private(path: &Path, text: &str) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .expect("create");
    f.write_all(text.as_bytes()).expect("write");
}

/// The approval input of the batch `shown` (`batch show --json`) for `td`, signed with the
/// approver's PKCS#8 PEM key.
fn sign_for(key: &Path, shown: &Value, td: &str) -> String {
    let text = std::fs::read_to_string(key).expect("key");
    let body: String = text.lines().filter(|l| !l.starts_with("-----")).collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(body)
        .expect("base64");
    let pair =
        EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &der, &SystemRandom::new())
            .expect("key");
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

fn kid_of(public_pem: &Path) -> String {
    let text = std::fs::read_to_string(public_pem).expect("pub");
    let body: String = text.lines().filter(|l| !l.starts_with("-----")).collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(body)
        .expect("base64");
    domain::quorum::ApproverKey::from_spki(&der)
        .expect("spki")
        .kid()
        .to_hex()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_role_boundary_is_refused_with_the_role_it_needs() {
    let d = AdminDeployment::start(&["approver-1"]).await;
    let ops = d.issue("ops", "operator");
    let appr = d.issue_approver("approver-1");
    let aud = d.issue("audit", "auditor");
    let denied = |verb: &str, role: &str, who: &Person, has: &str| {
        format!(
            "bcctl: permission denied: {verb} needs the {role} role; {} is {has}\n",
            who.spiffe_id()
        )
    };

    // An auditor cannot revoke a node.
    let out = d.as_person(&aud, &["node", "revoke", "node-0", "--reason", "audit"]);
    assert_eq!(
        refused(&out, 1),
        denied("node revoke", "operator", &aud, "auditor")
    );
    // A node's names are the operator's: an auditor is refused; an operator's call runs the
    // verb (here refused by it, as a local run would be).
    let out = d.as_person(
        &aud,
        &["node", "names", "add", "node-0", "--dns", "a.example.com"],
    );
    assert_eq!(
        refused(&out, 1),
        denied("node names add", "operator", &aud, "auditor")
    );
    let out = d.as_person(&ops, &["node", "names", "show", "nd_missing"]);
    assert_eq!(refused(&out, 1), "bcctl: NOT_FOUND: no node nd_missing\n");
    let out = d.as_person(
        &ops,
        &[
            "node",
            "names",
            "set",
            "nd_missing",
            "--dns",
            "A.example.com",
        ],
    );
    assert_eq!(
        refused(&out, 2),
        "bcctl: INVALID_INPUT: --dns \"A.example.com\": upper-case letters: write a.example.com\n"
    );
    // An approver cannot create a token.
    let out = d.as_person(&appr, &["token", "create", "--out", "t"]);
    assert_eq!(
        refused(&out, 1),
        denied("token create", "operator", &appr, "approver")
    );
    assert!(!appr.dir.join("t").exists());
    // An operator cannot rotate the command root.
    let out = d.as_person(&ops, &["pki", "rotate-command-root", "--stage", "add"]);
    assert_eq!(
        refused(&out, 1),
        denied("pki rotate-command-root", "admin", &ops, "operator")
    );
    // What each may do still works.
    d.as_person_ok(&aud, &["events", "list", "--limit", "5", "--json"]);
    d.as_person_ok(&appr, &["batch", "list", "--json"]);

    // An approval signed for another trust domain: refused by the server, which checks it in
    // the deployment's own trust domain.
    std::fs::write(
        ops.dir.join("leaves.json"),
        json!([{ "subject": "node-2", "kind": "node.reimage", "payload_sha256": "ef".repeat(32) }])
            .to_string(),
    )
    .expect("leaves");
    let created = d.as_person_ok(
        &ops,
        &[
            "batch",
            "create",
            "--tenant",
            "default",
            "--idempotency-key",
            "k1",
            "--reason",
            "one",
            "--leaves",
            "leaves.json",
            "--json",
        ],
    );
    let batch = created["batchId"].as_str().expect("id").to_string();
    let shown = d.as_person_ok(&appr, &["batch", "show", "--batch", &batch, "--json"]);
    let kid = kid_of(&d.srv.join("approver-1.pem.pub"));
    let staging = sign_for(
        &appr.dir.join("approver.pem"),
        &shown,
        "staging.example.com",
    );
    let out = d.as_person(
        &appr,
        &[
            "batch",
            "submit-approval",
            "--batch",
            &batch,
            "--kid",
            &kid,
            "--sig",
            &staging,
        ],
    );
    assert_eq!(
        refused(&out, 1),
        format!(
            "bcctl: PERMISSION_DENIED: the approval by {kid} does not verify for trust domain {TD} (this deployment's) over this batch's id, root, size and end: an approval signed for another trust domain or another batch is refused; sign it with `bcctl batch approve` against this deployment\n"
        )
    );
    // batch approve against the server refuses to sign for another trust domain than the
    // profile's, before anything is fetched.
    let out = d.as_person(
        &appr,
        &[
            "batch",
            "approve",
            "--batch",
            &batch,
            "--key",
            "approver.pem",
            "--yes",
            "--trust-domain",
            "staging.example.com",
        ],
    );
    assert_eq!(
        refused(&out, 2),
        format!(
            "bcctl: INVALID_INPUT: --trust-domain staging.example.com is not the profile profile.toml's trust domain {TD}: an approval bound to staging.example.com would never admit a command there\n"
        )
    );
    let after = d.as_person_ok(&appr, &["batch", "show", "--batch", &batch, "--json"]);
    assert_eq!(after["held"], 0, "nothing was recorded: {after}");

    // A node certificate never authenticates here: refused at the handshake.
    let node_dir = node_profile(&d, &ops);
    let out = d.run_in(&node_dir, &["token", "list", "--server", &d.admin], &[]);
    assert_handshake_refused(&d, &refused(&out, 1));

    // A revoked operator certificate is refused at the handshake (within about a second), or
    // at its call when that comes first.
    d.as_person_ok(&ops, &["token", "list", "--json"]);
    let listed = d.admin_ok(&["operator", "list", "--json"]);
    let serial = find_named(&listed, "ops")
        .and_then(|o| o["serial"].as_str())
        .unwrap_or_else(|| panic!("operator list names no serial for ops: {listed}"))
        .to_string();
    let revoked = d.admin_run(&[
        "operator", "revoke", "--serial", &serial, "--reason", "left",
    ]);
    assert!(revoked.status.success(), "revoke: {}", stderr(&revoked));
    let deadline = Instant::now() + Duration::from_secs(5);
    let err = loop {
        let out = d.as_person(&ops, &["token", "list"]);
        if !out.status.success() {
            break refused(&out, 1);
        }
        assert!(
            Instant::now() < deadline,
            "a revoked operator still calls after 5 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    // The handshake's verifier re-reads the revoked set every second, each call checks it
    // again: a call that wins the race with the verifier's refresh is refused at the call,
    // naming the serial, and no verb runs either way.
    let at_the_call = format!(
        "bcctl: the operator certificate of spiffe://{td}/operator/ops is revoked (serial \
         {serial})\n",
        td = crate::admin_e2e::TD
    );
    if err != at_the_call {
        assert_handshake_refused(&d, &err);
    }
}

/// A client certificate the server refuses at the handshake. Under TLS 1.3 the client has
/// finished its side before the server's verdict arrives, so the client reports either the TLS
/// alert during the handshake, or, on the first call, the connection the server closed under it,
/// which `cli/src/admin/client.rs` explains; either way exit 1, nothing on stdout, and no verb ran.
fn assert_handshake_refused(d: &AdminDeployment, err: &str) {
    let tls = format!("bcctl: admin API {}: TLS: ", d.admin);
    let closed = format!("bcctl: admin API {}: the call failed: ", d.admin);
    assert!(
        err.starts_with(&tls)
            || (err.starts_with(&closed)
                && err.ends_with("the server closed the connection after the TLS handshake, which is how it refuses an operator certificate that is revoked, expired or not from this deployment's operator CA\n")),
        "refused at the handshake: {err:?}"
    );
}
