//! One session with the gateway ([`hold_session`]): `Hello` with the trust version held, a
//! `StatusReport` every interval, each `Welcome`'s signed trust bundle kept (its unsigned
//! server time only logged), until the renewal is due, a revocation, or the session's end.
//!
//! Hello and every StatusReport carry the held approver set's epoch and SHA-256
//! ([`crate::trust::approver_set::reported`]). After a stored bundle (and at the session's start)
//! the bundle's approver set is settled under the one epoch rule. Each `GatewayMessage.command`
//! goes to the command runner's thread ([`crate::signed_commands::spawn_runner`]) with the latest
//! Welcome's server time; its `CommandResult` comes back on the session's stream, so the select
//! loop keeps its status reports and revocation handling while a command runs.
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
use crate::files::identity::{read_stored, LoadedIdentity};
use crate::files::DataDir;
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
            client_time_ms: now_ms(OffsetDateTime::now_utc()),
            trust_version,
            approver_set_epoch,
            approver_set_sha256,
        })),
    }
}

/// Holds one session on `client` ([`crate::client::connect_session`]) until `until`, a
/// revocation, or its end. `commands`: how commands run (`None`: every command is rejected
/// `NODE_STATE`).
pub async fn hold_session(
    client: SessionClient,
    dir: &DataDir,
    loaded: &LoadedIdentity,
    until: OffsetDateTime,
    status_interval: StdDuration,
    signing_key: Option<&PublicKey>,
    commands: Option<&CommandContext>,
) -> SessionEnd {
    let mut trust_version = loaded.stored.trust_version;
    let pin = commands.and_then(|c| c.pin);
    settle_stored_set(dir, pin.as_ref());
    let (tx, rx) = tokio::sync::mpsc::channel::<proto::NodeMessage>(8);
    let (approver_set_epoch, approver_set_sha256) = reported(dir);
    let hello = proto::NodeMessage {
        body: Some(NodeBody::Hello(proto::Hello {
            trust_version,
            agent_version: env!("CARGO_PKG_VERSION").to_owned(),
            approver_set_epoch,
            approver_set_sha256,
        })),
    };
    let mut welcome_time: Option<(i64, std::time::Instant)> = None;
    if tx.send(hello).await.is_err() {
        return SessionEnd::Lost("the session's sender closed".to_owned());
    }
    // After Hello is queued: the runner's first messages (results of interrupted commands)
    // must follow it.
    let jobs = commands.map(|ctx| spawn_runner(ctx.clone(), tx.clone()));
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
    let wait = (until - OffsetDateTime::now_utc())
        .try_into()
        .unwrap_or(StdDuration::ZERO);
    let due = tokio::time::sleep(wait);
    tokio::pin!(due);
    let mut ticker = tokio::time::interval(status_interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await;
    let welcome_deadline = tokio::time::sleep(WELCOME_TIMEOUT);
    tokio::pin!(welcome_deadline);
    let mut welcomed = false;
    loop {
        tokio::select! {
            message = inbound.message() => match message {
                Ok(Some(proto::GatewayMessage { body: Some(GatewayBody::Welcome(w)) })) => {
                    welcome_time = Some((w.server_time_ms, std::time::Instant::now()));
                    let server_time = time_of_ms(w.server_time_ms);
                    if !welcomed {
                        welcomed = true;
                        log(format_args!(
                            "session open as {} over {} (certificate serial {}, valid until \
                             {}; server time {}, trust version {})",
                            loaded.describe(),
                            wire,
                            loaded.leaf.serial.to_hex(),
                            rfc3339(loaded.leaf.not_after),
                            server_time.map(rfc3339).unwrap_or_else(|| "unknown".to_owned()),
                            w.trust_version,
                        ));
                    }
                    // The Welcome's server time is not signed: it is logged above and never
                    // raises the serverTime high-water mark (a signed renewal answer does).
                    if let Some(key) = signing_key {
                        match apply_welcome_trust(dir, key, &w) {
                            Ok(TrustUpdate::Stored { previous, version }) => {
                                log(format_args!(
                                    "trust bundle version {version} verified and stored (held {previous})"
                                ));
                                trust_version = version;
                                settle_stored_set(dir, pin.as_ref());
                                let report = status_report(dir, trust_version);
                                if tx.send(report).await.is_err() {
                                    return SessionEnd::Lost("the session's stream closed".to_owned());
                                }
                            }
                            Ok(_) => {}
                            Err(e) => log(format_args!("{e}; keeping trust version {trust_version}")),
                        }
                    }
                }
                Ok(Some(proto::GatewayMessage { body: Some(GatewayBody::Revocation(n)) })) => {
                    return SessionEnd::Revoked { reason: n.reason, serial: n.serial };
                }
                Ok(Some(proto::GatewayMessage { body: Some(GatewayBody::Command(command)) })) => {
                    let refused = |detail: &str| proto::NodeMessage {
                        body: Some(NodeBody::Result(proto::CommandResult {
                            command_id: command.command_id.clone(),
                            outcome: proto::CommandOutcome::Rejected as i32,
                            reject_reason: proto::CommandRejectReason::NodeState as i32,
                            detail: detail.to_owned(),
                            ..Default::default()
                        })),
                    };
                    let answer = match (&jobs, welcome_time) {
                        (None, _) => Some(refused("commands-disabled: this bcd runs no commands")),
                        (Some(_), None) => Some(refused("no-server-time: a command came before the Welcome")),
                        (Some(jobs), Some((welcome_server_ms, welcome_at))) => {
                            let id = command.command_id.clone();
                            match jobs.send(Job { command, welcome_server_ms, welcome_at }) {
                                Ok(()) => None,
                                Err(_) => {
                                    log(format_args!("the command runner stopped; command {id} not run"));
                                    return SessionEnd::Lost("the command runner stopped".to_owned());
                                }
                            }
                        }
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
            _ = &mut welcome_deadline, if !welcomed => {
                return SessionEnd::Lost(format!(
                    "no Welcome within {} s of Hello", WELCOME_TIMEOUT.as_secs()
                ));
            }
            _ = &mut due => return SessionEnd::Due,
        }
    }
}
