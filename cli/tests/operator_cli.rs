//! Operator certificates with the real binary (issue 23): `pki init` makes the operator CA; a
//! bundle made without one gets it from `pki add-operator-ca`, once; `pki issue-operator` writes
//! the four files with their modes, the certificate verifies with `openssl verify` against the
//! operator CA and the root and carries the SPIFFE ID, the role OU and clientAuth; `--days 91`
//! is refused (exit 2); `operator list` shows it, `operator revoke` revokes it, a repeat says
//! "already revoked" (exit 0) and an unknown serial is NOT_FOUND (exit 1). On Postgres.
//! `pki renew-ca --ca operator` renews the operator CA (same key: the pin stays and an issued
//! certificate verifies under the new one) and is refused for a bundle without one.
//!
//! Run: `cargo test -p cli --test suite operator_cli::`.

use crate::support;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use domain::pki::{seal_bundle_with, Argon2idParams, BundleKdf, DeploymentSecret, KeySet};
use events::store::testkit::TestDb;

const SECRET: &str = "a-deployment-secret-of-more-than-32-characters";

fn bcctl(dir: &Path, args: &[&str]) -> Output {
    Command::new(support::bcctl_bin())
        .current_dir(dir)
        .args(args)
        .env("BC_DEPLOYMENT_SECRET", SECRET)
        .env_remove("BC_DEPLOYMENT_SECRET_FILE")
        .env_remove("BC_PKI_BUNDLE")
        .env_remove("DATABASE_URL")
        .stdin(Stdio::null())
        .output()
        .expect("run bcctl")
}

fn ok(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).trim_end().to_owned()
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).expect("metadata").permissions().mode() & 0o777
}

fn bundle_cert(bundle: &Path, name: &str) -> Option<String> {
    let doc: serde_json::Value =
        serde_json::from_slice(&fs::read(bundle).expect("bundle")).expect("bundle JSON");
    doc["certificates"][name].as_str().map(str::to_owned)
}

#[test]
fn init_makes_the_operator_ca_and_an_older_bundle_gets_one_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    ok(&bcctl(
        d,
        &[
            "pki",
            "init",
            "--trust-domain",
            "ops.example.com",
            "--pki",
            "new.json",
        ],
    ));
    assert!(bundle_cert(&d.join("new.json"), "operatorCa").is_some());
    let shown = ok(&bcctl(d, &["pki", "show", "--pki", "new.json", "--json"]));
    assert!(shown["pins"]["operatorCa"]
        .as_str()
        .is_some_and(|p| p.starts_with("sha256/")));

    // A bundle as builds before issue 23 wrote it: no operator CA.
    let mut keys = KeySet::generate(
        domain::pki::TrustDomain::new("ops.example.com").expect("td"),
        time::OffsetDateTime::now_utc(),
        Default::default(),
    )
    .expect("keys");
    keys.operator_ca = None;
    let small = BundleKdf::Argon2id(Argon2idParams {
        memory_kib: 64,
        iterations: 1,
        parallelism: 1,
    });
    let bytes = seal_bundle_with(
        &keys,
        &DeploymentSecret::new(SECRET).expect("secret"),
        small,
    )
    .expect("seal");
    fs::write(d.join("old.json"), bytes).expect("write");
    assert_eq!(bundle_cert(&d.join("old.json"), "operatorCa"), None);
    let shown = ok(&bcctl(d, &["pki", "show", "--pki", "old.json", "--json"]));
    assert!(shown["pins"].get("operatorCa").is_none());
    let text = bcctl(d, &["pki", "show", "--pki", "old.json"]);
    assert!(String::from_utf8_lossy(&text.stdout)
        .contains("  operator CA              none (bcctl pki add-operator-ca adds one)"));

    let added = ok(&bcctl(
        d,
        &["pki", "add-operator-ca", "--pki", "old.json", "--json"],
    ));
    assert_eq!(added["rootKey"], "bundle");
    assert_eq!(mode(&d.join("old.json")), 0o600);
    let shown = ok(&bcctl(d, &["pki", "show", "--pki", "old.json", "--json"]));
    assert_eq!(shown["pins"]["operatorCa"], added["operatorCaPin"]);
    assert_eq!(shown["authenticated"], true, "re-sealed under the secret");
    assert_eq!(shown["pins"]["rootCa"], keys.pins().root_ca.to_string());

    // A bundle without an operator CA has none to renew.
    keys.operator_ca = None;
    let older = seal_bundle_with(
        &keys,
        &DeploymentSecret::new(SECRET).expect("secret"),
        BundleKdf::Argon2id(Argon2idParams {
            memory_kib: 64,
            iterations: 1,
            parallelism: 1,
        }),
    )
    .expect("seal");
    fs::write(d.join("older.json"), older).expect("write");
    let none = bcctl(
        d,
        &["pki", "renew-ca", "--ca", "operator", "--pki", "older.json"],
    );
    assert_eq!(none.status.code(), Some(1));
    assert_eq!(
        stderr(&none),
        "bcctl: pki renew-ca: the bundle has no operator CA to renew (`bcctl pki add-operator-ca` adds one)"
    );

    let again = bcctl(d, &["pki", "add-operator-ca", "--pki", "old.json"]);
    assert_eq!(again.status.code(), Some(1));
    assert_eq!(
        stderr(&again),
        "bcctl: the bundle already has an operator CA"
    );
}

