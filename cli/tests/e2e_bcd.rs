//! End to end with the real binaries, on Postgres and on SQLite: `bcctl up` serves (JoinService
//! and gateway in one process, leaves of a few seconds), three `bcd` processes join and hold
//! sessions over mTLS and renew at least twice each; one node is revoked with `bcctl node revoke`
//! and its `bcd node` exits 1 with `agent: this node's certificate was revoked`; a new session
//! with its certificate fails; `bcd join --reset --yes` with a new token joins it as a new node;
//! `bcd join` on a joined machine answers `already joined`.
//!
//! The `bcd` binary is another package's: the test builds it once (`cargo build -p bcd`, a
//! no-op when it is fresh) into the target directory `bcctl` was built in. Every spawned process
//! is killed when its guard drops; every wait is bounded and names what it waited for.
//!
//! Run: `cargo test -p cli --test suite e2e_bcd::` (Postgres at `DATABASE_URL`, default
//! `postgres://postgres@127.0.0.1:5432/postgres`; each test makes its own database). The
//! server's leaves live 10 s (`BC_LEAF_LIFETIME`), so each node renews every 6 s.

use crate::support;

use support::{bcctl_bin, bcd_bin, wait_for, Proc};

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use events::store::testkit::TestDb;

/// The leaf lifetime the server issues in these tests: renewal at 60% is every 6 s.
const LEAF_LIFETIME: &str = "10s";
const REVOKED: &str = "agent: this node's certificate was revoked";

struct Server {
    proc: Proc,
    facts: serde_json::Value,
    secret: String,
}

impl Server {
    fn s(&self, key: &str) -> String {
        self.facts[key]
            .as_str()
            .unwrap_or_else(|| panic!("bcctl up --json has no {key}: {}", self.facts))
            .to_owned()
    }

