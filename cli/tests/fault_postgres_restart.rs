//! Postgres restarted under a running `bcctl serve` (issue 17, "faults survived"), with the real
//! binaries against a Postgres of the test's own: `initdb` into a temporary directory and
//! `pg_ctl` start and stop on a free port, as the `postgres` OS user (`runuser`), so the
//! shared server on 5432 is never touched.
//!
//! While Postgres is down: a `bcd join` gets the clear UNAVAILABLE answer ("the control plane's
//! store is unavailable; retry later") at each attempt and keeps retrying; the revocation feed
//! fails closed (`bc_revocation_feed_stale 1`, a new session refused); the server neither panics
//! nor exits. Once Postgres is back: that same `bcd join` completes by itself, the feed catches
//! up (`bc_revocation_feed_stale 0`, the new node opens a session), a revocation committed
//! after the restart still cuts the revoked node's live session, so the feed really tails again,
//! and the audit sequencer gives every event, old and new, its leaf.
//!
//! Run: `cargo test -p cli --test suite fault_postgres_restart::` (as root, which may run
//! Postgres as the `postgres` user; needs `/usr/lib/postgresql/15/bin`).

use crate::support;

use support::{bcctl_bin, bcd_bin, wait_for, Proc};

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use domain::pki::{open_bundle, PublicKey};

const PG_BIN: &str = "/usr/lib/postgresql/15/bin";
const SECRET: &str = "fault-postgres-restart-secret-0123456789abcdef";
const STORE_DOWN: &str =
    "attempt 1 failed: Unavailable: the control plane's store is unavailable; retry later";

/// A Postgres cluster of this test's own, stopped (immediately) when dropped.
struct OwnPostgres {
    data: PathBuf,
    log: PathBuf,
    port: u16,
    _dir: tempfile::TempDir,
}

fn as_postgres(program: &str) -> Command {
    let mut cmd = Command::new("runuser");
    cmd.args(["-u", "postgres", "--"])
        .arg(Path::new(PG_BIN).join(program));
    cmd
}

