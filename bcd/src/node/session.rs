//! One session with the gateway ([`hold_session`]): `Hello` with the trust version held, a
//! `StatusReport` every interval, each `Welcome`'s signed trust bundle kept (its unsigned
//! server time only reported: logged, and a warning when the machine's clock is off by more
//! than renewals allow), until the renewal is due, a revocation, or the session's end.
//!
//! Hello and every StatusReport carry the held approver set's epoch and SHA-256
//! ([`crate::trust::approver_set::reported`]). After a stored bundle (and at the session's start)
//! the bundle's approver set is settled under the one epoch rule. Each `GatewayMessage.command`
//! goes to the command runner's thread ([`crate::signed_commands::spawn_runner`]), which judges
//! it at the node's trusted time ([`crate::clock::TrustedClock`]), never at a Welcome's; its
//! `CommandResult` comes back on the session's stream, so the select loop keeps its status
//! reports and revocation handling while a command runs. Each Welcome mirrors the runner's
//! signed-time mark into `identity.json` (`serverTime`), so a lost journal does not reset it.
//!
//! Each `GatewayMessage.revocation_list` is checked against the node CA and written to
//! `crl.pem` ([`crate::files::crl`]), `on_renew` after it.
//!
//! The session runs over the gateway's own framing (ALPN `bc-session/1`), or over gRPC with a
//! gateway that does not speak it ([`crate::client::connect_session`]); this loop is the same
//! for both.

use std::time::Duration as StdDuration;

use domain::pki::PublicKey;
use time::OffsetDateTime;

use super::log::{log, rfc3339};
use crate::client::{
    describe_status, is_revoked_alert, pushback_of, ClientIdentity, SessionClient, SessionWire,
};
use crate::clock::SignedTimeMark;
use crate::files::crl::take_pushed;
use crate::files::identity::{read_stored, LoadedIdentity};
use crate::files::pem_files::FileSettings;
use crate::files::{DataDir, IDENTITY_FILE};
use crate::renewal::schedule::Pushback;
use crate::signed_commands::{spawn_runner, CommandContext, Job};
use crate::trust::approver_set::{describe, reported, settle_held_set};
use crate::trust::bundle::{apply_welcome_trust, TrustUpdate};
use proto::gateway_message::Body as GatewayBody;
use proto::node_message::Body as NodeBody;

/// How long the gateway may take to answer `Hello` with `Welcome`.
pub const WELCOME_TIMEOUT: StdDuration = StdDuration::from_secs(30);

/// A time in Unix milliseconds (saturating), as the wire carries it.
pub fn now_ms(now: OffsetDateTime) -> i64 {
    i64::try_from(now.unix_timestamp_nanos() / 1_000_000).unwrap_or(i64::MAX)
}

/// The certificate chain and key a renewal or a session presents.
pub(super) fn client_identity(loaded: &LoadedIdentity) -> ClientIdentity {
    ClientIdentity::new(&loaded.stored.chain, &loaded.key)
}

/// How a RevocationNotice ends the session holding the certificate `own` (hex): revoked when
/// it names that certificate (or names none, as no gateway sends), lost when it names another
/// of the node's certificates, so a valid certificate is never recorded as revoked; the next
/// handshake refuses it if it is revoked too.
fn revocation_end(notice: proto::RevocationNotice, own: &str) -> SessionEnd {
    if notice.serial.is_empty() || notice.serial.eq_ignore_ascii_case(own) {
        return SessionEnd::Revoked {
            reason: notice.reason,
            serial: notice.serial,
        };
    }
    SessionEnd::Lost(format!(
        "the gateway announced the revocation of another certificate of this node (serial {}: \
         {}), not this one ({own}); reconnecting, and the handshake will refuse this \
         certificate if it is revoked too",
        notice.serial, notice.reason
    ))
}

/// How one session ended.
#[derive(Debug)]
pub enum SessionEnd {
    /// The gateway revoked this certificate.
    Revoked {
        /// Its reason.
        reason: String,
        /// The serial.
        serial: String,
    },
    /// The renewal is due: the session was closed to renew.
    Due,
    /// The session ended or could not start.
    Lost(String),
    /// The gateway ended or refused the session and said how long to wait before reconnecting
    /// (`grpc-retry-pushback-ms`: its revocation feed stopped or is behind, or the session was
    /// cut off); `bcd node` waits at least that long.
    PushedBack {
        /// Why, as the gateway said.
        why: String,
        /// The wait it asked for.
        wait: StdDuration,
    },
}

/// How a session ended with the gateway's `status`: lost, and pushed back when the gateway gave
/// a retry hint (a hint not to retry at all is ignored: a node always reconnects).
pub fn lost(status: &tonic::Status) -> SessionEnd {
    let why = describe_status(status);
    match pushback_of(status) {
        Some(Pushback::After(wait)) => SessionEnd::PushedBack {
            why,
            wait: wait.try_into().unwrap_or(StdDuration::ZERO),
        },
        _ => SessionEnd::Lost(why),
    }
}

