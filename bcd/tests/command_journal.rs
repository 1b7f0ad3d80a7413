//! journal.db makes a command run at most once across redeliveries and restarts; built-ins and
//! hooks answer with their output, exit code, failure or timeout. It also keeps the highest
//! signed time the node has seen, so a restart on a clock set back does not revive an expired
//! command (issue 40 item 4).

use crate::command_support::*;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use bcd::signed_commands::journal::{Journal, JournalError, INTERRUPTED_DETAIL};
use bcd::signed_commands::CommandRunner;
use domain::command::payloads::LogsCollect;
use prost::Message as _;
use proto::CommandOutcome as O;

fn no_quorum() -> Machine {
    Machine::new(&domain::quorum::ApproverSet::none(), 0)
}

fn reboot_cmd(m: &Machine) -> proto::Command {
    signed(
        &m.worker,
        &body(&new_id(), NODE, "node.reboot", reboot(), None),
        TD,
    )
}

#[test]
fn a_ping_echoes_and_its_redelivery_is_answered_from_the_journal() {
    let m = no_quorum();
    let c = signed(
        &m.worker,
        &body(&new_id(), NODE, "diag.ping", ping("hello"), None),
        TD,
    );
    let mut runner = m.runner();
    let first = runner.handle(&c, now_ms());
    assert_eq!(first.outcome, O::Succeeded as i32, "{first:?}");
    assert_eq!(first.output_tail, b"hello".to_vec());
    assert!(!first.has_exit_code);
    assert_eq!(runner.handle(&c, now_ms()), first);
    assert_eq!(runner.journal().counts().unwrap(), (0, 1));
    let mode = std::fs::metadata(m.data.journal())
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
}

#[test]
fn a_finished_command_is_not_run_again_after_a_restart() {
    let m = no_quorum();
    let c = reboot_cmd(&m);
    let first = m.runner().handle(&c, now_ms());
    assert_eq!(first.outcome, O::Succeeded as i32, "{first:?}");
    // A new process: the journal is swept (nothing was left started) and the redelivery is
    // answered with the stored result.
    let (mut runner, swept) = CommandRunner::open_at_start(m.context()).unwrap();
    assert!(swept.is_empty());
    assert_eq!(runner.handle(&c, now_ms()), first);
    assert_eq!(m.ran(), vec![c.command_id.clone()]);
}

#[test]
fn a_command_left_started_is_reported_failed_and_never_run() {
    let m = no_quorum();
    let c = reboot_cmd(&m);
    // bcd stopped after recording the command started, before its result.
    Journal::open(&m.data.journal(), NODE)
        .unwrap()
        .start(&c.command_id, "node.reboot", now_ms())
        .unwrap();
    let (mut runner, swept) = CommandRunner::open_at_start(m.context()).unwrap();
    assert_eq!(swept.len(), 1);
    assert_eq!(swept[0].command_id, c.command_id);
    assert_eq!(swept[0].outcome, O::Failed as i32);
    assert_eq!(swept[0].detail, INTERRUPTED_DETAIL);
    let again = runner.handle(&c, now_ms());
    assert_eq!(again, swept[0]);
    assert!(
        m.ran().is_empty(),
        "an interrupted command never runs again"
    );
    assert_eq!(runner.journal().counts().unwrap(), (0, 1));
}

#[test]
fn a_journal_of_another_node_is_refused() {
    let m = no_quorum();
    Journal::open(&m.data.journal(), "node_other").unwrap();
    match Journal::open(&m.data.journal(), NODE) {
        Err(JournalError::OtherNode {
            found, expected, ..
        }) => {
            assert_eq!(found, "node_other");
            assert_eq!(expected, NODE);
        }
        other => panic!("expected OtherNode, got {other:?}"),
    }
    assert!(CommandRunner::open(m.context()).is_err());
}

