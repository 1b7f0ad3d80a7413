//! What a node runs now (decision 0105), through the real binaries on SQLite: a `bcd join`
//! records the boot id of a fake procfs; after a "reboot" (another boot id in it) `bcd node`'s
//! session reports the new one without a re-join, and `bcctl node show --json` shows it with
//! this bcd's version; restarting `bcd node` on the same boot writes nothing, and one more
//! reboot writes exactly one more `node.runtime.reported`.
//!
//! Run: `cargo build -p bcd -p cli` then `cargo test -p cli --test suite node_runtime_e2e::`.

use crate::support::{wait_for, Proc};
use crate::x509pop_e2e::{bcd, node_in, run, start_server, Server};

use std::fs;
use std::path::Path;
use std::time::Duration;

use events::store::testkit::TestDb;
use events::store::LogStore;

const BOOT_A: &str = "0b4f3c2a-6d1e-4f5a-9b8c-7d6e5f4a3b2c";
const BOOT_B: &str = "5d0c9e1a-2b3c-4d5e-8f70-112233445566";
const BOOT_C: &str = "9e8d7c6b-5a49-4382-a716-253443526170";

/// Writes `boot_id` (and a hostname) into the fake procfs at `proc`.
fn boot(proc: &Path, boot_id: &str) {
    let random = proc.join("sys/kernel/random");
    fs::create_dir_all(&random).expect("mkdir");
    fs::write(proc.join("sys/kernel/hostname"), "runtime-e2e\n").expect("write");
    fs::write(random.join("boot_id"), format!("{boot_id}\n")).expect("write");
}

fn shown(server: &Server, node: &str) -> (String, String) {
    let shown = server.bcctl_json(&["node", "show", node, "--json"]);
    let claims = &shown["claims"];
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
    (text(&claims["bcdVersion"]), text(&claims["bootId"]))
}

/// Runs `bcd node` until its session is open, then stops it.
fn one_session(server: &Server, data: &Path, proc: &Path, log: &Path) -> Proc {
    let mut cmd = bcd(server, data, &["node"]);
    cmd.env("BCD_PROCFS_ROOT", proc);
    let node = Proc::spawn("bcd node", cmd, log.to_path_buf());
    wait_for(
        "bcd node's session",
        Duration::from_secs(30),
        || node.log_text().contains("session open as"),
        || node.log_text(),
    );
    node
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reboot_shows_in_node_show_without_a_rejoin_and_a_reconnect_writes_nothing() {
    let db = TestDb::sqlite().expect("sqlite test db");
    let tmp = tempfile::tempdir().expect("tempdir");
    let server = start_server(tmp.path(), db.url(), "1h");
    let proc = tmp.path().join("proc");
    boot(&proc, BOOT_A);
    let data = tmp.path().join("node");
    let mut join = bcd(&server, &data, &["join"]);
    join.env("BCD_JOIN_TOKEN", server.token(&[]))
        .env("BCD_PROCFS_ROOT", &proc);
    let (code, stdout, stderr) = run(join);
    assert_eq!(code, 0, "{stdout}{stderr}\n{}", server.proc.log_text());
    let node = node_in(&stdout, "joined");
    let version = env!("CARGO_PKG_VERSION").to_owned();
    assert_eq!(shown(&server, &node), (version.clone(), BOOT_A.to_owned()));

    // A reboot: the session reports the new boot id, no re-join.
    boot(&proc, BOOT_B);
    let log = tmp.path().join("bcd-node.log");
    let first = one_session(&server, &data, &proc, &log);
    wait_for(
        "node show to show the new boot id",
        Duration::from_secs(20),
        || shown(&server, &node).1 == BOOT_B,
        || format!("{:?}\n{}", shown(&server, &node), first.log_text()),
    );
    assert_eq!(shown(&server, &node).0, version);
    drop(first);

    // Two restarts on the same boot, then one more reboot: the gateway's one worker takes the
    // reports in order, so once C shows, the restarts' reports were taken and wrote nothing.
    for _ in 0..2 {
        drop(one_session(&server, &data, &proc, &log));
    }
    boot(&proc, BOOT_C);
    let last = one_session(&server, &data, &proc, &log);
    wait_for(
        "node show to show the last boot id",
        Duration::from_secs(20),
        || shown(&server, &node).1 == BOOT_C,
        || format!("{:?}\n{}", shown(&server, &node), last.log_text()),
    );
    drop(last);

    let store = db.store().await.expect("store");
    let reported: Vec<String> = store
        .read_stream(&format!("node-runtime/{node}"))
        .await
        .expect("read")
        .iter()
        .map(|e| {
            let r: events::schema::NodeRuntimeReported = e.decode().expect("decode");
            format!("{} {}", r.agent_version, r.boot_id)
        })
        .collect();
    assert_eq!(
        reported,
        vec![format!("{version} {BOOT_B}"), format!("{version} {BOOT_C}")]
    );
    // The text view too.
    let text = String::from_utf8_lossy(&server.bcctl(&["node", "show", &node]).stdout).into_owned();
    assert!(
        text.contains(&format!("boot id         {BOOT_C}")),
        "{text}"
    );
}
