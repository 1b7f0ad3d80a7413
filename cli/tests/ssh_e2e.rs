//! Break-glass SSH (issue 42) with the real binaries, the real OpenSSH client and server, and
//! `ssh-keygen` as the outside checker (docs/SSH.md's walk-through).
//!
//! - Over the admin API on Postgres (the harness of `admin_e2e.rs`): an operator issues a user
//!   certificate for `root@node-0`; an approver and an auditor are refused with the role it
//!   needs. `ssh-keygen -L` shows the principal, validity, serial and key id. A real sshd (its
//!   own configuration on a loopback port: `TrustedUserCAKeys` from `bcctl ssh ca`, an
//!   `AuthorizedPrincipalsFile` mapping `root@node-0` to root, `RevokedKeys` from `bcctl ssh
//!   krl`) lets `ssh -o CertificateFile=` run a command; a certificate naming node-1 is refused;
//!   after `bcctl ssh revoke` and the KRL rewritten the same certificate is refused (the time it
//!   took is printed, not asserted), and `ssh-keygen -Q` reports it revoked. `events list` shows
//!   both events with the operator as actor.
//! - The store's side in direct mode on SQLite and on Postgres: issue, list (by node), revoke
//!   once (a repeat is "already revoked"), an unknown serial is NOT_FOUND, a retired node gets
//!   none, the KRL lists the revoked serial.
//!
//! Run: `cargo test -p cli --test suite ssh_e2e::` (as root, for sshd).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use events::store::testkit::TestDb;
use serde_json::Value;

use crate::admin_e2e::{stderr, AdminDeployment};
use crate::support::{bcctl_bin, Proc};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// `ssh-keygen -t ed25519` into `dir/name` (and `name.pub`).
fn user_key(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"])
        .arg(&path)
        .output()
        .expect("ssh-keygen");
    assert!(out.status.success(), "{}", stderr(&out));
    path
}

/// A real sshd on a loopback port with its own configuration.
struct Sshd {
    proc: Proc,
    port: u16,
}

impl Sshd {
    fn start(dir: &Path, user_ca: &Path, krl: &Path, principals_of_root: &str) -> Sshd {
        std::fs::create_dir_all("/run/sshd").expect("sshd's privilege separation directory");
        let host_key = dir.join("host_ed25519");
        let out = Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(&host_key)
            .output()
            .expect("ssh-keygen");
        assert!(out.status.success());
        let principals = dir.join("principals");
        std::fs::create_dir_all(&principals).expect("principals dir");
        std::fs::write(principals.join("root"), format!("{principals_of_root}\n"))
            .expect("principals");
        let port = free_port();
        let config = dir.join("sshd_config");
        std::fs::write(
            &config,
            format!(
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {hk}\nPidFile {pid}\n\
                 TrustedUserCAKeys {ca}\nAuthorizedPrincipalsFile {pr}/%u\nRevokedKeys {krl}\n\
                 AuthorizedKeysFile none\nPubkeyAuthentication yes\nPasswordAuthentication no\n\
                 KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n\
                 StrictModes no\nUsePAM no\nLogLevel VERBOSE\n",
                hk = host_key.display(),
                pid = dir.join("sshd.pid").display(),
                ca = user_ca.display(),
                pr = principals.display(),
                krl = krl.display(),
            ),
        )
        .expect("sshd_config");
        let mut cmd = Command::new("/usr/sbin/sshd");
        cmd.args(["-D", "-e", "-f"])
            .arg(&config)
            .stdin(Stdio::null());
        let proc = Proc::spawn("sshd", cmd, dir.join("sshd.log"));
        crate::support::wait_for(
            "sshd",
            Duration::from_secs(20),
            || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok(),
            || proc.log_text(),
        );
        Sshd { proc, port }
    }

