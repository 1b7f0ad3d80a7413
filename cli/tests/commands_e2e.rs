//! Signed commands end to end with the real binaries (issue 21 "Must show"), on Postgres:
//! `bcctl up` publishes a 2-of-3 approver quorum; three machines join and hold sessions; a batch
//! over two of them, approved by two approvers, runs `node.reboot` on both through the hook, each
//! leaf once, and a redelivery after bcd is killed mid-run and restarted does not run it again;
//! the same kind on the third machine is refused `batch`-wise by the queue, and when a
//! compromised control plane sends it anyway the machine refuses it `BATCH_UNAPPROVED`, and an
//! unbatched one `UNBATCHED_LIMIT`, with nothing run; a non-destructive `diag.ping` runs at
//! once. Every step is in the log.
//!
//! Run: `cargo test -p cli --test suite commands_e2e::`.

#[path = "commands_e2e/bypass.rs"]
mod bypass;
#[path = "commands_e2e/fleet.rs"]
mod fleet;

use std::fs;
use std::time::Duration;

use events::store::testkit::TestDb;

use crate::support::wait_for;
use fleet::{approver_keys, start_server, wait_command, Machine, Server};

fn quorum_config(publics: &[std::path::PathBuf]) -> String {
    let keys: Vec<String> = publics
        .iter()
        .map(|p| format!("\"{}\"", p.display()))
        .collect();
    format!(
        "[quorum]\napprover_keys = [{}]\nthreshold = 2\nunbatched_per_hour = 0\nepoch = 1\n",
        keys.join(", ")
    )
}

fn run_json(server: &Server, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["command", "run"];
    all.extend_from_slice(args);
    all.push("--json");
    server.bcctl_json(&all)
}

fn events_of(server: &Server, kind: &str) -> usize {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let store = events::store::EventStore::connect(&server.db_url)
            .await
            .expect("store");
        let mut all = store.read_all(0, 1000);
        let mut count = 0;
        while let Some(batch) = all.next_batch().await.expect("read the log") {
            count += batch.iter().filter(|e| e.event_type == kind).count();
        }
        count
    })
}

#[test]
fn a_quorum_batch_runs_on_its_machines_once_and_nothing_else_runs() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let db = runtime
        .block_on(TestDb::postgres())
        .expect("postgres test db");
    scenario(db.url());
    runtime.block_on(async move { drop(db) });
}