/// A gateway time in Unix milliseconds, `None` when out of range.
pub fn time_of_ms(ms: i64) -> Option<OffsetDateTime> {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).ok()
}

/// How far the machine's clock may be from a Welcome's server time before the session warns:
/// the window renewals and x509pop re-joins are judged in (spec 003: ±60 s).
pub const CLOCK_WINDOW: time::Duration = time::Duration::seconds(60);

/// The warning for a clock `skew` off a Welcome's server time (local minus server), if it is
/// past [`CLOCK_WINDOW`]. The Welcome's time is not signed: it is reported, never used.
pub fn skew_warning(skew: time::Duration) -> Option<String> {
    if skew.abs() <= CLOCK_WINDOW {
        return None;
    }
    Some(format!(
        "this machine's clock is {:.1} s {} the gateway's (its Welcome's time): renewals and \
         x509pop re-joins are refused past {} s; fix the clock (timedatectl status; chrony or \
         systemd-timesyncd)",
        skew.abs().as_seconds_f64(),
        if skew.is_negative() {
            "behind"
        } else {
            "ahead of"
        },
        CLOCK_WINDOW.whole_seconds()
    ))
}

/// Mirrors the runner's signed-time mark into `identity.json`'s `serverTime` when it is higher.
fn mirror_signed_time(dir: &DataDir, mark: &SignedTimeMark) {
    let Some(seen) = mark.get().and_then(time_of_ms) else {
        return;
    };
    let mut stored = match read_stored(dir) {
        Ok(Some(stored)) => stored,
        Ok(None) => return,
        Err(e) => {
            log(format_args!("mirroring the signed time: {e}"));
            return;
        }
    };
    if stored.server_time().is_some_and(|held| held >= seen) {
        return;
    }
    stored.observe_server_time(seen);
    if let Err(e) = dir.write(IDENTITY_FILE, &stored.to_json()) {
        log(format_args!(
            "mirroring the signed time into identity.json: {e}"
        ));
    }
}

/// Settles the stored bundle's approver set (logging a taken or refused set).
pub fn settle_stored_set(dir: &DataDir, pin: Option<&domain::quorum::SetDigest>) {
    match read_stored(dir) {
        Ok(Some(stored)) => match settle_held_set(dir, &stored, pin) {
            Ok(outcome) => {
                if let Some(line) = describe(&outcome) {
                    log(line);
                }
            }
            Err(e) => log(format_args!("{e}")),
        },
        Ok(None) => {}
        Err(e) => log(format_args!("settling the approver set: {e}")),
    }
}

fn status_report(dir: &DataDir, trust_version: u64) -> proto::NodeMessage {
    let (approver_set_epoch, approver_set_sha256) = reported(dir);
    proto::NodeMessage {
        body: Some(NodeBody::Status(proto::StatusReport {
            client_time_ms: crate::clock::now_ms(),
            trust_version,
            approver_set_epoch,
            approver_set_sha256,
        })),
    }
}

/// What a session keeps and how often it reports.
#[derive(Clone, Copy)]
pub struct Held<'a> {
    /// How often a StatusReport goes out.
    pub status_interval: StdDuration,
    /// The JoinService signing key a Welcome's trust bundle is verified with.
    pub signing_key: Option<&'a PublicKey>,
    /// `[files]`: where a pushed revocation list goes, and `on_renew`.
    pub files: &'a FileSettings,
}

/// The session's first message: what this node holds and runs now.
fn hello(dir: &DataDir, trust_version: u64) -> proto::NodeMessage {
    let (approver_set_epoch, approver_set_sha256) = reported(dir);
    proto::NodeMessage {
        body: Some(NodeBody::Hello(proto::Hello {
            trust_version,
            agent_version: env!("CARGO_PKG_VERSION").to_owned(),
            approver_set_epoch,
            approver_set_sha256,
            revocation_list: true,
            boot_id: crate::join::hardware::current_boot_id(),
        })),
    }
}

/// The `session open` line of the first Welcome, and a clock-skew warning when the gateway's
/// (unsigned, reported only) time is far from ours.
fn log_session_open(loaded: &LoadedIdentity, wire: &str, w: &proto::Welcome) {
    let server_time = time_of_ms(w.server_time_ms);
    log(format_args!(
        "session open as {} over {} (certificate serial {}, valid until {}; server time {}, \
         trust version {})",
        loaded.describe(),
        wire,
        loaded.leaf.serial.to_hex(),
        rfc3339(loaded.leaf.not_after),
        server_time
            .map(rfc3339)
            .unwrap_or_else(|| "unknown".to_owned()),
        w.trust_version,
    ));
    if let Some(line) = server_time.and_then(|t| skew_warning(crate::clock::now() - t)) {
        log(line);
    }
}

