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
//! Postgres as the `postgres` user; needs `/usr/lib/postgresql/15/bin`: `support::own_postgres`).

use crate::support;

use support::own_postgres::OwnPostgres;
use support::{bcctl_bin, bcd_at, feed_stale, wait_for, write_bcd_config, Proc};

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use domain::pki::open_bundle;

const SECRET: &str = "fault-postgres-restart-secret-0123456789abcdef";
const STORE_DOWN: &str =
    "attempt 1 failed: Unavailable: the control plane's store is unavailable; retry later";

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
    let config = write_bcd_config(&t.join("bcd"), &gw, &public);
    let bcd = |data: &Path, args: &[&str]| bcd_at(&config, data, args);
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
    assert_eq!(feed_stale(&metrics_addr).as_deref(), Some("0"));

    // Postgres goes down.
    pg.stop();
    wait_for(
        "the feed to fail closed",
        Duration::from_secs(30),
        || feed_stale(&metrics_addr).as_deref() == Some("1"),
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
        || feed_stale(&metrics_addr).as_deref() == Some("0"),
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
