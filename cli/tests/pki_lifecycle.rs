//! The CA life cycle with the real binaries (issue 22, spec 003 "The pki commands"):
//!
//! - `pki renew-ca` on a running deployment (`bcctl up` on SQLite, leaves of 10 s): a `bcd
//!   node` renews before; the node and serving CAs are renewed; `up` is restarted on the same
//!   port (a running serve picks the new CA certificates up at restart); the same `bcd node`
//!   reconnects and renews with no re-join (still one node, same id), its new leaf chains to the
//!   new node CA certificate, and `openssl verify` verifies the old leaf with the old chain, the
//!   new leaf with the new chain, and each leaf with the other CA certificate (same key and
//!   subject).
//! - An offline root: `pki init --offline-root` keeps the key out of the bundle, `serve` runs
//!   without it, `renew-ca` without `--root-key` is refused with the message and exit 1, with it
//!   succeeds and the root stays offline.
//! - `pki reseal`: an unauthenticated (plaintext while a secret is set) bundle prints its pins
//!   with `authenticated: false` and stops (exit 1, INVALID_STATE); `renew-ca` refuses it too;
//!   `--accept-unauthenticated` seals it; a move to a new secret: the old secret no longer
//!   opens it, the new one does.
//!
//! - Gateway TLS from files (`[tls] cert_file`, `key_file`, `reload_interval`, written by `pki
//!   issue-gateway`): a new connection sees the certificate's serial; after `pki issue-gateway`
//!   replaces the files a new connection sees the new serial while a `bcd node` session stays
//!   open; a half-written certificate file keeps the former certificate and is logged.
//!
//! Run: `cargo test -p cli --test suite pki_lifecycle::`.

use crate::support;

use support::{bcctl_bin, bcd_bin, wait_for, Proc};

use std::fs;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use base64::Engine;

const SECRET: &str = "a-deployment-secret-of-more-than-32-characters";
const NEW_SECRET: &str = "another-deployment-secret-of-more-than-32-chars";
const OFFLINE: &str = "the root CA key is offline (kept out of the bundle by `pki init --offline-root`): pass --root-key FILE, the key file `pki init --offline-root` wrote";

fn bcctl(dir: &Path, secret: Option<&str>, args: &[&str]) -> Output {
    let mut cmd = Command::new(bcctl_bin());
    cmd.current_dir(dir)
        .args(args)
        .env_remove("BC_DEPLOYMENT_SECRET")
        .env_remove("BC_DEPLOYMENT_SECRET_FILE")
        .env_remove("BC_NEW_DEPLOYMENT_SECRET")
        .env_remove("BC_PKI_BUNDLE")
        .env_remove("DATABASE_URL")
        .stdin(Stdio::null());
    if let Some(s) = secret {
        cmd.env("BC_DEPLOYMENT_SECRET", s);
    }
    cmd.output().expect("run bcctl")
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

fn pem(der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for c in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(c).expect("ascii"));
        out.push('\n');
    }
    out + "-----END CERTIFICATE-----\n"
}

/// The bundle's certificate `name` (PEM text in the file).
fn bundle_cert(bundle: &Path, name: &str) -> String {
    let doc: serde_json::Value =
        serde_json::from_slice(&fs::read(bundle).expect("bundle")).expect("bundle JSON");
    doc["certificates"][name]
        .as_str()
        .unwrap_or_else(|| panic!("no certificates.{name}"))
        .to_owned()
}

/// bcd's chain, leaf first, DER.
fn node_chain(data: &Path) -> Vec<Vec<u8>> {
    let text = fs::read_to_string(data.join("identity.json")).unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    v["chain"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|c| c.as_str())
                .filter_map(|c| base64::engine::general_purpose::STANDARD.decode(c).ok())
                .collect()
        })
        .unwrap_or_default()
}

