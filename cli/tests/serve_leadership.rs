//! Leadership between two real `bcctl serve --role api` processes on one Postgres database:
//! exactly one logs `leadership taken task=audit-sequencer` (and likewise for `maintenance` and
//! `batch-expiry`); SIGKILLed, the other logs it within seconds (the takeover time is printed).
//!
//! Run: `cargo test -p cli --test suite serve_leadership::` (Postgres at `DATABASE_URL`; the
//! test makes its own database).

use crate::support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use events::store::testkit::TestDb;
use support::{bcctl_bin, wait_for, Proc};

const SECRET: &str = "serve-leadership-deployment-secret-0123456789";
const TASKS: [&str; 3] = ["audit-sequencer", "maintenance", "batch-expiry"];

fn taken(task: &str) -> String {
    format!("leadership taken task={task}")
}

fn api(pki: &std::path::Path, url: &str) -> Command {
    let mut cmd = Command::new(bcctl_bin());
    cmd.args(["serve", "--role", "api"]);
    for var in [
        "BC_DEPLOYMENT_SECRET_FILE",
        "BC_ROLE",
        "BC_LISTEN",
        "RUST_LOG",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("BC_DEPLOYMENT_SECRET", SECRET)
        .env("DATABASE_URL", url)
        .env("BC_PKI_BUNDLE", pki)
        .env("BC_API_INTERNAL_LISTEN", "127.0.0.1:0")
        .env("BC_API_HEALTH_LISTEN", "127.0.0.1:0")
        .env("BC_METRICS_LISTEN", "off");
    cmd
}

#[test]
fn one_api_replica_leads_and_the_other_takes_over_when_it_is_killed() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let db = rt.block_on(TestDb::postgres()).expect("db");
    let tmp = tempfile::tempdir().expect("tempdir");
    let t = tmp.path();
    let pki = t.join("pki.json");
    let out = Command::new(bcctl_bin())
        .args(["pki", "init", "--trust-domain", "leader.test", "--out"])
        .arg(&pki)
        .env("BC_DEPLOYMENT_SECRET", SECRET)
        .stdin(Stdio::null())
        .output()
        .expect("pki init");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let mut first = Proc::spawn("api 1", api(&pki, db.url()), t.join("api1.log"));
    for task in TASKS {
        first.wait_line(&taken(task), Duration::from_secs(60));
    }
    let mut second = Proc::spawn("api 2", api(&pki, db.url()), t.join("api2.log"));
    second.wait_line("internal endpoint on ", Duration::from_secs(60));
    std::thread::sleep(Duration::from_secs(2));
    let log = second.log_text();
    for task in TASKS {
        assert!(
            !log.contains(&taken(task)),
            "both replicas lead {task}:\n{log}"
        );
        assert_eq!(first.log_text().matches(&taken(task)).count(), 1);
    }

    first.child.kill().expect("SIGKILL");
    let killed = Instant::now();
    let _ = first.child.wait();
    wait_for(
        "the second replica to take every task over",
        Duration::from_secs(30),
        || {
            let log = second.log_text();
            TASKS.iter().all(|task| log.contains(&taken(task)))
        },
        || second.log_text(),
    );
    println!(
        "api replica SIGKILLed: the other took over every task within {} ms (polled every 200 ms)",
        killed.elapsed().as_millis()
    );
    assert!(second.is_running());
    assert!(!second.log_text().contains("leadership lost"));
}