/// A Welcome's trust bundle checked under the join signing `key` and stored when newer:
/// `trust_version` follows it and the held approver set is settled again. True when a new
/// version was stored (the gateway is then told with a status report).
fn take_welcome_trust(
    dir: &DataDir,
    key: &PublicKey,
    w: &proto::Welcome,
    trust_version: &mut u64,
    pin: Option<&domain::quorum::SetDigest>,
) -> bool {
    match apply_welcome_trust(dir, key, w) {
        Ok(TrustUpdate::Stored { previous, version }) => {
            log(format_args!(
                "trust bundle version {version} verified and stored (held {previous})"
            ));
            *trust_version = version;
            settle_stored_set(dir, pin);
            true
        }
        Ok(_) => false,
        Err(e) => {
            log(format_args!("{e}; keeping trust version {trust_version}"));
            false
        }
    }
}

/// A command from the gateway handed to the runner (`jobs`), or refused `NODE_STATE` at once
/// when this bcd runs none: the answer to send now, if any. A runner that stopped ends the
/// session.
fn hand_over(
    jobs: Option<&tokio::sync::mpsc::UnboundedSender<Job>>,
    command: proto::Command,
) -> Result<Option<proto::NodeMessage>, SessionEnd> {
    let Some(jobs) = jobs else {
        return Ok(Some(proto::NodeMessage {
            body: Some(NodeBody::Result(proto::CommandResult {
                command_id: command.command_id.clone(),
                outcome: proto::CommandOutcome::Rejected as i32,
                reject_reason: proto::CommandRejectReason::NodeState as i32,
                detail: "commands-disabled: this bcd runs no commands".to_owned(),
                ..Default::default()
            })),
        }));
    };
    let id = command.command_id.clone();
    jobs.send(Job { command }).map(|()| None).map_err(|_| {
        log(format_args!(
            "the command runner stopped; command {id} not run"
        ));
        SessionEnd::Lost("the command runner stopped".to_owned())
    })
}