/// `openssl verify -CAfile root -untrusted ca leaf` in `dir`: its output, trimmed.
/// `openssl verify` of `leaf` through `ca` to `root`, at a moment inside the leaf's validity (its
/// notBefore plus 2 s): the leaves of these deployments live 10 s, so by the time a test has
/// renewed a CA and waited for the next renewal the first leaf has expired, and what is checked
/// is the chain, not the clock.
fn openssl_verify(dir: &Path, root: &str, ca: &str, leaf: &[u8]) -> String {
    let (_, cert) = x509_parser::parse_x509_certificate(leaf).expect("a leaf certificate");
    let at = cert.validity().not_before.timestamp() + 2;
    fs::write(dir.join("root.pem"), root).expect("write");
    fs::write(dir.join("ca.pem"), ca).expect("write");
    fs::write(dir.join("leaf.pem"), pem(leaf)).expect("write");
    let out = Command::new("openssl")
        .current_dir(dir)
        .args([
            "verify",
            "-attime",
            &at.to_string(),
            "-CAfile",
            "root.pem",
            "-untrusted",
            "ca.pem",
            "leaf.pem",
        ])
        .output()
        .expect("openssl");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout).trim(),
        String::from_utf8_lossy(&out.stderr).trim()
    )
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// `bcctl up --dir work --port port --json` on SQLite with leaves of 10 s, and its first line.
fn up(tmp: &Path, work: &Path, port: u16, round: u32) -> (Proc, serde_json::Value) {
    up_with(tmp, work, port, round, &[], "10s")
}

