//! Commands through a real `bcd node` process and a session with a fake gateway: each command
//! is answered with one CommandResult; a command that finished is answered from journal.db
//! after bcd is killed and restarted (its hook ran once); one bcd was killed in the middle of
//! is reported failed ("interrupted: ...") and never run again. Hello carries the approver set
//! the first session took from the bundle.
//!
//! The evil Welcome (issue 40 item 4): a gateway whose Welcome says the time is an hour back, or
//! ten years ahead, changes nothing about which signed commands bcd runs: each command and each
//! batch approval is judged at bcd's own clock and the signed times it has seen.

use crate::command_support::{
    batch, body, content, new_id, new_root, new_root_since, ping, reboot, set_of, signed,
    worker_of, worker_since, Approver,
};
use crate::common::{joined, keyset, TD};
use crate::renewal_support::{fake_gateway_with, CommandScript, OtherAnswers, RenewAnswer};

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bcd::client::certificate_spki_pin;
use bcd::files::identity::read_stored;
use bcd::files::IDENTITY_FILE;
use bcd::signed_commands::journal::INTERRUPTED_DETAIL;
use proto::node_message::Body as NodeBody;
use proto::CommandOutcome as O;
use tokio::sync::mpsc::UnboundedReceiver;
use tonic::Status;

fn start_bcd(cfg: &Path, data: &Path, log: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_bcd"))
        .arg("--config")
        .arg(cfg)
        .arg("--data-dir")
        .arg(data)
        .arg("node")
        .env_remove("BCD_CONFIG")
        .env_remove("BCD_SERVER")
        .env_remove("BCD_DATA_DIR")
        .env_remove("BCD_TPM_TCTI")
        .stdout(Stdio::null())
        .stderr(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
                .unwrap(),
        )
        .spawn()
        .unwrap()
}

/// The next result for `id` (other messages are skipped); panics after 30 s.
async fn result_for(
    seen: &mut UnboundedReceiver<proto::NodeMessage>,
    id: &str,
) -> proto::CommandResult {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let message = tokio::time::timeout_at(deadline, seen.recv())
            .await
            .unwrap_or_else(|_| panic!("no result for {id} within 30 s"))
            .unwrap();
        if let Some(NodeBody::Result(result)) = message.body {
            if result.command_id == id {
                return result;
            }
        }
    }
}