fn scenario(db_url: &str) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let keys = approver_keys(tmp.path(), &["alice", "bob", "carol"]);
    let publics: Vec<_> = keys.iter().map(|(_, p)| p.clone()).collect();
    let server = start_server(tmp.path(), db_url, &quorum_config(&publics));
    let token = server.new_token(3);

    let mut machines: Vec<Machine> = ["m1", "m2", "m3"]
        .iter()
        .map(|name| Machine::new(tmp.path(), &server, name, None, *name == "m1"))
        .collect();
    for m in &mut machines {
        m.join(&token);
        m.start(tmp.path());
    }
    let ids: Vec<String> = machines.iter().map(|m| m.node_id.clone()).collect();

    // With approver keys published and no break-glass allowance, the queue refuses an unbatched
    // destructive command up front.
    let refused = server.bcctl_raw(&[
        "command",
        "run",
        "--node",
        &ids[2],
        "--kind",
        "node.reboot",
        "--json",
    ]);
    assert!(!refused.status.success());
    let text = String::from_utf8_lossy(&refused.stderr).into_owned()
        + &String::from_utf8_lossy(&refused.stdout);
    assert!(text.contains("batch-required"), "{text}");

    // A batch over m1 and m2.
    let leaves = tmp.path().join("leaves.json");
    fs::write(
        &leaves,
        serde_json::json!([
            {"subject": ids[0], "kind": "node.reboot"},
            {"subject": ids[1], "kind": "node.reboot"},
        ])
        .to_string(),
    )
    .expect("write leaves");
    let batch = server.bcctl_json(&[
        "batch",
        "create",
        "--tenant",
        "default",
        "--caller",
        "ops",
        "--idempotency-key",
        "k1",
        "--reason",
        "reboot m1 and m2",
        "--leaves",
        leaves.to_str().expect("utf-8"),
        "--json",
    ]);
    let batch_id = batch["batchId"]
        .as_str()
        .or_else(|| batch["batch_id"].as_str())
        .unwrap_or_else(|| panic!("batch create --json: {batch}"))
        .to_owned();

    let held: Vec<serde_json::Value> = ids[..2]
        .iter()
        .map(|id| {
            run_json(
                &server,
                &["--node", id, "--kind", "node.reboot", "--batch", &batch_id],
            )
        })
        .collect();
    for h in &held {
        assert_eq!(h["held"], serde_json::json!(true), "{h}");
    }
    let held_ids: Vec<String> = held
        .iter()
        .map(|h| h["commandId"].as_str().expect("commandId").to_owned())
        .collect();
    // Outside the scope: refused by the queue.
    let outside = server.bcctl_raw(&[
        "command",
        "run",
        "--node",
        &ids[2],
        "--kind",
        "node.reboot",
        "--batch",
        &batch_id,
        "--json",
    ]);
    assert!(!outside.status.success(), "m3 is not in the batch");

    // Nothing runs before the approvals.
    std::thread::sleep(Duration::from_secs(2));
    assert!(machines[0].reboots().is_empty() && machines[1].reboots().is_empty());

    for (key, _) in &keys[..2] {
        server.bcctl_json(&[
            "batch",
            "approve",
            "--batch",
            &batch_id,
            "--key",
            key.to_str().expect("utf-8"),
            "--allow-unbound",
            "--yes",
            "--json",
        ]);
    }

    // m1's hook sleeps after writing its marker: kill bcd while it runs, then restart it. The
    // journal knows the command started; the redelivery does not run it again.
    wait_for(
        "m1's hook to start",
        Duration::from_secs(60),
        || !machines[0].reboots().is_empty(),
        || machines[0].log(),
    );
    machines[0].kill();
    std::thread::sleep(Duration::from_secs(6));
    machines[0].start(tmp.path());

    let m2 = wait_command(&server, &held_ids[1], &["succeeded", "failed"]);
    assert_eq!(m2["status"], "succeeded", "{m2}");
    assert_eq!(m2["exitCode"], 0, "{m2}");
    assert!(
        m2["outputTail"]
            .as_str()
            .unwrap_or_default()
            .contains(&format!("rebooting {}", ids[1])),
        "{m2}"
    );
    let m1 = wait_command(&server, &held_ids[0], &["succeeded", "failed"]);
    assert_eq!(m1["status"], "failed", "{m1}");
    assert!(
        m1["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("interrupted"),
        "{m1}"
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        machines[0].reboots(),
        [format!("{} {}", held_ids[0], ids[0])]
    );
    assert_eq!(
        machines[1].reboots(),
        [format!("{} {}", held_ids[1], ids[1])]
    );

    // A compromised control plane sends m3 the destructive kind inside the batch it is not in,
    // and again without a batch: the machine refuses both and runs nothing.
    let mut raw = [0u8; 32];
    hex::decode_to_slice(&batch_id, &mut raw).expect("batch id hex");
    let forged_batched =
        bypass::enqueue_bypassing_checks(&server, &ids[2], "node.reboot", Some(raw));
    let forged_unbatched = bypass::enqueue_bypassing_checks(&server, &ids[2], "node.reboot", None);
    let a = wait_command(
        &server,
        &forged_batched,
        &["rejected", "succeeded", "failed"],
    );
    assert_eq!(
        (a["status"].as_str(), a["rejectReason"].as_str()),
        (Some("rejected"), Some("BATCH_UNAPPROVED")),
        "{a}"
    );
    let b = wait_command(
        &server,
        &forged_unbatched,
        &["rejected", "succeeded", "failed"],
    );
    assert_eq!(
        (b["status"].as_str(), b["rejectReason"].as_str()),
        (Some("rejected"), Some("UNBATCHED_LIMIT")),
        "{b}"
    );
    assert!(machines[2].reboots().is_empty());

    // A non-destructive kind needs no batch and runs at once.
    let ping_payload = tmp.path().join("ping.json");
    fs::write(&ping_payload, r#"{"echo": "hello from ops"}"#).expect("write payload");
    let ping = run_json(
        &server,
        &[
            "--node",
            &ids[2],
            "--kind",
            "diag.ping",
            "--payload-file",
            ping_payload.to_str().expect("utf-8"),
        ],
    );
    assert_eq!(ping["held"], serde_json::json!(false));
    let ping = wait_command(
        &server,
        ping["commandId"].as_str().expect("id"),
        &["succeeded", "failed", "rejected"],
    );
    assert_eq!(ping["status"], "succeeded", "{ping}");
    assert!(
        ping["outputTail"]
            .as_str()
            .unwrap_or_default()
            .contains("hello from ops"),
        "{ping}"
    );

    // Every step is an event.
    assert_eq!(events_of(&server, "command.enqueued"), 5);
    assert_eq!(events_of(&server, "command.rejected"), 2);
    assert!(events_of(&server, "command.dispatched") >= 5);
    assert_eq!(events_of(&server, "command.result.recorded"), 3);
    assert!(events_of(&server, "command.worker.certified") >= 2);
}