fn up_with(
    tmp: &Path,
    work: &Path,
    port: u16,
    round: u32,
    extra: &[&str],
    leaf_lifetime: &str,
) -> (Proc, serde_json::Value) {
    let log = tmp.join(format!("up-{round}.log"));
    let child = Command::new(bcctl_bin())
        // The admin API is not used here: any free port, never port + 1 (which may be taken).
        .args([
            "up",
            "--json",
            "--token-uses",
            "2",
            "--admin-port",
            "0",
            "--port",
        ])
        .arg(port.to_string())
        .arg("--dir")
        .arg(work)
        .args(extra)
        .env("BC_LEAF_LIFETIME", leaf_lifetime)
        .env_remove("BC_DEPLOYMENT_SECRET")
        .env_remove("BC_DEPLOYMENT_SECRET_FILE")
        .env_remove("DATABASE_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(fs::File::create(&log).expect("log")))
        .spawn()
        .expect("spawn bcctl up");
    let mut proc = Proc {
        name: format!("bcctl up ({round})"),
        child,
        log,
    };
    let facts = proc.first_json_line(Duration::from_secs(120));
    (proc, facts)
}

#[test]
fn renew_ca_on_a_running_deployment_keeps_nodes_renewing_without_a_rejoin() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let work = tmp.path().join("dep");
    let port = free_port();
    let (server, facts) = up(tmp.path(), &work, port, 1);
    let bundle = work.join("pki.json");
    let token = facts["token"].as_str().expect("token").to_owned();
    let config = facts["bcdConfig"].as_str().expect("bcdConfig").to_owned();
    let data = tmp.path().join("node");
    let bcd = |args: &[&str]| {
        let mut cmd = Command::new(bcd_bin());
        cmd.arg("--config")
            .arg(&config)
            .arg("--data-dir")
            .arg(&data)
            .args(args)
            .env_remove("BCD_JOIN_TOKEN")
            .env_remove("BCD_SERVER")
            .env_remove("BCD_DATA_DIR")
            .env_remove("BCD_CONFIG")
            .stdin(Stdio::null());
        cmd
    };
    let out = bcd(&["join"])
        .env("BCD_JOIN_TOKEN", &token)
        .output()
        .expect("bcd join");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let agent_log = tmp.path().join("bcd-node.log");
    let agent = Proc {
        name: "bcd node".into(),
        child: bcd(&["node"])
            .stdout(Stdio::null())
            .stderr(Stdio::from(fs::File::create(&agent_log).expect("log")))
            .spawn()
            .expect("spawn bcd node"),
        log: agent_log,
    };
    let renewals = || agent.log_text().matches("renewed: certificate").count();
    wait_for(
        "a renewal before renew-ca",
        Duration::from_secs(60),
        || renewals() >= 1,
        || agent.log_text() + &server.log_text(),
    );
    let old_chain = node_chain(&data);
    let old_node_ca = bundle_cert(&bundle, "nodeCa");
    let old_serving_ca = bundle_cert(&bundle, "servingCa");
    let root = bundle_cert(&bundle, "rootCa");
    let pins_before = ok(&bcctl(
        tmp.path(),
        None,
        &[
            "pki",
            "show",
            "--json",
            "--dir",
            work.to_str().expect("utf-8"),
        ],
    ))["pins"]
        .clone();

    // Renew both CAs while the deployment runs (the secret comes from --dir).
    let dir = work.to_str().expect("utf-8");
    let node = ok(&bcctl(
        tmp.path(),
        None,
        &["pki", "renew-ca", "--ca", "node", "--dir", dir, "--json"],
    ));
    assert_eq!(node["ca"], "node");
    assert_eq!(node["servingCaPin"], serde_json::Value::Null);
    let serving = ok(&bcctl(
        tmp.path(),
        None,
        &[
            "pki", "renew-ca", "--ca", "serving", "--days", "30", "--dir", dir, "--json",
        ],
    ));
    assert_eq!(serving["servingCaPin"], pins_before["servingCa"]);
    let new_node_ca = bundle_cert(&bundle, "nodeCa");
    assert_ne!(new_node_ca, old_node_ca);
    assert_ne!(bundle_cert(&bundle, "servingCa"), old_serving_ca);
    // Nothing to re-pin.
    let after = ok(&bcctl(
        tmp.path(),
        None,
        &["pki", "show", "--json", "--dir", dir],
    ));
    assert_eq!(after["pins"], pins_before);
    assert_eq!(after["authenticated"], true);

    // A rolling restart: the same port, the same store and bundle.
    let before_restart = renewals();
    drop(server);
    let (server, _) = up(tmp.path(), &work, port, 2);
    wait_for(
        "a renewal under the renewed node CA",
        Duration::from_secs(90),
        || {
            renewals() > before_restart
                && node_chain(&data).get(1).map(|c| pem(c)) == Some(new_node_ca.clone())
        },
        || agent.log_text() + &server.log_text(),
    );
    let new_chain = node_chain(&data);
    assert_ne!(new_chain[0], old_chain[0]);
    assert!(
        !agent.log_text().contains("joined as"),
        "{}",
        agent.log_text()
    );
    // Still one node: no re-join.
    let url = format!("sqlite://{}", work.join("events.db").display());
    let secret = fs::read_to_string(work.join("deployment-secret")).expect("secret");
    let pki = bundle.display().to_string();
    let nodes = ok(&bcctl(
        tmp.path(),
        Some(secret.trim()),
        &[
            "node",
            "list",
            "--json",
            "--database-url",
            &url,
            "--pki",
            &pki,
        ],
    ));
    let list = nodes
        .as_array()
        .or_else(|| nodes["nodes"].as_array())
        .cloned()
        .unwrap_or_default();
    assert_eq!(list.len(), 1, "{nodes}");

    let v = tmp.path().join("verify");
    fs::create_dir_all(&v).expect("mkdir");
    assert_eq!(
        openssl_verify(&v, &root, &old_node_ca, &old_chain[0]),
        "leaf.pem: OK"
    );
    assert_eq!(
        openssl_verify(&v, &root, &new_node_ca, &new_chain[0]),
        "leaf.pem: OK"
    );
    assert_eq!(
        openssl_verify(&v, &root, &new_node_ca, &old_chain[0]),
        "leaf.pem: OK"
    );
    assert_eq!(
        openssl_verify(&v, &root, &old_node_ca, &new_chain[0]),
        "leaf.pem: OK"
    );
    drop(agent);
    drop(server);
}

