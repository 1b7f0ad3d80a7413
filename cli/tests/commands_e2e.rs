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
pub mod fleet;

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

/// Runs `scenario` on a throwaway Postgres database (the scenarios make their own runtimes for
/// the store calls they make, so they run outside this one).
fn on_postgres(scenario: fn(&str)) {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let db = runtime
        .block_on(TestDb::postgres())
        .expect("postgres test db");
    scenario(db.url());
    runtime.block_on(async move { drop(db) });
}

#[test]
fn a_quorum_batch_runs_on_its_machines_once_and_nothing_else_runs() {
    on_postgres(scenario);
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

fn trust_version(server: &Server) -> serde_json::Value {
    server.bcctl_json(&["pki", "trust-version", "--json"])
}

/// Waits until `pki trust-version --json` satisfies `done`.
fn wait_trust(
    server: &Server,
    what: &str,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let last = std::cell::RefCell::new(serde_json::Value::Null);
    wait_for(
        what,
        Duration::from_secs(60),
        || {
            let v = trust_version(server);
            let ok = done(&v);
            *last.borrow_mut() = v;
            ok
        },
        || {
            format!(
                "last trust-version: {}\nserver log:\n{}",
                last.borrow(),
                server.proc.log_text()
            )
        },
    );
    last.into_inner()
}

/// A batch over `subjects` (node.reboot, any payload) approved with `approvers`; its id.
fn approved_batch(
    server: &Server,
    tmp: &std::path::Path,
    name: &str,
    subjects: &[&str],
    approvers: &[&std::path::Path],
) -> String {
    let leaves = tmp.join(format!("{name}.json"));
    let list: Vec<serde_json::Value> = subjects
        .iter()
        .map(|s| serde_json::json!({"subject": s, "kind": "node.reboot"}))
        .collect();
    fs::write(&leaves, serde_json::Value::Array(list).to_string()).expect("write leaves");
    let batch = server.bcctl_json(&[
        "batch",
        "create",
        "--tenant",
        "default",
        "--idempotency-key",
        name,
        "--reason",
        name,
        "--leaves",
        leaves.to_str().expect("utf-8"),
        "--json",
    ]);
    let id = batch["batchId"].as_str().expect("batchId").to_owned();
    for key in approvers {
        let out = server.bcctl_raw(&[
            "batch",
            "approve",
            "--batch",
            &id,
            "--key",
            key.to_str().expect("utf-8"),
            "--allow-unbound",
            "--yes",
            "--json",
        ]);
        assert!(
            out.status.success(),
            "approve: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    id
}

fn reboot_in(server: &Server, node: &str, batch: &str) -> String {
    run_json(
        server,
        &["--node", node, "--kind", "node.reboot", "--batch", batch],
    )["commandId"]
        .as_str()
        .expect("commandId")
        .to_owned()
}

fn ping(server: &Server, node: &str) -> serde_json::Value {
    let id = run_json(server, &["--node", node, "--kind", "diag.ping"])["commandId"]
        .as_str()
        .expect("commandId")
        .to_owned();
    wait_command(server, &id, &["succeeded", "failed", "rejected"])
}

/// Approver-set changes and a root rotation end to end (issue 21 "Must show"): a node pinned to
/// the operators' real first set refuses the set the control plane first publishes and runs no
/// destructive command until the pinned set arrives; a signed change at epoch 2 is taken by both
/// nodes; an unsigned change a compromised control plane publishes reaches them as a new trust
/// version while they keep the held set; the rotation's add, switch (refused while a connected
/// node is behind) and drop keep commands verifying.
#[test]
fn approver_sets_are_governed_on_the_machine_and_a_root_rotation_keeps_commands_verifying() {
    on_postgres(governance);
}

fn governance(db_url: &str) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let t = tmp.path();
    let keys = approver_keys(t, &["alice", "bob", "carol", "dave"]);
    let (a, b, c, d) = (&keys[0], &keys[1], &keys[2], &keys[3]);
    // S2 = {alice, bob, dave}, 2 of 3, signed for epoch 2 by alice and bob (members of S1).
    let mut s2_sigs = Vec::new();
    let mut s2_digest = String::new();
    for (i, signer) in [a, b].iter().enumerate() {
        let approvers = format!("{},{},{}", a.1.display(), b.1.display(), d.1.display());
        let out = server_less_bcctl(&[
            "batch",
            "sign-approvers",
            "--key",
            signer.0.to_str().expect("utf-8"),
            "--epoch",
            "2",
            "--approvers",
            &approvers,
            "--threshold",
            "2",
            "--trust-domain",
            "bc.local",
            "--json",
        ]);
        let v: serde_json::Value = serde_json::from_slice(&out).expect("sign-approvers --json");
        s2_digest = v["approverSetSha256"].as_str().expect("digest").to_owned();
        let file = t.join(format!("s2-sig-{i}.json"));
        fs::write(&file, &out).expect("write signature");
        s2_sigs.push(file);
    }
    let port = fleet::free_port();
    let s1 = quorum_config(&[a.1.clone(), b.1.clone(), c.1.clone()]);
    let server = fleet::start_server_at(t, db_url, &s1, port, "s1");
    let token = server.new_token(2);
    let mut m1 = Machine::new(t, &server, "m1", None, false);
    let mut m2 = Machine::new(t, &server, "m2", Some(&s2_digest), false);
    for m in [&mut m1, &mut m2] {
        m.join(&token);
        m.start(t);
    }
    // m1 took S1 as its first set; m2, pinned to S2, refused it and holds none.
    let v = wait_trust(&server, "m1 on S1, m2 holding no set", |v| {
        v["connectedDaemons"] == 2 && v["approverSetBehind"] == 1
    });
    assert_eq!(
        v["approverSetSample"],
        serde_json::json!([{"nodeId": m2.node_id, "epoch": 0}]),
        "{v}"
    );
    // doctor names the lag (issue 45 item 7): a warning with the node and the epoch it holds.
    let lag = doctor_finding(&server, &[], "pki.quorum-lag");
    assert_eq!(lag["level"], "warning", "{lag}");
    assert_eq!(
        lag["message"],
        format!(
            "1 of 2 connected node(s) enforce another approver set than the published one \
             (epoch 1): {} at epoch 0",
            m2.node_id
        ),
        "{lag}"
    );
    // m2 runs no destructive command while it waits for its pinned set.
    let batch = approved_batch(&server, t, "b1", &[&m2.node_id], &[&a.0, &b.0]);
    let early = reboot_in(&server, &m2.node_id, &batch);
    let early = wait_command(&server, &early, &["rejected", "succeeded", "failed"]);
    assert_eq!(early["rejectReason"], "BATCH_UNAPPROVED", "{early}");
    assert!(
        early["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("awaiting-pinned-set"),
        "{early}"
    );
    assert!(m2.reboots().is_empty());

    // The operators publish S2 at epoch 2 with alice's and bob's signatures: both nodes take it.
    let s2 = format!(
        "{}set_signatures = [{}]\n",
        quorum_config(&[a.1.clone(), b.1.clone(), d.1.clone()]).replace("epoch = 1", "epoch = 2"),
        s2_sigs
            .iter()
            .map(|p| format!("\"{}\"", p.display()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    // Before the restart, doctor reads S2 from the configuration: signed for epoch 2, so an info
    // naming the next start (issue 45 item 7).
    let s2_file = t.join("serve-s2-pending.toml");
    fs::write(&s2_file, &s2).expect("write the S2 configuration");
    let change = doctor_finding(
        &server,
        &["--config", s2_file.to_str().expect("utf-8")],
        "pki.quorum-change",
    );
    assert_eq!(change["level"], "info", "{change}");
    assert_eq!(
        change["message"],
        "the configured approver set differs from the published one (epoch 1) and is signed \
         for epoch 2: the next bcctl serve start publishes it",
        "{change}"
    );
    drop(server);
    let server = fleet::start_server_at(t, db_url, &s2, port, "s2");
    let v = wait_trust(&server, "both nodes on S2 at epoch 2", |v| {
        v["approverSetEpoch"] == 2 && v["connectedDaemons"] == 2 && v["approverSetBehind"] == 0
    });
    assert_eq!(v["approverSetSha256"], s2_digest.as_str(), "{v}");
    let batch = approved_batch(&server, t, "b2", &[&m2.node_id], &[&a.0, &d.0]);
    let reboot = reboot_in(&server, &m2.node_id, &batch);
    let reboot = wait_command(&server, &reboot, &["succeeded", "failed", "rejected"]);
    assert_eq!(reboot["status"], "succeeded", "{reboot}");
    assert_eq!(m2.reboots().len(), 1);

    // A compromised control plane publishes {dave} at 1 of 1, epoch 3, unsigned: the nodes take
    // the new version (the roots apply) and keep S2, so dave alone releases nothing.
    let unsigned = bypass::publish_unsigned_set(&server, std::slice::from_ref(&d.1), 1, 3);
    let v = wait_trust(
        &server,
        "both nodes at the unsigned bundle's version, still on S2",
        |v| v["version"] == unsigned && v["behind"] == 0 && v["connectedDaemons"] == 2,
    );
    assert_eq!(v["approverSetBehind"], 2, "{v}");
    assert!(m1.log().contains("approver-set-unsigned"), "{}", m1.log());
    let batch = approved_batch(&server, t, "b3", &[&m1.node_id], &[&d.0]);
    let forged = reboot_in(&server, &m1.node_id, &batch);
    let forged = wait_command(&server, &forged, &["rejected", "succeeded", "failed"]);
    assert_eq!(forged["rejectReason"], "BATCH_UNAPPROVED", "{forged}");
    assert!(m1.reboots().is_empty());

    // Root rotation: add (a new version both nodes take), switch refused while a connected node
    // is behind, then done; drop (forced: the 24 h wait); commands verify at every stage.
    let rotate = |stage: &str, force: bool| {
        let mut args = vec!["pki", "rotate-command-root", "--stage", stage, "--json"];
        if force {
            args.push("--force");
        }
        server.bcctl_raw(&args)
    };
    let added = rotate("add", false);
    assert!(
        added.status.success(),
        "add: {}",
        String::from_utf8_lossy(&added.stderr)
    );
    let added_version = trust_version(&server)["version"].as_u64().expect("version");
    assert!(added_version > unsigned);
    wait_trust(&server, "both nodes at the added root's version", |v| {
        v["version"] == added_version && v["behind"] == 0 && v["connectedDaemons"] == 2
    });
    assert_eq!(ping(&server, &m1.node_id)["status"], "succeeded");
    bypass::report_node(&server, "node_behind", 1, true);
    let refused = rotate("switch", false);
    assert!(!refused.status.success());
    let text = String::from_utf8_lossy(&refused.stderr).into_owned()
        + &String::from_utf8_lossy(&refused.stdout);
    assert!(
        text.contains("INVALID_STATE") && text.contains("node_behind"),
        "{text}"
    );
    bypass::report_node(&server, "node_behind", 1, false);
    let switched = rotate("switch", false);
    assert!(
        switched.status.success(),
        "switch: {}",
        String::from_utf8_lossy(&switched.stderr)
    );
    for m in [&m1, &m2] {
        assert_eq!(
            ping(&server, &m.node_id)["status"],
            "succeeded",
            "after switch on {}",
            m.name
        );
    }
    let dropped = rotate("drop", true);
    assert!(
        dropped.status.success(),
        "drop: {}",
        String::from_utf8_lossy(&dropped.stderr)
    );
    let dropped_version = trust_version(&server)["version"].as_u64().expect("version");
    wait_trust(&server, "both nodes at the dropped root's version", |v| {
        v["version"] == dropped_version && v["behind"] == 0 && v["connectedDaemons"] == 2
    });
    for m in [&m1, &m2] {
        assert_eq!(
            ping(&server, &m.node_id)["status"],
            "succeeded",
            "after drop on {}",
            m.name
        );
    }
    assert_eq!(events_of(&server, "trust.command_root.added"), 1);
    assert_eq!(events_of(&server, "trust.command_root.switched"), 1);
    assert_eq!(events_of(&server, "trust.command_root.dropped"), 1);
}

/// The one finding `id` of `bcctl doctor --json` run with `extra` arguments (doctor exits 1 on a
/// warning, so its status is not checked; its JSON must parse).
fn doctor_finding(server: &Server, extra: &[&str], id: &str) -> serde_json::Value {
    let mut args = vec!["doctor", "--json"];
    args.extend_from_slice(extra);
    let out = server.bcctl_raw(&args);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "bcctl doctor --json: {e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let found: Vec<&serde_json::Value> = report["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter(|f| f["id"] == id)
        .collect();
    assert_eq!(found.len(), 1, "one {id} finding: {report}");
    found[0].clone()
}

/// `bcctl args` with no store or deployment: its standard output (it must succeed).
fn server_less_bcctl(args: &[&str]) -> Vec<u8> {
    let out = std::process::Command::new(crate::support::bcctl_bin())
        .args(args)
        .output()
        .expect("run bcctl");
    assert!(
        out.status.success(),
        "bcctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}