fn with_hook(m: &mut Machine, script: &str) {
    std::fs::write(&m.hook, script).unwrap();
    std::fs::set_permissions(&m.hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    m.settings.hook_timeout = Duration::from_secs(1);
}

#[test]
fn a_hook_gets_its_environment_and_payload_and_reports_its_exit_code() {
    let mut m = no_quorum();
    let out = m.tmp.path().join("seen");
    with_hook(
        &mut m,
        &format!(
            "#!/bin/sh\nprintf '%s|%s|%s|%s|%s' \"$BC_COMMAND_ID\" \"$BC_COMMAND_KIND\" \"$BC_NODE_ID\" \"$BC_BATCH_ID\" \"$BC_PAYLOAD_JSON\" > {o}\ncat > {o}.stdin\necho to-stderr >&2\nexit 3\n",
            o = out.display()
        ),
    );
    let c = reboot_cmd(&m);
    let result = m.runner().handle(&c, now_ms());
    assert_eq!(result.outcome, O::Failed as i32, "{result:?}");
    assert!(result.has_exit_code);
    assert_eq!(result.exit_code, 3);
    assert_eq!(result.detail, "the hook exited with status 3");
    assert_eq!(result.output_tail, b"to-stderr\n".to_vec());
    let seen = std::fs::read_to_string(&out).unwrap();
    assert_eq!(
        seen,
        format!(
            "{}|node.reboot|{NODE}||{}",
            c.command_id, r#"{"delay_seconds":0,"reason":"test"}"#
        )
    );
    assert_eq!(
        std::fs::read(format!("{}.stdin", out.display())).unwrap(),
        reboot()
    );
}

#[test]
fn a_hook_past_its_timeout_is_killed_and_fails() {
    let mut m = no_quorum();
    with_hook(&mut m, "#!/bin/sh\necho started\nsleep 30\n");
    let started = std::time::Instant::now();
    let result = m.runner().handle(&reboot_cmd(&m), now_ms());
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(result.outcome, O::Failed as i32, "{result:?}");
    assert_eq!(result.detail, "timed out after 1 s");
    assert_eq!(result.output_tail, b"started\n".to_vec());
}

#[test]
fn a_hook_output_is_cut_to_its_last_4_kib() {
    let mut m = no_quorum();
    with_hook(
        &mut m,
        "#!/bin/sh\nhead -c 10000 /dev/zero | tr '\\0' a\nprintf END\n",
    );
    let result = m.runner().handle(&reboot_cmd(&m), now_ms());
    assert_eq!(result.outcome, O::Succeeded as i32, "{result:?}");
    assert_eq!(result.output_tail.len(), 4096);
    assert!(result.output_tail.ends_with(b"aaaEND"));
}

#[test]
fn logs_collect_tails_bcds_log_file_and_a_missing_one_fails() {
    let mut m = no_quorum();
    let log = m.tmp.path().join("bcd.log");
    std::fs::write(&log, "one\ntwo\nthree\n").unwrap();
    m.settings.log_file = Some(log.clone());
    let payload = LogsCollect {
        unit: String::new(),
        lines: 2,
    }
    .encode_to_vec();
    let c = signed(
        &m.worker,
        &body(&new_id(), NODE, "logs.collect", payload.clone(), None),
        TD,
    );
    let result = m.runner().handle(&c, now_ms());
    assert_eq!(result.outcome, O::Succeeded as i32, "{result:?}");
    assert_eq!(result.output_tail, b"two\nthree\n".to_vec());
    std::fs::remove_file(&log).unwrap();
    let c = signed(
        &m.worker,
        &body(&new_id(), NODE, "logs.collect", payload, None),
        TD,
    );
    let result = m.runner().handle(&c, now_ms());
    assert_eq!(result.outcome, O::Failed as i32, "{result:?}");
    assert!(
        result
            .detail
            .starts_with("logs.collect: cannot read bcd's log"),
        "{}",
        result.detail
    );
}

#[test]
fn inventory_refresh_answers_with_the_hardware_claims_as_json() {
    let m = no_quorum();
    let c = signed(
        &m.worker,
        &body(&new_id(), NODE, "inventory.refresh", Vec::new(), None),
        TD,
    );
    let result = m.runner().handle(&c, now_ms());
    assert_eq!(result.outcome, O::Succeeded as i32, "{result:?}");
    let json: serde_json::Value = serde_json::from_slice(&result.output_tail).unwrap();
    assert!(json["macs"].is_array(), "{json}");
}

#[test]
fn a_corrupt_journal_is_moved_aside_and_started_over_with_a_new_id() {
    let m = no_quorum();
    let first_id = Journal::open(&m.data.journal(), NODE)
        .unwrap()
        .journal_id()
        .unwrap();
    assert_eq!(first_id.len(), 32, "{first_id}");
    std::fs::write(
        m.data.journal(),
        b"this is not a SQLite database at all, not even close",
    )
    .unwrap();
    assert!(Journal::open(&m.data.journal(), NODE).is_err());
    let (journal, restarted) = Journal::open_or_restart(&m.data.journal(), NODE, 1234).unwrap();
    let restarted = restarted.expect("started over");
    assert_eq!(
        restarted.moved_to,
        std::path::PathBuf::from(format!("{}.corrupt-1234", m.data.journal().display()))
    );
    assert_eq!(
        std::fs::read(&restarted.moved_to).unwrap(),
        b"this is not a SQLite database at all, not even close".to_vec()
    );
    assert_ne!(journal.journal_id().unwrap(), first_id);
    assert_eq!(journal.counts().unwrap(), (0, 0));
}

#[test]
fn a_process_the_hook_left_holding_its_output_does_not_hold_the_result() {
    let mut m = no_quorum();
    // A process in a session of its own escapes the hook's group and keeps the pipe open
    // (it ends by itself after 20 s).
    with_hook(&mut m, "#!/bin/sh\nsetsid sleep 20 &\necho done\n");
    let started = std::time::Instant::now();
    let result = m.runner().handle(&reboot_cmd(&m), now_ms());
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(result.outcome, O::Succeeded as i32, "{result:?}");
    assert_eq!(result.output_tail, b"done\n".to_vec());
}

/// A ping of `worker` issued `issued_ago_min` minutes ago, ending `ends_ago_min` minutes ago
/// (negative: in the future).
fn ping_between(worker: &Worker, issued_ago_min: i64, ends_ago_min: i64) -> proto::Command {
    let mut b = body(&new_id(), NODE, "diag.ping", ping("t"), None);
    b.issued_at_ms = now_ms() - issued_ago_min * 60_000;
    b.not_after_ms = now_ms() - ends_ago_min * 60_000;
    signed(worker, &b, TD)
}

fn assert_expired(result: &proto::CommandResult) {
    assert_eq!(
        (result.outcome, result.reject_reason),
        (
            O::Rejected as i32,
            proto::CommandRejectReason::SignatureInvalid as i32
        ),
        "{result:?}"
    );
    assert!(
        result.detail.starts_with("expired: the command ended at ")
            && result.detail.contains(" ms, this node's time is "),
        "{result:?}"
    );
}

#[test]
fn a_verified_commands_issue_time_survives_a_restart_on_a_clock_set_back() {
    let m = no_quorum();
    let worker = worker_since(&m.root, now() - time::Duration::minutes(40));
    // A command issued now runs, and its issue time becomes the journal's signed-time mark.
    let fresh = ping_between(&worker, 0, -60);
    let issued = domain::command::CommandBody::decode(fresh.body.as_slice())
        .unwrap()
        .issued_at_ms;
    let ran = m.runner().handle(&fresh, now_ms());
    assert_eq!(ran.outcome, O::Succeeded as i32, "{ran:?}");
    assert_eq!(
        Journal::open(&m.data.journal(), NODE)
            .unwrap()
            .signed_time_ms()
            .unwrap(),
        Some(issued)
    );
    // bcd restarts on a machine whose clock went two hours back: a command that ended ten
    // minutes ago is still expired (its own clock alone would have run it).
    let (mut runner, _) = CommandRunner::open_at_start(m.context()).unwrap();
    let stale = ping_between(&worker, 30, 10);
    assert_expired(&runner.handle(&stale, now_ms() - 2 * 3_600_000));
}

#[test]
fn the_signed_server_time_of_identity_json_holds_the_time_up() {
    let m = no_quorum();
    let worker = worker_since(&m.root, now() - time::Duration::minutes(40));
    // The last renewal answer's signed server time, as identity.json keeps it.
    let mut stored = m.stored();
    stored.observe_server_time(now());
    m.data
        .write(bcd::files::IDENTITY_FILE, &stored.to_json())
        .unwrap();
    let stale = ping_between(&worker, 30, 10);
    assert_expired(&m.runner().handle(&stale, now_ms() - 2 * 3_600_000));
}

#[test]
fn a_command_issued_ahead_of_a_slow_clock_says_the_clock_may_be_behind() {
    let m = no_quorum();
    let c = signed(
        &m.worker,
        &body(&new_id(), NODE, "diag.ping", ping("x"), None),
        TD,
    );
    // This machine's clock is ten minutes slow and it has seen no signed time yet.
    let r = m.runner().handle(&c, now_ms() - 10 * 60_000);
    assert_eq!(
        r.reject_reason,
        proto::CommandRejectReason::SignatureInvalid as i32
    );
    assert!(
        r.detail
            .starts_with("not-yet-valid: the command was issued at ")
            && r.detail.ends_with(
                "; this machine's clock may be behind: bcd doctor compares it with the server's"
            ),
        "{r:?}"
    );
}