#[test]
fn an_offline_root_is_never_loaded_and_renew_ca_needs_its_key() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let t = tmp.path();
    let out = bcctl(
        t,
        Some(SECRET),
        &[
            "pki",
            "init",
            "--trust-domain",
            "off.example.com",
            "--pki",
            "pki.json",
            "--offline-root",
            "root.key",
            "--json",
        ],
    );
    let init = ok(&out);
    assert_eq!(init["rootKey"], "root.key");
    use std::os::unix::fs::PermissionsExt;
    let mode = fs::metadata(t.join("root.key"))
        .expect("root.key")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let text = fs::read_to_string(t.join("pki.json")).expect("bundle");
    assert!(text.contains("\"rootKey\": \"offline\""), "{text}");
    // Never overwritten.
    let again = bcctl(
        t,
        Some(SECRET),
        &[
            "pki",
            "init",
            "--trust-domain",
            "off.example.com",
            "--pki",
            "other.json",
            "--offline-root",
            "root.key",
        ],
    );
    assert_eq!(again.status.code(), Some(1));
    assert!(
        stderr(&again).contains("root.key already exists"),
        "{}",
        stderr(&again)
    );
    assert!(!t.join("other.json").exists());

    // serve runs without it: a bcd joins (the gateway and JoinService need no root key).
    let show = ok(&bcctl(
        t,
        Some(SECRET),
        &["pki", "show", "--pki", "pki.json", "--json"],
    ));
    assert_eq!(show["rootKey"], "offline");
    assert_eq!(show["authenticated"], true);

    let refused = bcctl(
        t,
        Some(SECRET),
        &["pki", "renew-ca", "--ca", "node", "--pki", "pki.json"],
    );
    assert_eq!(refused.status.code(), Some(1));
    assert_eq!(stderr(&refused), format!("bcctl: pki renew-ca: {OFFLINE}"));
    let before = fs::read(t.join("pki.json")).expect("bundle");
    let renewed = ok(&bcctl(
        t,
        Some(SECRET),
        &[
            "pki",
            "renew-ca",
            "--ca",
            "node",
            "--pki",
            "pki.json",
            "--root-key",
            "root.key",
            "--json",
        ],
    ));
    assert_eq!(renewed["rootKey"], "offline");
    let after = fs::read_to_string(t.join("pki.json")).expect("bundle");
    assert_ne!(after.as_bytes(), &before[..]);
    assert!(after.contains("\"rootKey\": \"offline\""));
    let show = ok(&bcctl(
        t,
        Some(SECRET),
        &["pki", "show", "--pki", "pki.json", "--json"],
    ));
    assert_eq!(show["rootKey"], "offline");
    assert_eq!(show["pins"], init["pins"]);

    // A key that is not the root's.
    let other = bcctl(
        t,
        Some(SECRET),
        &[
            "pki",
            "init",
            "--trust-domain",
            "off.example.com",
            "--pki",
            "b2.json",
            "--offline-root",
            "root2.key",
        ],
    );
    ok(&other);
    let wrong = bcctl(
        t,
        Some(SECRET),
        &[
            "pki",
            "renew-ca",
            "--ca",
            "node",
            "--pki",
            "pki.json",
            "--root-key",
            "root2.key",
        ],
    );
    assert_eq!(wrong.status.code(), Some(1));
    assert_eq!(
        stderr(&wrong),
        "bcctl: pki renew-ca: the bc root CA certificate does not certify the bc root CA private key (a mismatched bundle)"
    );

    // serve with the offline-root bundle (up keeps an existing bundle).
    let dep = t.join("dep");
    fs::create_dir_all(&dep).expect("mkdir");
    fs::copy(t.join("pki.json"), dep.join("pki.json")).expect("copy");
    fs::write(dep.join("deployment-secret"), SECRET).expect("secret");
    let (server, facts) = up(t, &dep, 0, 1);
    let token = facts["token"].as_str().expect("token").to_owned();
    let out = Command::new(bcd_bin())
        .arg("--config")
        .arg(facts["bcdConfig"].as_str().expect("bcdConfig"))
        .arg("--data-dir")
        .arg(t.join("node"))
        .arg("join")
        .env("BCD_JOIN_TOKEN", &token)
        .env_remove("BCD_SERVER")
        .env_remove("BCD_DATA_DIR")
        .env_remove("BCD_CONFIG")
        .stdin(Stdio::null())
        .output()
        .expect("bcd join");
    assert!(
        out.status.success(),
        "{}{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        server.log_text()
    );
    drop(server);
}