/// Holds one session on `client` ([`crate::client::connect_session`]) until `until`, a
/// revocation, or its end. `commands`: how commands run (`None`: every command is rejected
/// `NODE_STATE`). `welcomed_at` is set when the first `Welcome` comes: how long the session
/// lasted after it decides whether the reconnect backoff starts over
/// ([`crate::node::Backoff::session_ended`]).
pub async fn hold_session(
    client: SessionClient,
    dir: &DataDir,
    loaded: &LoadedIdentity,
    until: OffsetDateTime,
    held: Held<'_>,
    commands: Option<&CommandContext>,
    welcomed_at: &mut Option<tokio::time::Instant>,
) -> SessionEnd {
    let Held {
        status_interval,
        signing_key,
        files,
    } = held;
    let mut trust_version = loaded.stored.trust_version;
    let pin = commands.and_then(|c| c.pin);
    settle_stored_set(dir, pin.as_ref());
    let (tx, rx) = tokio::sync::mpsc::channel::<proto::NodeMessage>(8);
    if tx.send(hello(dir, trust_version)).await.is_err() {
        return SessionEnd::Lost("the session's sender closed".to_owned());
    }
    // After Hello is queued: the runner's first messages (results of interrupted commands)
    // must follow it.
    let mark = SignedTimeMark::default();
    let jobs = commands.map(|ctx| spawn_runner(ctx.clone(), tx.clone(), mark.clone()));
    let revoked_at_handshake = |status: &tonic::Status| SessionEnd::Revoked {
        reason: describe_status(status),
        serial: loaded.leaf.serial.to_hex(),
    };
    let mut inbound = match client.open_session(rx).await {
        Ok(stream) => stream,
        Err(status) if is_revoked_alert(&status) => return revoked_at_handshake(&status),
        Err(status) => return lost(&status),
    };
    // Named in the session-open line: the gateway's own framing, or gRPC with an older one.
    let wire = match inbound.wire() {
        SessionWire::Framed => "bc-session/1",
        SessionWire::Grpc => "gRPC",
    };
    let wait = (until - crate::clock::now())
        .try_into()
        .unwrap_or(StdDuration::ZERO);
    let due = tokio::time::sleep(wait);
    tokio::pin!(due);
    let mut ticker = tokio::time::interval(status_interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await;
    let welcome_deadline = tokio::time::sleep(WELCOME_TIMEOUT);
    tokio::pin!(welcome_deadline);
    *welcomed_at = None;
    loop {
        tokio::select! {
            message = inbound.message() => match message {
                Ok(Some(proto::GatewayMessage { body: Some(GatewayBody::Welcome(w)) })) => {
                    if welcomed_at.is_none() {
                        *welcomed_at = Some(tokio::time::Instant::now());
                        log_session_open(loaded, wire, &w);
                    }
                    // The Welcome's server time is not signed: it is reported above and never
                    // judges anything; serverTime takes only signed times (join and renewal
                    // answers, verified commands' issue times mirrored here from the runner).
                    mirror_signed_time(dir, &mark);
                    if let Some(key) = signing_key {
                        if take_welcome_trust(dir, key, &w, &mut trust_version, pin.as_ref())
                            && tx.send(status_report(dir, trust_version)).await.is_err()
                        {
                            return SessionEnd::Lost("the session's stream closed".to_owned());
                        }
                    }
                }
                Ok(Some(proto::GatewayMessage { body: Some(GatewayBody::RevocationList(list)) })) => {
                    take_pushed(files, loaded, &list.der, &mut |line| log(line));
                }
                Ok(Some(proto::GatewayMessage { body: Some(GatewayBody::Revocation(n)) })) => {
                    return revocation_end(n, &loaded.leaf.serial.to_hex());
                }
                Ok(Some(proto::GatewayMessage { body: Some(GatewayBody::Command(command)) })) => {
                    let answer = match hand_over(jobs.as_ref(), command) {
                        Ok(answer) => answer,
                        Err(end) => return end,
                    };
                    if let Some(answer) = answer {
                        if tx.send(answer).await.is_err() {
                            return SessionEnd::Lost("the session's stream closed".to_owned());
                        }
                    }
                }
                Ok(Some(_)) => {}
                Ok(None) => return SessionEnd::Lost("the gateway closed the session".to_owned()),
                Err(status) if is_revoked_alert(&status) => return revoked_at_handshake(&status),
                Err(status) => return lost(&status),
            },
            _ = ticker.tick() => {
                let report = status_report(dir, trust_version);
                if tx.send(report).await.is_err() {
                    return SessionEnd::Lost("the session's stream closed".to_owned());
                }
            }
            _ = &mut welcome_deadline, if welcomed_at.is_none() => {
                return SessionEnd::Lost(format!(
                    "no Welcome within {} s of Hello", WELCOME_TIMEOUT.as_secs()
                ));
            }
            _ = &mut due => return SessionEnd::Due,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::identity::StoredIdentity;

    fn stored_in(dir: &DataDir, server_time: Option<&str>) {
        let stored = StoredIdentity {
            node_id: "node_a".into(),
            site_id: "site_1".into(),
            trust_domain: "example.org".into(),
            role: "node".into(),
            chain: vec![b"not read here".to_vec()],
            not_after: "2099-01-01T00:00:00Z".into(),
            trust_version: 0,
            trust_roots: Vec::new(),
            trust_bundle: None,
            signed_trust_bundle: None,
            server_time: server_time.map(str::to_owned),
            allowed_kinds: Vec::new(),
        };
        dir.write(IDENTITY_FILE, &stored.to_json()).unwrap();
    }

    fn server_time(dir: &DataDir) -> Option<OffsetDateTime> {
        read_stored(dir).unwrap().unwrap().server_time()
    }

    #[test]
    fn a_welcome_mirrors_the_signed_time_mark_into_identity_json_and_never_lowers_it() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = DataDir::new(tmp.path());
        stored_in(&dir, Some("2026-01-01T00:00:00Z"));
        let mark = SignedTimeMark::default();
        // No mark: nothing changes.
        mirror_signed_time(&dir, &mark);
        assert_eq!(server_time(&dir), time_of_ms(1_767_225_600_000));
        // A higher mark is mirrored.
        mark.raise(1_767_225_700_000);
        mirror_signed_time(&dir, &mark);
        assert_eq!(server_time(&dir), time_of_ms(1_767_225_700_000));
        // A lower one (a stale runner) never lowers serverTime.
        stored_in(&dir, Some("2026-06-01T00:00:00Z"));
        mirror_signed_time(&dir, &mark);
        assert_eq!(
            server_time(&dir),
            OffsetDateTime::parse(
                "2026-06-01T00:00:00Z",
                &time::format_description::well_known::Rfc3339
            )
            .ok()
        );
    }

    #[test]
    fn only_a_clock_off_by_more_than_the_window_is_warned_about() {
        assert_eq!(skew_warning(time::Duration::seconds(59)), None);
        assert_eq!(
            skew_warning(time::Duration::seconds(90)).as_deref(),
            Some(
                "this machine's clock is 90.0 s ahead of the gateway's (its Welcome's time): \
                 renewals and x509pop re-joins are refused past 60 s; fix the clock \
                 (timedatectl status; chrony or systemd-timesyncd)"
            )
        );
        assert!(skew_warning(time::Duration::seconds(-61))
            .unwrap()
            .contains("61.0 s behind the gateway's"));
    }
}