    /// `ssh -i KEY -o CertificateFile=CERT root@127.0.0.1 echo ...` in batch mode.
    fn login(&self, key: &Path, cert: &Path) -> Output {
        Command::new("ssh")
            .args(["-F", "/dev/null", "-i"])
            .arg(key)
            .arg("-o")
            .arg(format!("CertificateFile={}", cert.display()))
            .args([
                "-o",
                "IdentitiesOnly=yes",
                "-o",
                "BatchMode=yes",
                "-o",
                "StrictHostKeyChecking=no",
                "-o",
                "UserKnownHostsFile=/dev/null",
                "-o",
                "LogLevel=ERROR",
                "-p",
                &self.port.to_string(),
                "root@127.0.0.1",
                "echo",
                "break-glass-ok",
            ])
            .stdin(Stdio::null())
            .output()
            .expect("ssh")
    }
}

fn events_of<'a>(events: &'a Value, event_type: &str) -> Vec<&'a Value> {
    events
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["eventType"] == event_type)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn break_glass_through_the_admin_api_opens_only_its_node_until_revoked() {
    let d = AdminDeployment::start(&["approver-1"]).await;
    let ops = d.issue("ops", "operator");
    let appr = d.issue_approver("approver-1");
    let aud = d.issue("audit", "auditor");
    let key = user_key(&ops.dir, "id_ed25519");
    let other = user_key(&ops.dir, "other_ed25519");

    // Roles: an approver and an auditor may not issue.
    for (who, has) in [(&appr, "approver"), (&aud, "auditor")] {
        std::fs::copy(key.with_extension("pub"), who.dir.join("id.pub")).expect("copy");
        let out = d.as_person(
            who,
            &[
                "ssh",
                "issue",
                "--node",
                "node-0",
                "--account",
                "root",
                "--public-key",
                "id.pub",
            ],
        );
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        assert_eq!(
            stderr(&out),
            format!(
                "bcctl: permission denied: ssh issue needs the operator role; {} is {has}\n",
                who.spiffe_id()
            )
        );
    }

    let issued = d.as_person_ok(
        &ops,
        &[
            "ssh",
            "issue",
            "--node",
            "node-0",
            "--account",
            "root",
            "--public-key",
            "id_ed25519.pub",
            "--ttl",
            "10m",
            "--out",
            "id_ed25519-cert.pub",
            "--json",
        ],
    );
    let serial = issued["serial"].as_str().expect("serial").to_string();
    assert_eq!(issued["principal"], "root@node-0");
    let cert = ops.dir.join("id_ed25519-cert.pub");
    let shown = Command::new("ssh-keygen")
        .arg("-L")
        .arg("-f")
        .arg(&cert)
        .output()
        .expect("ssh-keygen -L");
    let shown = String::from_utf8_lossy(&shown.stdout).to_string();
    assert!(
        shown.contains("Type: ssh-ed25519-cert-v01@openssh.com user certificate"),
        "{shown}"
    );
    assert!(shown.contains(&format!("Serial: {serial}")), "{shown}");
    assert!(
        shown.contains(&format!(
            "Key ID: \"{} break-glass root@node-0\"",
            ops.spiffe_id()
        )),
        "{shown}"
    );
    assert!(
        shown.contains("Principals: \n                root@node-0\n"),
        "{shown}"
    );
    assert!(shown.contains("Valid: from "), "{shown}");
    println!("ssh-keygen -L:\n{shown}");
    let elsewhere = d.as_person_ok(
        &ops,
        &[
            "ssh",
            "issue",
            "--node",
            "node-1",
            "--account",
            "root",
            "--public-key",
            "other_ed25519.pub",
            "--out",
            "other_ed25519-cert.pub",
            "--json",
        ],
    );
    assert_eq!(elsewhere["principal"], "root@node-1");

    // The node's files, as the admin makes them on the server.
    let node_dir = d.srv.join("node-0-ssh");
    std::fs::create_dir_all(&node_dir).expect("node dir");
    let user_ca = d.admin_run(&["ssh", "ca", "--trusted-user-ca"]);
    assert!(user_ca.status.success(), "{}", stderr(&user_ca));
    let ca_line = String::from_utf8_lossy(&user_ca.stdout).to_string();
    assert!(ca_line.starts_with("ssh-ed25519 "), "{ca_line}");
    std::fs::write(node_dir.join("user_ca.pub"), &ca_line).expect("user ca");
    let known = d.admin_run(&["ssh", "ca", "--known-hosts", "--names", "*.fleet.example"]);
    assert_eq!(
        String::from_utf8_lossy(&known.stdout),
        format!("@cert-authority *.fleet.example {ca_line}")
    );
    let krl = node_dir.join("revoked.krl");
    let krl_text = krl.to_str().expect("utf-8").to_string();
    let written = d.admin_ok(&["ssh", "krl", "--out", &krl_text, "--json"]);
    assert_eq!(written["serials"], serde_json::json!([]));
    let sshd = Sshd::start(
        &node_dir,
        &node_dir.join("user_ca.pub"),
        &krl,
        "root@node-0",
    );

    let login = sshd.login(&key, &cert);
    assert!(
        login.status.success(),
        "ssh: {}\nsshd:\n{}",
        stderr(&login),
        sshd.proc.log_text()
    );
    assert_eq!(String::from_utf8_lossy(&login.stdout), "break-glass-ok\n");
    let wrong = sshd.login(&other, &ops.dir.join("other_ed25519-cert.pub"));
    assert_eq!(
        wrong.status.code(),
        Some(255),
        "a node-1 certificate opened node-0"
    );

    // Revoke over the API, rewrite the KRL: refused from then on.
    let started = Instant::now();
    let revoked = d.as_person_ok(
        &ops,
        &["ssh", "revoke", &serial, "--reason", "done", "--json"],
    );
    assert_eq!(revoked["revoked"], true);
    assert_eq!(revoked["alreadyRevoked"], false);
    let rewritten = d.admin_ok(&["ssh", "krl", "--out", &krl_text, "--json"]);
    assert_eq!(rewritten["serials"], serde_json::json!([serial]));
    let after = sshd.login(&key, &cert);
    println!(
        "revocation to refusal (revoke, KRL rewrite, next login): {:?}",
        started.elapsed()
    );
    assert_eq!(
        after.status.code(),
        Some(255),
        "a revoked certificate opened node-0"
    );
    let log = sshd.proc.log_text();
    assert!(
        log.contains("revoked"),
        "sshd says nothing of a revocation:\n{log}"
    );
    let q = Command::new("ssh-keygen")
        .arg("-Q")
        .arg("-f")
        .arg(&krl)
        .arg(&cert)
        .output()
        .expect("ssh-keygen -Q");
    assert!(
        String::from_utf8_lossy(&q.stdout).contains("REVOKED"),
        "{q:?}"
    );

    let events = d.admin_ok(&["events", "list", "--json"]);
    let issued_events = events_of(&events, "ssh.user_cert.issued");
    assert_eq!(issued_events.len(), 2, "{events}");
    let revoked_events = events_of(&events, "ssh.user_cert.revoked");
    assert_eq!(revoked_events.len(), 1);
    let actor = revoked_events[0]["actor"].to_string();
    assert!(actor.contains(&ops.spiffe_id()), "{actor}");
    let listed = d.as_person_ok(&aud, &["ssh", "list", "--node", "node-0", "--json"]);
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
    assert_eq!(listed[0]["issuedBy"], ops.spiffe_id());
    assert!(listed[0]["keyFingerprint"]
        .as_str()
        .is_some_and(|f| f.starts_with("SHA256:")));
}