#[test]
fn reseal_refuses_an_unauthenticated_bundle_and_moves_to_a_new_secret() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let t = tmp.path();
    let init = ok(&bcctl(
        t,
        None,
        &[
            "pki",
            "init",
            "--trust-domain",
            "re.example.com",
            "--out",
            "pki.json",
            "--plaintext",
            "--json",
        ],
    ));
    // Plaintext with no secret: show warns on stderr, JSON says authenticated: false.
    let show = bcctl(t, None, &["pki", "show", "--file", "pki.json", "--json"]);
    let v = ok(&show);
    assert_eq!(v["authenticated"], false);
    assert_eq!(
        stderr(&show),
        "warning: pki.json is not authenticated (its keys are in plaintext): whoever can write the file chose these pins; compare them with your records, then seal it with `bcctl pki reseal --accept-unauthenticated` under BC_DEPLOYMENT_SECRET"
    );

    // With a secret set, a plaintext bundle is unauthenticated: reseal prints and stops.
    let refused = bcctl(
        t,
        Some(SECRET),
        &["pki", "reseal", "--pki", "pki.json", "--json"],
    );
    assert_eq!(refused.status.code(), Some(1));
    let printed: serde_json::Value = serde_json::from_slice(&refused.stdout).expect("pins JSON");
    assert_eq!(printed["authenticated"], false);
    assert_eq!(printed["pins"], init["pins"]);
    let err: serde_json::Value = serde_json::from_str(&stderr(&refused)).expect("JSON error");
    assert_eq!(
        err["error"]["message"],
        "INVALID_STATE: nothing vouches for the pins above: pki.json is not authenticated (plaintext keys); compare them with your install scripts, join tokens and pinned CAs, then run `bcctl pki reseal --accept-unauthenticated`"
    );
    assert_eq!(err["error"]["exitCode"], 1);
    // Every write-back refuses it.
    let renew = bcctl(
        t,
        Some(SECRET),
        &["pki", "renew-ca", "--ca", "node", "--pki", "pki.json"],
    );
    assert_eq!(renew.status.code(), Some(1));
    assert_eq!(
        stderr(&renew),
        "bcctl: INVALID_STATE: pki.json is not authenticated (its keys are in plaintext while a deployment secret is set: whoever can write the file chose them), so it is not written back; compare its pins (`bcctl pki show`) with your records, then seal it with `bcctl pki reseal --accept-unauthenticated`"
    );
    let store = format!("sqlite://{}", t.join("events.db").display());
    ok_status(&bcctl(t, None, &["migrate", "--database-url", &store]));
    let rotate = bcctl(
        t,
        Some(SECRET),
        &[
            "pki",
            "rotate-command-root",
            "--stage",
            "add",
            "--pki",
            "pki.json",
            "--database-url",
            &store,
        ],
    );
    assert_eq!(rotate.status.code(), Some(1));
    assert_eq!(
        stderr(&rotate),
        "bcctl: INVALID_STATE: pki.json is not authenticated (its keys are in plaintext while a deployment secret is set: whoever can write the file chose them), so it is not written back; compare its pins (`bcctl pki show`) with your records, then seal it with `bcctl pki reseal --accept-unauthenticated`"
    );
    assert!(fs::read_to_string(t.join("pki.json"))
        .expect("bundle")
        .contains("\"mode\": \"plaintext\""));

    let sealed = ok(&bcctl(
        t,
        Some(SECRET),
        &[
            "pki",
            "reseal",
            "--pki",
            "pki.json",
            "--accept-unauthenticated",
            "--json",
        ],
    ));
    assert_eq!(sealed["authenticated"], true);
    assert_eq!(sealed["pins"], init["pins"]);
    let show = ok(&bcctl(
        t,
        Some(SECRET),
        &["pki", "show", "--pki", "pki.json", "--json"],
    ));
    assert_eq!(show["protection"], "sealed");
    assert_eq!(show["authenticated"], true);
    // An authenticated bundle is simply resealed.
    ok(&bcctl(
        t,
        Some(SECRET),
        &["pki", "reseal", "--pki", "pki.json", "--json"],
    ));
    // Without any secret: MISSING_ENV-like refusal.
    let none = bcctl(t, None, &["pki", "reseal", "--pki", "pki.json"]);
    assert_eq!(none.status.code(), Some(1));

    // Move to a new secret (from a file; BC_NEW_DEPLOYMENT_SECRET works the same).
    fs::write(t.join("new-secret"), format!("{NEW_SECRET}\n")).expect("write");
    let moved = ok(&bcctl(
        t,
        Some(SECRET),
        &[
            "pki",
            "reseal",
            "--pki",
            "pki.json",
            "--new-secret-file",
            "new-secret",
            "--json",
        ],
    ));
    assert_eq!(moved["newSecret"], true);
    let old = bcctl(t, Some(SECRET), &["pki", "show", "--pki", "pki.json"]);
    assert_eq!(old.status.code(), Some(1));
    assert!(
        stderr(&old).contains("does not open with this BC_DEPLOYMENT_SECRET"),
        "{}",
        stderr(&old)
    );
    let new = ok(&bcctl(
        t,
        Some(NEW_SECRET),
        &["pki", "show", "--pki", "pki.json", "--json"],
    ));
    assert_eq!(new["authenticated"], true);
    assert_eq!(new["pins"], init["pins"]);
    // And back, through the environment variable.
    let mut cmd = Command::new(bcctl_bin());
    let back = cmd
        .current_dir(t)
        .args(["pki", "reseal", "--pki", "pki.json", "--json"])
        .env("BC_DEPLOYMENT_SECRET", NEW_SECRET)
        .env("BC_NEW_DEPLOYMENT_SECRET", SECRET)
        .env_remove("BC_DEPLOYMENT_SECRET_FILE")
        .output()
        .expect("bcctl");
    ok(&back);
    ok(&bcctl(
        t,
        Some(SECRET),
        &["pki", "show", "--pki", "pki.json", "--json"],
    ));
}