fn script(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn kill(child: &mut Child) {
    child.kill().unwrap();
    child.wait().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_run_once_across_a_killed_and_restarted_bcd() {
    let ks = keyset();
    let tmp = tempfile::tempdir().unwrap();
    let data_path = tmp.path().join("data");
    let (data, _, _) = joined(&data_path, &ks, "node_a");
    let root = new_root();
    let worker = worker_of(&root);
    let mut stored = read_stored(&data).unwrap().unwrap();
    stored.trust_roots = vec![root.cert_der().to_vec()];
    // The bundle offers a quorum (2 of 2) allowing 10 unbatched destructive commands an hour:
    // the first session takes it as the first set and reports it in Hello.
    let approvers = [Approver::generate(), Approver::generate()];
    let set = set_of(&[&approvers[0], &approvers[1]], 2, 10);
    stored.trust_bundle = Some(content(&stored.trust_roots, &set, 1, &[]));
    data.write(IDENTITY_FILE, &stored.to_json()).unwrap();

    let reboot_marker = tmp.path().join("reboot.ran");
    let wipe_marker = tmp.path().join("wipe.ran");
    let reboot_hook = tmp.path().join("reboot.sh");
    let wipe_hook = tmp.path().join("wipe.sh");
    script(
        &reboot_hook,
        &format!(
            "#!/bin/sh\necho \"$BC_COMMAND_ID\" >> {}\necho rebooted\n",
            reboot_marker.display()
        ),
    );
    // The wipe records its pid and hangs: bcd is killed while it runs.
    script(
        &wipe_hook,
        &format!(
            "#!/bin/sh\necho $$ >> {}\nexec sleep 60\n",
            wipe_marker.display()
        ),
    );

    let ping_cmd = signed(
        &worker,
        &body(&new_id(), "node_a", "diag.ping", ping("pong"), None),
        TD,
    );
    let reboot_cmd = signed(
        &worker,
        &body(&new_id(), "node_a", "node.reboot", reboot(), None),
        TD,
    );
    let wipe_body = body(&new_id(), "node_a", "disk.wipe", Vec::new(), None);
    let wipe_cmd = signed(&worker, &wipe_body, TD);
    let commands = Arc::new(Mutex::new(vec![ping_cmd.clone(), reboot_cmd.clone()]));
    let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
    let never: RenewAnswer = Arc::new(|_| Err(Status::unavailable("no renewals here")));
    let other = OtherAnswers {
        script: Some(CommandScript {
            commands: commands.clone(),
            seen: seen_tx,
            welcome_offset_ms: 0,
        }),
        ..Default::default()
    };
    let gw = fake_gateway_with(&ks, never, 0, other).await;
    let pin = certificate_spki_pin(ks.serving_ca.cert_der()).unwrap();
    let cfg = tmp.path().join("config.toml");
    std::fs::write(
        &cfg,
        format!(
            "server = \"{}\"\nserving_ca_spki_pin = \"{pin}\"\n[commands]\nhook_timeout_seconds = 120\n[commands.hooks]\n\"node.reboot\" = \"{}\"\n\"disk.wipe\" = \"{}\"\n",
            gw.server(),
            reboot_hook.display(),
            wipe_hook.display()
        ),
    )
    .unwrap();
    let log = tmp.path().join("bcd.log");

    // First run: the ping and the reboot run.
    let mut child = start_bcd(&cfg, &data_path, &log);
    let hello = tokio::time::timeout(Duration::from_secs(30), seen.recv())
        .await
        .unwrap()
        .unwrap();
    match hello.body {
        Some(NodeBody::Hello(h)) => {
            assert_eq!(h.approver_set_epoch, 1);
            assert_eq!(h.approver_set_sha256, set.digest().as_bytes().to_vec());
        }
        other => panic!("expected Hello first, got {other:?}"),
    }
    let pinged = result_for(&mut seen, &ping_cmd.command_id).await;
    assert_eq!(pinged.outcome, O::Succeeded as i32, "{pinged:?}");
    assert_eq!(pinged.output_tail, b"pong".to_vec());
    let rebooted = result_for(&mut seen, &reboot_cmd.command_id).await;
    assert_eq!(rebooted.outcome, O::Succeeded as i32, "{rebooted:?}");
    assert_eq!(rebooted.output_tail, b"rebooted\n".to_vec());
    assert_eq!(lines(&reboot_marker), vec![reboot_cmd.command_id.clone()]);

    // The wipe starts; bcd is killed while its hook runs (the hook, in its own process group,
    // is ended by the test).
    commands.lock().unwrap().push(wipe_cmd.clone());
    kill(&mut child);
    let mut child = start_bcd(&cfg, &data_path, &log);
    // The redelivered reboot is answered from the journal: the same result, not run again.
    let again = result_for(&mut seen, &reboot_cmd.command_id).await;
    assert_eq!(again, rebooted);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while lines(&wipe_marker).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the wipe hook never started"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    kill(&mut child);
    let hook_pid: i32 = lines(&wipe_marker)[0].parse().unwrap();
    // SAFETY: kill(2) on the hook process this test's bcd started.
    unsafe {
        libc::kill(hook_pid, libc::SIGKILL);
    }

    // Restarted: the wipe bcd was killed in is reported failed and never run again.
    let mut child = start_bcd(&cfg, &data_path, &log);
    let wiped = result_for(&mut seen, &wipe_cmd.command_id).await;
    assert_eq!(wiped.outcome, O::Failed as i32, "{wiped:?}");
    assert_eq!(wiped.detail, INTERRUPTED_DETAIL);
    assert_eq!(
        lines(&wipe_marker).len(),
        1,
        "the interrupted wipe never runs again"
    );
    assert_eq!(lines(&reboot_marker).len(), 1, "the reboot ran once");
    kill(&mut child);
    let mode = std::fs::metadata(data.journal())
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
    // The unbatched runs were counted (the interrupted wipe included: it was admitted).
    let runs = std::fs::read_to_string(data.file("unbatched-destructive.json")).unwrap();
    assert_eq!(runs.matches("cmd_").count(), 2, "{runs}");
}

/// What bcd answered each command of the evil-Welcome script, in order, and the commands whose
/// hook ran.
async fn outcomes_under_a_welcome_off_by(
    offset_ms: i64,
) -> (Vec<(String, i32, i32, String)>, Vec<String>) {
    let ks = keyset();
    let tmp = tempfile::tempdir().unwrap();
    let data_path = tmp.path().join("data");
    let (data, _, _) = joined(&data_path, &ks, "node_a");
    // A root and a worker certificate of three and two hours ago: the worker signed the
    // commands below when they say they were issued.
    let ago = |minutes: i64| time::OffsetDateTime::now_utc() - time::Duration::minutes(minutes);
    let root = new_root_since(ago(180));
    let worker = worker_since(&root, ago(120));
    let mut stored = read_stored(&data).unwrap().unwrap();
    stored.trust_roots = vec![root.cert_der().to_vec()];
    // One approver, threshold 1, no unbatched destructive commands.
    let approver = Approver::generate();
    let set = set_of(&[&approver], 1, 0);
    stored.trust_bundle = Some(content(&stored.trust_roots, &set, 1, &[]));
    data.write(IDENTITY_FILE, &stored.to_json()).unwrap();
    let marker = tmp.path().join("reboot.ran");
    let hook = tmp.path().join("reboot.sh");
    script(
        &hook,
        &format!(
            "#!/bin/sh\necho \"$BC_COMMAND_ID\" >> {}\necho rebooted\n",
            marker.display()
        ),
    );

    let now = crate::command_support::now_ms();
    // A ping signed now, living an hour.
    let fresh = signed(
        &worker,
        &body(&new_id(), "node_a", "diag.ping", ping("fresh"), None),
        TD,
    );
    // A ping that lived from 62 to 10 minutes ago: correctly signed, expired.
    let mut old = body(&new_id(), "node_a", "diag.ping", ping("stale"), None);
    old.issued_at_ms = now - 62 * 60_000;
    old.not_after_ms = now - 10 * 60_000;
    let expired = signed(&worker, &old, TD);
    // A reboot under a live approval (an hour left) and one under an approval that ended ten
    // minutes ago; each command itself signed 58 minutes ago and live for another hour.
    let reboot_in = |batch: &crate::command_support::Batch| {
        let mut b = body(
            &new_id(),
            "node_a",
            "node.reboot",
            reboot(),
            Some(&batch.id),
        );
        b.issued_at_ms = now - 58 * 60_000;
        b.not_after_ms = now + 3_600_000;
        signed(&worker, &b, TD)
    };
    let live_batch = batch(&["node_a"], "live");
    let mut approved = reboot_in(&live_batch);
    approved.batch_approval = Some(live_batch.approval(&[&approver], (now + 3_600_000) * 1000, TD));
    approved.batch_proof = Some(live_batch.proof_for("node_a"));
    let ended_batch = batch(&["node_a"], "ended");
    let mut lapsed = reboot_in(&ended_batch);
    lapsed.batch_approval = Some(ended_batch.approval(&[&approver], (now - 600_000) * 1000, TD));
    lapsed.batch_proof = Some(ended_batch.proof_for("node_a"));
    let script_commands = vec![fresh, expired, approved, lapsed];

    let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
    let never: RenewAnswer = Arc::new(|_| Err(Status::unavailable("no renewals here")));
    let other = OtherAnswers {
        script: Some(CommandScript {
            commands: Arc::new(Mutex::new(script_commands.clone())),
            seen: seen_tx,
            welcome_offset_ms: offset_ms,
        }),
        ..Default::default()
    };
    let gw = fake_gateway_with(&ks, never, 0, other).await;
    let pin = certificate_spki_pin(ks.serving_ca.cert_der()).unwrap();
    let cfg = tmp.path().join("config.toml");
    std::fs::write(
        &cfg,
        format!(
            "server = \"{}\"\nserving_ca_spki_pin = \"{pin}\"\n[commands.hooks]\n\"node.reboot\" = \"{}\"\n",
            gw.server(),
            hook.display()
        ),
    )
    .unwrap();
    let mut child = start_bcd(&cfg, &data_path, &tmp.path().join("bcd.log"));
    let mut outcomes = Vec::new();
    for command in &script_commands {
        let r = result_for(&mut seen, &command.command_id).await;
        outcomes.push((r.command_id, r.outcome, r.reject_reason, r.detail));
    }
    kill(&mut child);
    (outcomes, lines(&marker))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evil_welcome_an_hour_back_or_ten_years_ahead_changes_nothing_bcd_runs() {
    use proto::CommandRejectReason as R;
    const HOUR_MS: i64 = 3_600_000;
    const TEN_YEARS_MS: i64 = 3_652 * 24 * HOUR_MS;
    for offset in [-HOUR_MS, TEN_YEARS_MS] {
        let (got, ran) = outcomes_under_a_welcome_off_by(offset).await;
        let (fresh, expired, approved, lapsed) = (&got[0], &got[1], &got[2], &got[3]);
        // The fresh ping runs.
        assert_eq!(
            fresh.1,
            O::Succeeded as i32,
            "Welcome off by {offset} ms: {got:#?}"
        );
        // The expired one is refused, at bcd's time, whatever the Welcome said.
        assert_eq!(
            (expired.1, expired.2),
            (O::Rejected as i32, R::SignatureInvalid as i32),
            "Welcome off by {offset} ms: {expired:?}"
        );
        assert!(
            expired.3.starts_with("expired: the command ended at ")
                && expired.3.contains(" ms, this node's time is "),
            "{expired:?}"
        );
        // The reboot under a live approval runs; the one whose approval ended is refused.
        assert_eq!(
            approved.1,
            O::Succeeded as i32,
            "Welcome off by {offset} ms: {approved:?}"
        );
        assert_eq!(
            (lapsed.1, lapsed.2),
            (O::Rejected as i32, R::BatchUnapproved as i32),
            "Welcome off by {offset} ms: {lapsed:?}"
        );
        assert!(
            lapsed
                .3
                .starts_with("approval-expired: the batch approval ended at ")
                && lapsed.3.contains(" µs, this node's time is "),
            "{lapsed:?}"
        );
        // The hook ran for the live approval's reboot only.
        assert_eq!(ran, vec![approved.0.clone()]);
    }
}