const SECRET: &str = "an ssh e2e deployment secret, long enough to seal";

fn direct(dir: &Path, url: &str, args: &[&str]) -> Output {
    Command::new(bcctl_bin())
        .current_dir(dir)
        .env("DATABASE_URL", url)
        .env("BC_DEPLOYMENT_SECRET", SECRET)
        .env_remove("BC_DEPLOYMENT_SECRET_FILE")
        .env_remove("BC_PKI_BUNDLE")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run bcctl")
}

fn direct_ok(dir: &Path, url: &str, args: &[&str]) -> Value {
    let out = direct(dir, url, args);
    assert!(out.status.success(), "bcctl {args:?}: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

async fn store_parts(db: &TestDb) {
    db.store().await.expect("migrated store");
    crate::support::seed_nodes(db.url(), "t1", 2).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let url = db.url();
    direct_ok(
        d,
        url,
        &["pki", "init", "--trust-domain", "ssh.example.com"],
    );
    let shown = direct_ok(d, url, &["pki", "show", "--json"]);
    assert!(shown["pins"]["sshCaPublicKey"]
        .as_str()
        .is_some_and(|k| k.starts_with("ssh-ed25519 ")));
    let again = direct(d, url, &["pki", "add-ssh-ca"]);
    assert_eq!(again.status.code(), Some(1));
    assert_eq!(
        stderr(&again),
        "bcctl: pki add-ssh-ca: INVALID_STATE: the bundle already has an SSH CA (`bcctl pki show` prints its public key)\n"
    );
    user_key(d, "id");
    let issue = |node: &str| {
        direct(
            d,
            url,
            &[
                "ssh",
                "issue",
                "--node",
                node,
                "--account",
                "deploy",
                "--public-key",
                "id.pub",
                "--json",
            ],
        )
    };
    let first: Value = serde_json::from_slice(&issue("node-0").stdout).expect("issue JSON");
    let serial = first["serial"].as_str().expect("serial").to_string();
    assert!(first["certificate"]
        .as_str()
        .is_some_and(|c| c.starts_with("ssh-ed25519-cert-v01@openssh.com ")));
    direct_ok(
        d,
        url,
        &[
            "ssh",
            "issue",
            "--node",
            "node-1",
            "--account",
            "deploy",
            "--public-key",
            "id.pub",
            "--json",
        ],
    );
    let listed = direct_ok(d, url, &["ssh", "list", "--node", "node-0", "--json"]);
    assert_eq!(listed.as_array().map(Vec::len), Some(1));
    assert_eq!(listed[0]["serial"], serial.as_str());
    assert_eq!(listed[0]["principal"], "deploy@node-0");
    assert_eq!(listed[0]["tenantId"], "t1");

    let revoked = direct_ok(d, url, &["ssh", "revoke", &serial, "--json"]);
    assert_eq!(revoked["alreadyRevoked"], false);
    let repeat = direct_ok(d, url, &["ssh", "revoke", &serial, "--json"]);
    assert_eq!(repeat["alreadyRevoked"], true);
    let unknown = direct(d, url, &["ssh", "revoke", "12345"]);
    assert_eq!(unknown.status.code(), Some(1));
    assert_eq!(
        stderr(&unknown),
        "bcctl: NOT_FOUND: no SSH certificate has serial 12345 (`bcctl ssh list` shows them)\n"
    );
    let krl = direct_ok(d, url, &["ssh", "krl", "--out", "revoked.krl", "--json"]);
    assert_eq!(krl["serials"], serde_json::json!([serial]));
    assert!(d.join("revoked.krl").is_file());

    direct_ok(
        d,
        url,
        &["node", "retire", "node-1", "--reason", "gone", "--json"],
    );
    let retired = issue("node-1");
    assert_eq!(retired.status.code(), Some(1), "{}", stderr(&retired));
    let error: Value = serde_json::from_slice(&retired.stderr).expect("a JSON error");
    assert_eq!(
        error["error"]["message"],
        "INVALID_STATE: node node-1 is retired, not active: it gets no SSH certificate"
    );
    let over = direct(
        d,
        url,
        &[
            "ssh",
            "issue",
            "--node",
            "node-0",
            "--account",
            "deploy",
            "--public-key",
            "id.pub",
            "--ttl",
            "2h",
        ],
    );
    assert_eq!(over.status.code(), Some(2));
    assert_eq!(
        stderr(&over),
        "bcctl: INVALID_INPUT: --ttl 7200s: a break-glass certificate lives at most 1h (3600s)\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssh_store_parts_on_sqlite() {
    store_parts(&TestDb::sqlite().expect("sqlite")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssh_store_parts_on_postgres() {
    store_parts(&TestDb::postgres().await.expect("postgres")).await;
}