fn must(mut cmd: Command, what: &str) {
    let out = cmd.stdin(Stdio::null()).output().expect(what);
    assert!(
        out.status.success(),
        "{what}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl OwnPostgres {
    fn init() -> OwnPostgres {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
        let data = dir.path().join("data");
        let log = dir.path().join("postgres.log");
        let mut chown = Command::new("chown");
        chown.arg("postgres:postgres").arg(dir.path());
        must(chown, "chown the cluster directory to postgres");
        let mut initdb = as_postgres("initdb");
        initdb
            .args(["-A", "trust", "-U", "postgres", "--no-sync", "-D"])
            .arg(&data);
        must(initdb, "initdb");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let pg = OwnPostgres {
            data,
            log,
            port,
            _dir: dir,
        };
        pg.start();
        pg
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    fn start(&self) {
        let mut cmd = as_postgres("pg_ctl");
        cmd.arg("-D")
            .arg(&self.data)
            .arg("-l")
            .arg(&self.log)
            .arg("-o")
            .arg(format!(
                "-p {} -c listen_addresses=127.0.0.1 -k {} -c fsync=off",
                self.port,
                self.data.display()
            ))
            .args(["-w", "-t", "60", "start"]);
        must(cmd, "pg_ctl start");
    }

    /// Stops it the way a restart does: every connection is terminated.
    fn stop(&self) {
        let mut cmd = as_postgres("pg_ctl");
        cmd.arg("-D")
            .arg(&self.data)
            .args(["-m", "fast", "-w", "-t", "60", "stop"]);
        must(cmd, "pg_ctl stop");
    }
}

impl Drop for OwnPostgres {
    fn drop(&mut self) {
        let _ = as_postgres("pg_ctl")
            .arg("-D")
            .arg(&self.data)
            .args(["-m", "immediate", "-w", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

fn bcctl(args: &[&str], url: &str) -> Command {
    let mut cmd = Command::new(bcctl_bin());
    cmd.args(args);
    for var in [
        "BC_DEPLOYMENT_SECRET_FILE",
        "BC_PKI_BUNDLE",
        "BC_ROLE",
        "BC_LISTEN",
        "BC_API_INTERNAL_LISTEN",
        "BC_API_INTERNAL_URL",
        "BC_INTERNAL_CERT",
        "BC_INTERNAL_KEY",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("BC_DEPLOYMENT_SECRET", SECRET)
        .env("DATABASE_URL", url);
    cmd
}

fn ok(mut cmd: Command) -> String {
    let out = cmd.stdin(Stdio::null()).output().expect("run bcctl");
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn jwk(key: &PublicKey) -> String {
    let p = key.uncompressed_point();
    serde_json::json!({
        "kty": "EC", "crv": "P-256",
        "x": URL_SAFE_NO_PAD.encode(&p[1..33]),
        "y": URL_SAFE_NO_PAD.encode(&p[33..65]),
    })
    .to_string()
}

/// `GET /metrics`, the page's body (empty when the endpoint does not answer).
fn metrics(addr: &str) -> String {
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let mut page = String::new();
    let _ = s.read_to_string(&mut page);
    page
}

#[test]
fn postgres_restart_under_a_running_server() {
    let pg = OwnPostgres::init();
    let url = pg.url();
    let tmp = tempfile::tempdir().expect("tempdir");
    let t = tmp.path();
    ok(bcctl(&["migrate", "--database-url", &url], &url));
    let pki = t.join("pki.json");
    ok(bcctl(
        &[
            "pki",
            "init",
            "--trust-domain",
            "restart.test",
            "--out",
            &pki.display().to_string(),
        ],
        &url,
    ));
    let public = open_bundle(&fs::read(&pki).expect("pki"), None)
        .expect("bundle")
        .public;

    let mut cmd = bcctl(&["serve", "--role", "all"], &url);
    cmd.env("BC_PKI_BUNDLE", &pki)
        .env("BC_LISTEN", "127.0.0.1:0")
        .env("BC_METRICS_LISTEN", "127.0.0.1:0")
        .env("BC_FEED_MAX_LAG", "1s");
    let mut server = Proc::spawn("bcctl serve", cmd, t.join("serve.log"));
    let line = server.wait_line("listening on ", Duration::from_secs(60));
    let gw = line
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned();
    let metrics_addr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .unwrap_or_default()
        .to_owned();
    assert!(!metrics_addr.is_empty(), "{line}");

    // bcd's configuration and two machines.
    let pins = public.pins().expect("pins");
    let conf = t.join("bcd");
    fs::create_dir_all(&conf).expect("mkdir");
    fs::write(
        conf.join("config.toml"),
        format!(
            "server = \"{gw}\"\nserving_ca_spki_pin = \"{}\"\n\
             join_encryption_key_pin = \"{}\"\njoin_signing_key_pin = \"{}\"\n",
            pins.serving_ca, pins.join_encryption, pins.join_signing
        ),
    )
    .expect("config");
    fs::write(
        conf.join("join-encryption.jwk"),
        jwk(&public.join_encryption),
    )
    .expect("jwk");
    fs::write(conf.join("join-signing.jwk"), jwk(&public.join_signing)).expect("jwk");
    let bcd = |data: &Path, args: &[&str]| {
        let mut c = Command::new(bcd_bin());
        c.arg("--config")
            .arg(conf.join("config.toml"))
            .arg("--data-dir")
            .arg(data)
            .args(args)
            .env_remove("BCD_JOIN_TOKEN")
            .env_remove("BCD_SERVER")
            .env_remove("BCD_DATA_DIR")
            .env_remove("BCD_CONFIG")
            .env_remove(bcd::fault::CRASH_AT_ENV)
            .stdin(Stdio::null());
        c
    };
    let token = |uses: &str| {
        let mut cmd = bcctl(
            &[
                "token", "create", "--tenant", "default", "--site", "site-1", "--uses", uses,
                "--json", "--pki",
            ],
            &url,
        );
        cmd.arg(&pki);
        let out = ok(cmd);
        let v: serde_json::Value = serde_json::from_str(out.trim()).expect("token JSON");
        v["secret"].as_str().expect("secret").to_owned()
    };
    let (first, second) = (t.join("node-1"), t.join("node-2"));
    let out = bcd(&first, &["join"])
        .env("BCD_JOIN_TOKEN", token("1"))
        .output()
        .expect("bcd join");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        server.log_text()
    );
    let first_id = stdout
        .lines()
        .find_map(|l| l.strip_prefix("joined as "))
        .and_then(|r| r.split_whitespace().next())
        .expect("joined as")
        .to_owned();
    let mut node1 = Proc::spawn("bcd node 1", bcd(&first, &["node"]), t.join("node-1.log"));
    node1.wait_line("session open as", Duration::from_secs(30));
    let second_token = token("1");
    assert!(metrics(&metrics_addr).contains("bc_revocation_feed_stale 0"));

    // Postgres goes down.
    pg.stop();
    wait_for(
        "the feed to fail closed",
        Duration::from_secs(30),
        || metrics(&metrics_addr).contains("bc_revocation_feed_stale 1"),
        || server.log_text(),
    );
    // A join now: the clear answer at every attempt, and it keeps trying.
    let mut joining = Proc::spawn(
        "bcd join (during the outage)",
        {
            let mut c = bcd(&second, &["join"]);
            c.env("BCD_JOIN_TOKEN", &second_token);
            c
        },
        t.join("join-2.log"),
    );
    joining.wait_line(STORE_DOWN, Duration::from_secs(90));
    joining.wait_line(
        "attempt 2 failed: Unavailable: the control plane's store is unavailable; retry later",
        Duration::from_secs(90),
    );
    assert!(joining.is_running(), "{}", joining.log_text());
    // A new session is refused while the feed cannot tail (doctor opens one).
    let doctor = bcd(&first, &["doctor"]).output().expect("bcd doctor");
    let doctor = String::from_utf8_lossy(&doctor.stdout).into_owned();
    assert!(
        doctor.contains("FAIL clock skew: the gateway did not open a session for this node"),
        "{doctor}"
    );
    assert!(
        doctor.contains("the gateway's revocation feed is behind; new sessions are refused until it catches up: retry"),
        "{doctor}"
    );
    assert!(server.is_running(), "{}", server.log_text());

    // Postgres is back: the same join completes by itself, the feed catches up.
    pg.start();
    let status = joining.wait_exit(Duration::from_secs(150));
    let log = joining.log_text();
    assert_eq!(status.code(), Some(0), "{log}\n{}", server.log_text());
    assert!(log.contains("joined as "), "{log}");
    wait_for(
        "the feed to catch up",
        Duration::from_secs(30),
        || metrics(&metrics_addr).contains("bc_revocation_feed_stale 0"),
        || server.log_text(),
    );
    let mut node2 = Proc::spawn("bcd node 2", bcd(&second, &["node"]), t.join("node-2.log"));
    node2.wait_line("session open as", Duration::from_secs(60));

    // A revocation after the restart reaches the live session: the feed tails again.
    let mut revoke = bcctl(
        &["node", "revoke", &first_id, "--reason", "after restart"],
        &url,
    );
    revoke.arg("--pki").arg(&pki);
    ok(revoke);
    let status = node1.wait_exit(Duration::from_secs(30));
    let text = node1.log_text();
    assert_eq!(status.code(), Some(1), "{text}");
    assert!(text.contains("certificate revoked"), "{text}");
    assert!(node2.is_running(), "{}", node2.log_text());

    // The audit sequencer survived the outage too: every event, those committed after the
    // restart included, gets its leaf.
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let store = rt
        .block_on(events::store::EventStore::connect(&url))
        .expect("the test's own store connection");
    let coverage = || {
        rt.block_on(projections::inspect::audit_coverage(&store))
            .expect("audit coverage")
    };
    wait_for(
        "every event to have its audit leaf",
        Duration::from_secs(60),
        || {
            let c = coverage();
            c.missing == 0 && c.events > 0
        },
        || format!("{:?}\n{}", coverage(), server.log_text()),
    );

    let log = server.log_text();
    assert!(server.is_running(), "{log}");
    assert!(!log.contains("panicked"), "{log}");
}