fn openssl(args: &[&str]) -> Output {
    Command::new("openssl")
        .args(args)
        .output()
        .expect("run openssl")
}

#[tokio::test]
async fn issue_list_and_revoke_an_operator_certificate() {
    let db = TestDb::postgres().await.expect("postgres test db");
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let url = db.url().to_string();
    ok(&bcctl(
        d,
        &[
            "pki",
            "init",
            "--trust-domain",
            "ops.example.com",
            "--pki",
            "pki.json",
        ],
    ));
    let at = |extra: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        v.extend([
            "--pki".into(),
            "pki.json".into(),
            "--database-url".into(),
            url.clone(),
        ]);
        v
    };
    let run = |extra: &[&str]| {
        let args = at(extra);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        bcctl(d, &refs)
    };

    let refused = run(&[
        "pki",
        "issue-operator",
        "--name",
        "alice",
        "--role",
        "approver",
        "--out",
        "alice",
        "--days",
        "91",
    ]);
    assert_eq!(refused.status.code(), Some(2));
    assert_eq!(
        stderr(&refused),
        "bcctl: INVALID_INPUT: --days 91: an operator certificate lives 1 to 90 days"
    );
    let refused = run(&[
        "pki",
        "issue-operator",
        "--name",
        "alice",
        "--role",
        "root",
        "--out",
        "alice",
    ]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(!d.join("alice").exists(), "a refusal writes nothing");

    let issued = ok(&run(&[
        "pki",
        "issue-operator",
        "--name",
        "alice",
        "--role",
        "approver",
        "--out",
        "alice",
        "--server",
        "127.0.0.1:8444",
        "--json",
    ]));
    assert_eq!(
        issued["spiffeId"],
        "spiffe://ops.example.com/operator/alice"
    );
    assert_eq!(issued["role"], "approver");
    let serial = issued["serial"].as_str().expect("serial").to_string();
    let out = d.join("alice");
    assert_eq!(mode(&out.join("operator.key")), 0o600);
    assert_eq!(mode(&out.join("operator.pem")), 0o644);
    assert_eq!(
        fs::read_to_string(out.join("profile.toml")).expect("profile"),
        "# bcctl operator profile (bcctl pki issue-operator): paths are relative to this file's directory.\n\
         server = \"127.0.0.1:8444\"\ncert = \"operator.pem\"\nkey = \"operator.key\"\n\
         ca = \"serving-ca.pem\"\ntrust_domain = \"ops.example.com\"\n"
    );
    assert_eq!(
        fs::read_to_string(out.join("serving-ca.pem")).expect("serving CA"),
        bundle_cert(&d.join("pki.json"), "servingCa").expect("serving CA")
    );
    let chain = fs::read_to_string(out.join("operator.pem")).expect("chain");
    assert_eq!(
        chain.matches("BEGIN CERTIFICATE").count(),
        2,
        "leaf then operator CA"
    );
    let operator_ca = bundle_cert(&d.join("pki.json"), "operatorCa").expect("operator CA");
    assert!(chain.ends_with(&operator_ca));
    let leaf_end = chain.find("-----END CERTIFICATE-----\n").expect("leaf") + 26;
    fs::write(d.join("leaf.pem"), &chain[..leaf_end]).expect("leaf");
    let root = bundle_cert(&d.join("pki.json"), "rootCa").expect("root");
    fs::write(d.join("trust.pem"), format!("{operator_ca}{root}")).expect("trust");
    let verify = openssl(&[
        "verify",
        "-purpose",
        "sslclient",
        "-CAfile",
        &d.join("trust.pem").display().to_string(),
        &d.join("leaf.pem").display().to_string(),
    ]);
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );
    // The serving CA does not verify it: only the operator CA issues operator certificates.
    let serving = bundle_cert(&d.join("pki.json"), "servingCa").expect("serving");
    fs::write(d.join("wrong.pem"), format!("{serving}{root}")).expect("wrong");
    let wrong = openssl(&[
        "verify",
        "-CAfile",
        &d.join("wrong.pem").display().to_string(),
        &d.join("leaf.pem").display().to_string(),
    ]);
    assert!(!wrong.status.success());
    // `pki renew-ca --ca operator`: a new certificate for the same key and subject, so the
    // operator certificate already issued verifies against it, and the pin stays.
    let pin_before = ok(&bcctl(d, &["pki", "show", "--pki", "pki.json", "--json"]))["pins"]
        ["operatorCa"]
        .clone();
    let renewed = ok(&bcctl(
        d,
        &[
            "pki", "renew-ca", "--ca", "operator", "--pki", "pki.json", "--json",
        ],
    ));
    assert_eq!(renewed["ca"], "operator");
    let renewed_ca = bundle_cert(&d.join("pki.json"), "operatorCa").expect("operator CA");
    assert_ne!(renewed_ca, operator_ca, "a new certificate");
    let pin_after = ok(&bcctl(d, &["pki", "show", "--pki", "pki.json", "--json"]))["pins"]
        ["operatorCa"]
        .clone();
    assert_eq!(pin_after, pin_before);
    fs::write(d.join("renewed.pem"), format!("{renewed_ca}{root}")).expect("renewed");
    let verify = openssl(&[
        "verify",
        "-purpose",
        "sslclient",
        "-CAfile",
        &d.join("renewed.pem").display().to_string(),
        &d.join("leaf.pem").display().to_string(),
    ]);
    assert!(
        verify.status.success(),
        "the issued certificate verifies under the renewed CA: {}",
        String::from_utf8_lossy(&verify.stdout)
    );
    let text = openssl(&[
        "x509",
        "-noout",
        "-text",
        "-in",
        &d.join("leaf.pem").display().to_string(),
    ]);
    let text = String::from_utf8_lossy(&text.stdout).to_string();
    assert!(
        text.contains("URI:spiffe://ops.example.com/operator/alice"),
        "{text}"
    );
    assert!(
        text.contains("Subject: CN = alice, OU = bc-role:approver"),
        "{text}"
    );
    assert!(text.contains("TLS Web Client Authentication"), "{text}");
    assert!(!text.contains("TLS Web Server Authentication"), "{text}");

    let again = run(&[
        "pki",
        "issue-operator",
        "--name",
        "alice",
        "--role",
        "approver",
        "--out",
        "alice",
    ]);
    assert_eq!(again.status.code(), Some(1));
    assert_eq!(
        stderr(&again),
        format!(
            "bcctl: {} already exists: an operator key is never overwritten without --replace (issue into another --out, or pass --replace)",
            Path::new("alice").join("operator.key").display()
        )
    );

    let list = ok(&run(&["operator", "list", "--json"]));
    let rows = list.as_array().expect("list");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["serial"], serial.as_str());
    assert_eq!(rows[0]["name"], "alice");
    assert_eq!(rows[0]["role"], "approver");
    assert_eq!(rows[0]["revoked"], false);

    let revoked = ok(&run(&[
        "operator",
        "revoke",
        "--serial",
        &serial,
        "--reason",
        "lost laptop",
        "--json",
    ]));
    assert_eq!(revoked["revoked"], true);
    assert_eq!(revoked["alreadyRevoked"], false);
    let list = ok(&run(&["operator", "list", "--json"]));
    assert_eq!(list[0]["revoked"], true);
    assert_eq!(list[0]["revokeReason"], "lost laptop");
    let text = run(&["operator", "list"]);
    assert!(String::from_utf8_lossy(&text.stdout).contains("revoked: lost laptop"));

    let repeat = run(&[
        "operator", "revoke", "--serial", &serial, "--reason", "again",
    ]);
    assert_eq!(repeat.status.code(), Some(0), "{}", stderr(&repeat));
    assert_eq!(
        String::from_utf8_lossy(&repeat.stdout).trim_end(),
        format!("operator certificate {serial} of spiffe://ops.example.com/operator/alice already revoked: nothing to do")
    );
    let missing = run(&["operator", "revoke", "--serial", "abcdef", "--reason", "x"]);
    assert_eq!(missing.status.code(), Some(1));
    assert_eq!(
        stderr(&missing),
        "bcctl: NOT_FOUND: no operator certificate has serial abcdef (`bcctl operator list` shows them)"
    );
    let bad = run(&["operator", "revoke", "--serial", "xyz", "--reason", "x"]);
    assert_eq!(bad.status.code(), Some(2));

    // The log holds one issue and one revocation, in the deployment tenant.
    let events = ok(&run(&["events", "list", "--json"]));
    let ours: Vec<(&str, &str, i64, &str)> = events
        .as_array()
        .expect("events")
        .iter()
        .map(|e| {
            (
                e["eventType"].as_str().unwrap_or(""),
                e["streamId"].as_str().unwrap_or(""),
                e["streamVersion"].as_i64().unwrap_or(0),
                e["tenantId"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        ours,
        vec![
            ("operator.cert.issued", "operator/alice", 1, "deployment"),
            ("operator.cert.revoked", "operator/alice", 2, "deployment"),
        ]
    );
}

#[test]
fn add_operator_ca_to_an_offline_root_bundle_needs_the_root_key_and_keeps_it_offline() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let mut keys = KeySet::generate(
        domain::pki::TrustDomain::new("ops.example.com").expect("td"),
        time::OffsetDateTime::now_utc(),
        Default::default(),
    )
    .expect("keys");
    keys.operator_ca = None;
    let root_key = keys
        .root_ca
        .private_key()
        .expect("online root")
        .pkcs8_der()
        .to_vec();
    fs::write(
        d.join("root.key"),
        domain::pki::pem_encode("PRIVATE KEY", &root_key),
    )
    .expect("key");
    let keys = keys.without_root_key();
    let small = BundleKdf::Argon2id(Argon2idParams {
        memory_kib: 64,
        iterations: 1,
        parallelism: 1,
    });
    let bytes = seal_bundle_with(
        &keys,
        &DeploymentSecret::new(SECRET).expect("secret"),
        small,
    )
    .expect("seal");
    fs::write(d.join("pki.json"), bytes).expect("write");

    let refused = bcctl(d, &["pki", "add-operator-ca", "--pki", "pki.json"]);
    assert_eq!(refused.status.code(), Some(1));
    assert_eq!(
        stderr(&refused),
        "bcctl: pki add-operator-ca: the root CA key is offline (kept out of the bundle by `pki init --offline-root`): pass --root-key FILE, the key file `pki init --offline-root` wrote"
    );
    assert_eq!(
        bundle_cert(&d.join("pki.json"), "operatorCa"),
        None,
        "nothing written"
    );
    let added = ok(&bcctl(
        d,
        &[
            "pki",
            "add-operator-ca",
            "--pki",
            "pki.json",
            "--root-key",
            "root.key",
            "--json",
        ],
    ));
    assert_eq!(added["rootKey"], "offline");
    let shown = ok(&bcctl(d, &["pki", "show", "--pki", "pki.json", "--json"]));
    assert_eq!(shown["rootKey"], "offline");
    assert_eq!(shown["pins"]["operatorCa"], added["operatorCaPin"]);
}
