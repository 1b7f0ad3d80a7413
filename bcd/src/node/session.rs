//! One session with the gateway ([`hold_session`]): `Hello` with the trust version held, a
//! `StatusReport` every interval, each `Welcome`'s signed trust bundle kept (its unsigned
//! server time only logged), until the renewal is due, a revocation, or the session's end.

use std::time::Duration as StdDuration;

use domain::pki::PublicKey;
use time::OffsetDateTime;
use tokio_stream::wrappers::ReceiverStream;

use super::log::{log, rfc3339};
use crate::client::{describe_status, is_revoked_alert, ClientIdentity, NodeClient};
use crate::files::DataDir;
use crate::identity_store::LoadedIdentity;
use crate::trust_bundle::{apply_welcome_trust, TrustUpdate};
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
}

/// A gateway time in Unix milliseconds, `None` when out of range.
pub fn time_of_ms(ms: i64) -> Option<OffsetDateTime> {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).ok()
}

/// Holds one session with `client` until `until`, a revocation, or its end.
pub async fn hold_session(
    client: &mut NodeClient,
    dir: &DataDir,
    loaded: &LoadedIdentity,
    until: OffsetDateTime,
    status_interval: StdDuration,
    signing_key: Option<&PublicKey>,
) -> SessionEnd {
    let mut trust_version = loaded.stored.trust_version;
    let (tx, rx) = tokio::sync::mpsc::channel::<proto::NodeMessage>(8);
    let hello = proto::NodeMessage {
        body: Some(NodeBody::Hello(proto::Hello {
            trust_version,
            agent_version: env!("CARGO_PKG_VERSION").to_owned(),
            ..Default::default()
        })),
    };
    if tx.send(hello).await.is_err() {
        return SessionEnd::Lost("the session's sender closed".to_owned());
    }
    let revoked_at_handshake = |status: &tonic::Status| SessionEnd::Revoked {
        reason: describe_status(status),
        serial: loaded.leaf.serial.to_hex(),
    };
    let mut inbound = match client.session(ReceiverStream::new(rx)).await {
        Ok(response) => response.into_inner(),
        Err(status) if is_revoked_alert(&status) => return revoked_at_handshake(&status),
        Err(status) => return SessionEnd::Lost(describe_status(&status)),
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
                    let server_time = time_of_ms(w.server_time_ms);
                    if !welcomed {
                        welcomed = true;
                        log(format_args!(
                            "session open as {} (certificate serial {}, valid until {}; server \
                             time {}, trust version {})",
                            loaded.describe(),
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
                                let report = proto::NodeMessage {
                                    body: Some(NodeBody::Status(proto::StatusReport {
                                        client_time_ms: now_ms(OffsetDateTime::now_utc()),
                                        trust_version,
                                        ..Default::default()
                                    })),
                                };
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
                Ok(Some(_)) => {}
                Ok(None) => return SessionEnd::Lost("the gateway closed the session".to_owned()),
                Err(status) if is_revoked_alert(&status) => return revoked_at_handshake(&status),
                Err(status) => return SessionEnd::Lost(describe_status(&status)),
            },
            _ = ticker.tick() => {
                let report = proto::NodeMessage {
                    body: Some(NodeBody::Status(proto::StatusReport {
                        client_time_ms: now_ms(OffsetDateTime::now_utc()),
                        trust_version,
                        ..Default::default()
                    })),
                };
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
