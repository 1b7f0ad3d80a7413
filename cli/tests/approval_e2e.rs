//! End to end with the real binaries, on SQLite and on Postgres: a join through a token that
//! requires approval (`bcctl token create --approval`) waits in bcd, logged with the join
//! request's id and the command that approves it; `bcctl join-request approve` releases it and
//! bcd's retry (same CSR) joins. A rejected request never joins: bcd exits 1 with a clear error,
//! and nothing is stored.
//!
//! Run: `cargo test -p cli --test suite approval_e2e::` (Postgres at `DATABASE_URL`).

use crate::support;
use crate::x509pop_e2e::{bcd, node_in, start_server};

use support::Proc;

use std::time::{Duration, Instant};

use events::store::testkit::TestDb;

/// The line bcd logs while it waits, up to the request id.
const WAITING: &str = "bcd join: waiting for approval of ";
/// The test server's pending retry hint is 1 s (`BC_JOIN_PENDING_RETRY_SECONDS`, set by
/// `start_server`; 30 s by default): a released join goes on within about a second. The bound
/// leaves room for a loaded machine.
const RELEASE_WITHIN: Duration = Duration::from_secs(75);

fn request_id(rest: &str) -> String {
    rest.split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned()
}

fn scenario(db_url: &str) {
    let started = Instant::now();
    let tmp = tempfile::tempdir().expect("tempdir");
    let server = start_server(tmp.path(), db_url, "1h");

    // Approved: the waiting join is released.
    let token = server.token(&["--approval"]);
    let data = tmp.path().join("approved");
    let mut cmd = bcd(&server, &data, &["join"]);
    cmd.env("BCD_JOIN_TOKEN", &token);
    let mut join = Proc::spawn("bcd join (approved)", cmd, tmp.path().join("approved.log"));
    let id = request_id(&join.wait_line(WAITING, Duration::from_secs(60)));
    assert!(id.starts_with("jr_"), "{}", join.log_text());
    assert!(
        join.log_text()
            .contains(&format!("{WAITING}{id} (bcctl join-request approve {id})")),
        "{}",
        join.log_text()
    );
    assert!(!data.join("identity.json").exists());
    let shown = server.bcctl_json(&["join-request", "show", &id, "--json"]);
    assert_eq!(shown["status"], "pending", "{shown}");
    server.bcctl(&["join-request", "approve", &id]);
    let status = join.wait_exit(RELEASE_WITHIN);
    let log = join.log_text();
    assert_eq!(
        status.code(),
        Some(0),
        "{log}\nserver:\n{}",
        server.proc.log_text()
    );
    let node = node_in(&log, "joined");
    assert!(data.join("identity.json").exists(), "{log}");
    let shown = server.bcctl_json(&["join-request", "show", &id, "--json"]);
    assert_eq!(shown["status"], "consumed", "{shown}");
    eprintln!("approved join of {node} ({id})");

    // Rejected: never joins.
    let token = server.token(&["--approval"]);
    let data = tmp.path().join("rejected");
    let mut cmd = bcd(&server, &data, &["join"]);
    cmd.env("BCD_JOIN_TOKEN", &token);
    let mut join = Proc::spawn("bcd join (rejected)", cmd, tmp.path().join("rejected.log"));
    let id = request_id(&join.wait_line(WAITING, Duration::from_secs(60)));
    server.bcctl(&["join-request", "reject", &id]);
    let status = join.wait_exit(RELEASE_WITHIN);
    let log = join.log_text();
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(log.contains("Join refused (ACCESS_DENIED)"), "{log}");
    assert!(
        log.contains(&format!("this join waited for join request {id}")),
        "{log}"
    );
    assert!(!log.contains("joined as"), "{log}");
    assert!(!data.join("identity.json").exists());
    eprintln!("approval e2e on {db_url}: {:?}", started.elapsed());
}

#[test]
fn approval_e2e_sqlite() {
    let db = TestDb::sqlite().expect("sqlite test db");
    scenario(db.url());
}

#[tokio::test(flavor = "multi_thread")]
async fn approval_e2e_postgres() {
    let db = TestDb::postgres().await.expect("postgres test db");
    let url = db.url().to_owned();
    tokio::task::spawn_blocking(move || scenario(&url))
        .await
        .expect("scenario");
    drop(db);
}