    /// bcctl against the same store and PKI bundle as the running server.
    fn bcctl(&self, args: &[&str]) -> std::process::Output {
        let out = Command::new(bcctl_bin())
            .args(args)
            .arg("--database-url")
            .arg(self.database_url())
            .arg("--pki")
            .arg(self.s("pkiBundle"))
            .env("BC_DEPLOYMENT_SECRET", &self.secret)
            .stdin(Stdio::null())
            .output()
            .expect("run bcctl");
        assert!(
            out.status.success(),
            "bcctl {args:?}: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        out
    }

    fn database_url(&self) -> String {
        self.facts["databaseUrlFull"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_default()
    }

    fn new_token(&self) -> String {
        let out = self.bcctl(&[
            "token", "create", "--tenant", "default", "--site", "site-1", "--json",
        ]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let v: serde_json::Value = serde_json::from_str(text.trim())
            .unwrap_or_else(|e| panic!("bcctl token create --json: {e}: {text}"));
        v["secret"]
            .as_str()
            .or_else(|| v["token"].as_str())
            .unwrap_or_else(|| panic!("no secret in {text}"))
            .to_owned()
    }
}

fn start_server(tmp: &Path, db_url: &str) -> Server {
    let work = tmp.join("up");
    let log = tmp.join("bcctl.log");
    let child = Command::new(bcctl_bin())
        .args(["up", "--port", "0", "--json", "--token-uses", "3", "--dir"])
        .arg(&work)
        .arg("--database-url")
        .arg(db_url)
        .env("BC_LEAF_LIFETIME", LEAF_LIFETIME)
        .env_remove("BC_DEPLOYMENT_SECRET")
        .env_remove("DATABASE_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(fs::File::create(&log).expect("bcctl log")))
        .spawn()
        .expect("spawn bcctl up");
    let mut proc = Proc {
        name: "bcctl up".into(),
        child,
        log,
    };
    let stdout = proc.child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        if let Some(Ok(line)) = lines.next() {
            let _ = tx.send(line);
        }
        // Keep draining so the server never blocks on a full pipe.
        for _ in lines {}
    });
    let line = rx
        .recv_timeout(Duration::from_secs(120))
        .unwrap_or_else(|_| {
            panic!(
                "bcctl up printed nothing within 120 s; its log:\n{}",
                proc.log_text()
            )
        });
    let mut facts: serde_json::Value =
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("bcctl up --json: {e}: {line}"));
    facts["databaseUrlFull"] = serde_json::Value::String(db_url.to_owned());
    let secret = fs::read_to_string(work.join("deployment-secret"))
        .expect("bcctl up wrote its development secret")
        .trim()
        .to_owned();
    Server {
        proc,
        facts,
        secret,
    }
}

struct Node {
    data: PathBuf,
    name: String,
}

fn bcd(server: &Server, node: &Node, args: &[&str]) -> Command {
    let mut cmd = Command::new(bcd_bin());
    cmd.arg("--config")
        .arg(server.s("bcdConfig"))
        .arg("--data-dir")
        .arg(&node.data)
        .args(args)
        .env_remove("BCD_JOIN_TOKEN")
        .env_remove("BCD_SERVER")
        .env_remove("BCD_DATA_DIR")
        .env_remove("BCD_CONFIG");
    cmd
}

fn join(server: &Server, node: &Node, token: &str, extra: &[&str]) -> (i32, String, String) {
    let mut args = vec!["join"];
    args.extend_from_slice(extra);
    let out = bcd(server, node, &args)
        .env("BCD_JOIN_TOKEN", token)
        .stdin(Stdio::null())
        .output()
        .expect("run bcd join");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `joined as <node> (site ...` -> `<node>`.
fn joined_node_id(stdout: &str) -> String {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("joined as "))
        .unwrap_or_else(|| panic!("no `joined as` line in {stdout}"));
    line["joined as ".len()..]
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned()
}

fn leaf_serial(node: &Node) -> String {
    let text = fs::read_to_string(node.data.join("identity.json")).unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    v["chain"][0].as_str().unwrap_or_default().to_owned()
}

fn scenario(db_url: &str) {
    let started = Instant::now();
    let tmp = tempfile::tempdir().expect("tempdir");
    let bcd_path = bcd_bin();
    assert!(bcd_path.exists());
    let server = start_server(tmp.path(), db_url);
    let token = server.s("token");

    // A configuration pinned to another key than the serving CA's: the real gateway is not
    // trusted, the join stops at once (not retried) and nothing is stored.
    let wrong = tmp.path().join("wrong-pin");
    fs::create_dir_all(&wrong).expect("mkdir");
    let config_dir = Path::new(&server.s("bcdConfig"))
        .parent()
        .expect("config dir")
        .to_path_buf();
    for f in ["join-encryption.jwk", "join-signing.jwk"] {
        fs::copy(config_dir.join(f), wrong.join(f)).expect("copy jwk");
    }
    let text = fs::read_to_string(server.s("bcdConfig")).expect("config");
    let value = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{key} = ")))
            .unwrap_or_else(|| panic!("no {key} in {text}"))
            .to_owned()
    };
    let (serving, signing) = (value("serving_ca_spki_pin"), value("join_signing_key_pin"));
    assert_ne!(serving, signing);
    fs::write(
        wrong.join("config.toml"),
        text.replace(
            &format!("serving_ca_spki_pin = {serving}"),
            &format!("serving_ca_spki_pin = {signing}"),
        ),
    )
    .expect("write config");
    let probe = Node {
        data: tmp.path().join("wrong-pin-data"),
        name: String::new(),
    };
    let t0 = Instant::now();
    let out = Command::new(bcd_bin())
        .arg("--config")
        .arg(wrong.join("config.toml"))
        .arg("--data-dir")
        .arg(&probe.data)
        .arg("join")
        .env("BCD_JOIN_TOKEN", &token)
        .stdin(Stdio::null())
        .output()
        .expect("bcd join");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("is not trusted"), "{stderr}");
    assert!(
        stderr.contains("no certificate of the pinned serving CA"),
        "{stderr}"
    );
    assert!(!stderr.contains("retrying"), "{stderr}");
    assert!(t0.elapsed() < Duration::from_secs(20));
    assert!(!probe.data.join("identity.json").exists());

    // Three machines join with the printed token (three uses).
    let nodes: Vec<Node> = (0..3)
        .map(|i| Node {
            data: tmp.path().join(format!("node{i}")),
            name: String::new(),
        })
        .collect();
    let mut nodes: Vec<Node> = nodes
        .into_iter()
        .map(|mut n| {
            let (code, stdout, stderr) = join(&server, &n, &token, &[]);
            assert_eq!(
                code,
                0,
                "bcd join: {stdout}{stderr}\nserver:\n{}",
                server.proc.log_text()
            );
            assert!(
                stdout.contains("(site site-1, role node); certificate valid until "),
                "{stdout}"
            );
            n.name = joined_node_id(&stdout);
            n
        })
        .collect();
    let mut names: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), 3, "three distinct nodes");

    // bcd sends this machine's hardware claims: a token bound to one of its permanent MACs
    // (written in upper case, as an operator may copy it) joins it, one bound to a MAC it does
    // not have is refused.
    let claims = bcd::hardware::read_claims(Path::new("/sys"));
    let mac = claims
        .macs
        .first()
        .expect("the test machine has a physical Ethernet interface with a permanent MAC")
        .to_ascii_uppercase();
    for (bound_to, joins) in [(mac.as_str(), true), ("02:00:5E:10:00:99", false)] {
        let out = server.bcctl(&[
            "token",
            "create",
            "--tenant",
            "default",
            "--site",
            "site-1",
            "--expect-mac",
            bound_to,
            "--json",
        ]);
        let created: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("token create --json");
        let secret = created["secret"].as_str().expect("secret").to_owned();
        let machine = Node {
            data: tmp.path().join(format!("bound-{bound_to}")),
            name: String::new(),
        };
        let (code, stdout, stderr) = join(&server, &machine, &secret, &[]);
        if joins {
            assert_eq!(code, 0, "bound to {bound_to}: {stdout}{stderr}");
        } else {
            assert_eq!(code, 1, "bound to {bound_to}: {stdout}{stderr}");
            assert!(stderr.contains("Join refused (ACCESS_DENIED)"), "{stderr}");
            assert!(!machine.data.join("identity.json").exists());
        }
    }

    // Each holds a session and renews.
    let mut agents: Vec<Proc> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let log = tmp.path().join(format!("bcd-node{i}.log"));
            let child = bcd(&server, n, &["node"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::from(fs::File::create(&log).expect("log")))
                .spawn()
                .expect("spawn bcd node");
            Proc {
                name: format!("bcd node ({})", n.name),
                child,
                log,
            }
        })
        .collect();
    let first_serials: Vec<String> = nodes.iter().map(leaf_serial).collect();
    let context = |agents: &Vec<Proc>| {
        let mut s = String::new();
        for a in agents {
            s.push_str(&format!("--- {}:\n{}\n", a.name, a.log_text()));
        }
        s
    };
    wait_for(
        "three sessions",
        Duration::from_secs(30),
        || {
            agents
                .iter()
                .all(|a| a.log_text().contains("session open as"))
        },
        || context(&agents) + &server.proc.log_text(),
    );
    // bcd holds its session on the gateway's own framing, not on gRPC.
    for a in &agents {
        let log = a.log_text();
        assert!(log.contains(" over bc-session/1 ("), "{}: {log}", a.name);
        assert!(!log.contains(" over gRPC ("), "{}: {log}", a.name);
    }
    wait_for(
        "two renewals on each node",
        Duration::from_secs(90),
        || {
            agents
                .iter()
                .all(|a| a.log_text().matches("renewed: certificate").count() >= 2)
        },
        || context(&agents) + &server.proc.log_text(),
    );
    for (n, first) in nodes.iter().zip(&first_serials) {
        assert_ne!(&leaf_serial(n), first, "{} has a new certificate", n.name);
    }
    // After each renewal the session is opened again with the new certificate.
    wait_for(
        "a session reopened after each renewal",
        Duration::from_secs(20),
        || {
            agents
                .iter()
                .all(|a| a.log_text().matches("session open as").count() >= 3)
        },
        || context(&agents),
    );

    // Revoke node 0: its bcd node exits 1 with the message, the others stay.
    let victim = nodes[0].name.clone();
    server.bcctl(&["node", "revoke", &victim, "--reason", "e2e test"]);
    let status = agents[0].wait_exit(Duration::from_secs(15));
    let log0 = agents[0].log_text();
    assert_eq!(status.code(), Some(1), "{log0}");
    assert!(log0.contains("certificate revoked"), "{log0}");
    assert!(log0.trim_end().ends_with(REVOKED), "{log0}");
    assert!(
        agents[1].is_running() && agents[2].is_running(),
        "{}",
        context(&agents)
    );

    // bcd node recorded the revocation (revoked.json): doctor reports it under its own check.
    // Without the record, a new session with the revoked certificate fails (doctor opens one)
    // and doctor reports that under the same check.
    let out = bcd(&server, &nodes[0], &["doctor"])
        .stdin(Stdio::null())
        .output()
        .expect("bcd doctor");
    let doctor = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "{doctor}");
    assert!(doctor.contains("FAIL revocation: "), "{doctor}");
    std::fs::remove_file(nodes[0].data.join("revoked.json")).expect("revoked.json");
    let out = bcd(&server, &nodes[0], &["doctor"])
        .stdin(Stdio::null())
        .output()
        .expect("bcd doctor");
    let doctor = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "{doctor}");
    assert!(doctor.contains("ok   gateway:"), "{doctor}");
    assert!(
        doctor.contains("FAIL revocation: ") && !doctor.contains("clock skew"),
        "{doctor}"
    );
    // The gateway's verifier refuses the revoked serial at the handshake (TLS alert
    // certificate_revoked), before any gRPC call.
    assert!(
        doctor.contains("CertificateRevoked") || doctor.contains("certificate_revoked"),
        "{doctor}"
    );
    eprintln!("doctor on the revoked node:\n{doctor}");
    // A node that still holds its certificate opens one.
    let out = bcd(&server, &nodes[1], &["doctor"])
        .stdin(Stdio::null())
        .output()
        .expect("bcd doctor");
    let doctor = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(doctor.contains("ok   clock skew: local clock"), "{doctor}");

    // bcd node started again with the revoked certificate: the handshake is refused as
    // revoked, and it exits 1 with the same message instead of redialing.
    let log = tmp.path().join("bcd-node0-again.log");
    let mut again = Proc {
        name: "bcd node (revoked, restarted)".into(),
        child: bcd(&server, &nodes[0], &["node"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(fs::File::create(&log).expect("log")))
            .spawn()
            .expect("spawn bcd node"),
        log,
    };
    let status = again.wait_exit(Duration::from_secs(20));
    let text = again.log_text();
    assert_eq!(status.code(), Some(1), "{text}");
    assert!(text.contains("certificate revoked"), "{text}");
    assert!(
        text.contains("CertificateRevoked") || text.contains("as revoked"),
        "{text}"
    );
    assert!(text.trim_end().ends_with(REVOKED), "{text}");
    assert_eq!(text.matches("session open as").count(), 0, "{text}");

    // Join again after --reset with a new token: a new node.
    let fresh = server.new_token();
    let (code, stdout, stderr) = join(&server, &nodes[0], &fresh, &["--reset", "--yes"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("moved "), "{stdout}");
    let new_name = joined_node_id(&stdout);
    assert_ne!(new_name, victim);
    nodes[0].name = new_name;

    // bcd join on a joined machine: already joined, no token read.
    let (code, stdout, stderr) = join(&server, &nodes[1], "unused", &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stdout.trim_end(),
        format!(
            "already joined as {} (site site-1, role node)",
            nodes[1].name
        )
    );
    eprintln!("e2e on {db_url}: {:?}", started.elapsed());
    drop(agents);
}

#[test]
fn e2e_sqlite() {
    let db = TestDb::sqlite().expect("sqlite test db");
    scenario(db.url());
}

#[tokio::test(flavor = "multi_thread")]
async fn e2e_postgres() {
    let db = TestDb::postgres().await.expect("postgres test db");
    let url = db.url().to_owned();
    tokio::task::spawn_blocking(move || scenario(&url))
        .await
        .expect("scenario");
    drop(db);
}