/// The serial of the certificate a new TLS connection to `port` is served (upper-case hex).
fn served_serial(port: u16) -> String {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "openssl s_client -connect 127.0.0.1:{port} -servername localhost </dev/null 2>/dev/null | openssl x509 -noout -serial"
        ))
        .output()
        .expect("openssl s_client");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .trim_start_matches("serial=")
        .to_ascii_uppercase()
}

#[test]
fn gateway_tls_files_reload_on_change_and_keep_the_old_pair_when_half_written() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let t = tmp.path();
    let dep = t.join("dep");
    fs::create_dir_all(&dep).expect("mkdir");
    fs::write(dep.join("deployment-secret"), SECRET).expect("secret");
    ok(&bcctl(
        t,
        Some(SECRET),
        &[
            "pki",
            "init",
            "--trust-domain",
            "gw.example.com",
            "--pki",
            "dep/pki.json",
        ],
    ));
    let issue = || {
        let v = ok(&bcctl(
            t,
            None,
            &[
                "pki",
                "issue-gateway",
                "--dir",
                "dep",
                "--san",
                "localhost",
                "--san",
                "127.0.0.1",
                "--out",
                "tls",
                "--days",
                "2",
                "--json",
            ],
        ));
        v["serial"].as_str().expect("serial").to_ascii_uppercase()
    };
    let first = issue();
    use std::os::unix::fs::PermissionsExt;
    let mode = fs::metadata(t.join("tls/localhost.key"))
        .expect("key")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let crt = t.join("tls/localhost.crt");
    assert_eq!(
        fs::read_to_string(&crt)
            .expect("crt")
            .matches("BEGIN CERTIFICATE")
            .count(),
        2,
        "the certificate and the serving CA"
    );
    let cfg = t.join("serve.toml");
    fs::write(
        &cfg,
        format!(
            "[tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\nreload_interval = \"200ms\"\n",
            crt.display(),
            t.join("tls/localhost.key").display()
        ),
    )
    .expect("config");
    let port = free_port();
    let cfg_arg = cfg.display().to_string();
    let (server, facts) = up_with(t, &dep, port, 1, &["--config", &cfg_arg], "24h");
    assert_eq!(served_serial(port), first, "{}", server.log_text());

    // A node holds a session through the reloads.
    let data = t.join("node");
    let config = facts["bcdConfig"].as_str().expect("bcdConfig").to_owned();
    let bcd = |args: &[&str]| {
        let mut cmd = Command::new(bcd_bin());
        cmd.arg("--config")
            .arg(&config)
            .arg("--data-dir")
            .arg(&data)
            .args(args)
            .env_remove("BCD_SERVER")
            .env_remove("BCD_DATA_DIR")
            .env_remove("BCD_CONFIG")
            .stdin(Stdio::null());
        cmd
    };
    let out = bcd(&["join"])
        .env("BCD_JOIN_TOKEN", facts["token"].as_str().expect("token"))
        .output()
        .expect("bcd join");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = t.join("bcd-node.log");
    let mut agent = Proc {
        name: "bcd node".into(),
        child: bcd(&["node"])
            .stdout(Stdio::null())
            .stderr(Stdio::from(fs::File::create(&log).expect("log")))
            .spawn()
            .expect("spawn bcd node"),
        log,
    };
    wait_for(
        "a session",
        Duration::from_secs(30),
        || agent.log_text().contains("session open as"),
        || agent.log_text() + &server.log_text(),
    );

    let second = issue();
    assert_ne!(second, first);
    wait_for(
        "the new serial on a new connection",
        Duration::from_secs(20),
        || served_serial(port) == second,
        || server.log_text(),
    );
    assert!(
        server
            .log_text()
            .contains("gateway serving certificate reloaded"),
        "{}",
        server.log_text()
    );

    // Half-written: the certificate cut short. The listener keeps the second pair.
    let text = fs::read_to_string(&crt).expect("crt");
    fs::write(&crt, &text[..text.len() / 2]).expect("write");
    wait_for(
        "the refusal in the log",
        Duration::from_secs(20),
        || {
            server
                .log_text()
                .contains("Gateway serving certificate not reloaded")
        },
        || server.log_text(),
    );
    assert_eq!(served_serial(port), second);
    // The next change is tried again.
    let third = issue();
    wait_for(
        "the third serial",
        Duration::from_secs(20),
        || served_serial(port) == third,
        || server.log_text(),
    );
    // The node's session was never dropped.
    assert!(agent.is_running(), "{}", agent.log_text());
    assert_eq!(
        agent.log_text().matches("session open as").count(),
        1,
        "{}",
        agent.log_text()
    );
    drop(agent);
    drop(server);
}

/// A command that must succeed (its output is not read).
fn ok_status(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
