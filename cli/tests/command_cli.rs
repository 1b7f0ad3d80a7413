//! `bcctl command run | list | show` through the real binary: each refusal the CLI makes before
//! the queue is asked (exit 2 for INVALID_INPUT), the sealed bundle without its secret, and the
//! reads of an empty queue. The queue's own decisions (batch-required, scope, held commands) are
//! `commands::command_queue`'s and tested there; the end to end is `commands_e2e*`.

use std::path::Path;
use std::process::Output;

use events::store::testkit::TestDb;
use serde_json::Value;

use crate::support::bcctl_at;

fn refused(out: &Output, code: i32, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{err}");
    assert!(err.starts_with("bcctl: "), "{err}");
    assert!(err.contains(needle), "{err:?} lacks {needle:?}");
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    std::fs::write(dir.join(name), text).expect("write");
    name.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_refuses_bad_input_before_the_queue() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let db = TestDb::sqlite().expect("sqlite");
    let url = db.url();
    let run = |more: &[&str]| {
        let mut args = vec!["command", "run", "--node", "node-1"];
        args.extend_from_slice(more);
        bcctl_at(d, url, &args)
    };
    refused(
        &run(&["--kind", "node.rebooot"]),
        2,
        "INVALID_INPUT: --kind \"node.rebooot\" is not a known command kind (boot.kexec, deploy.image, diag.ping, disk.wipe, inventory.refresh, logs.collect, node.reboot)",
    );
    let unknown = write(d, "unknown.json", r#"{"reason": "kernel", "delay": 5}"#);
    refused(
        &run(&["--kind", "node.reboot", "--payload-file", &unknown]),
        2,
        "INVALID_INPUT: --payload-file unknown.json: not a bc.command.v1.NodeReboot message: the payload does not decode as bc.command.v1.NodeReboot: unknown field `delay`",
    );
    let not_json = write(d, "bad.json", "reason = kernel");
    refused(
        &run(&["--kind", "node.reboot", "--payload-file", &not_json]),
        2,
        "INVALID_INPUT: --payload-file bad.json: not JSON",
    );
    let bad_hex = write(d, "hex.json", r#"{"image_sha256": "zz"}"#);
    refused(
        &run(&["--kind", "deploy.image", "--payload-file", &bad_hex]),
        2,
        "not hex",
    );
    refused(
        &run(&["--kind", "node.reboot", "--batch", "abc"]),
        2,
        "INVALID_INPUT: --batch:",
    );
    refused(
        &run(&["--kind", "diag.ping", "--payload-file", "missing.json"]),
        2,
        "INVALID_INPUT: --payload-file missing.json:",
    );
    // A sealed bundle without its secret: the signing root cannot be unsealed.
    let secret = "a-deployment-secret-of-more-than-32-characters";
    let init = std::process::Command::new(crate::support::bcctl_bin())
        .current_dir(d)
        .env("BC_DEPLOYMENT_SECRET", secret)
        .args([
            "pki",
            "init",
            "--trust-domain",
            "cmd.example.com",
            "--out",
            "pki.json",
        ])
        .output()
        .expect("pki init");
    assert!(
        init.status.success(),
        "{}",
        String::from_utf8_lossy(&init.stderr)
    );
    refused(
        &run(&["--kind", "diag.ping", "--pki", "pki.json"]),
        1,
        "its private keys are sealed: set BC_DEPLOYMENT_SECRET",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_and_show_refuse_bad_filters() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let db = TestDb::sqlite().expect("sqlite");
    let url = db.url();
    refused(
        &bcctl_at(d, url, &["command", "list", "--status", "done"]),
        2,
        "INVALID_INPUT: --status \"done\" is not one of held, queued, dispatched, succeeded, failed, rejected, cancelled",
    );
    refused(
        &bcctl_at(d, url, &["command", "list", "--limit", "0"]),
        2,
        "INVALID_INPUT: --limit 0 is outside 1 to 10000",
    );
    refused(
        &bcctl_at(d, url, &["command", "list", "--batch", "xyz"]),
        2,
        "INVALID_INPUT: --batch:",
    );
    refused(
        &bcctl_at(d, url, &["command", "show", "cmd_XYZ"]),
        2,
        "INVALID_INPUT: \"cmd_XYZ\" is not a command id (cmd_ and 32 lower-case hex characters)",
    );
}

/// An empty queue: `list` prints an empty array, `show` of an unknown id is NOT_FOUND.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_queue_lists_nothing_and_shows_not_found() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let db = TestDb::sqlite().expect("sqlite");
    db.store().await.expect("migrate");
    let url = db.url();
    let out = bcctl_at(d, url, &["command", "list", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(listed, Value::Array(vec![]));
    refused(
        &bcctl_at(
            d,
            url,
            &["command", "show", "cmd_0123456789abcdef0123456789abcdef"],
        ),
        1,
        "NOT_FOUND: command cmd_0123456789abcdef0123456789abcdef not found",
    );
}
