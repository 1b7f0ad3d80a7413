//! `bcd node`: hold the session, renew the certificate, stop for good on a revocation.
//!
//! [`run_node`] loops:
//!
//! 1. load the identity in the spec's three steps ([`crate::identity_store::load`]); an expired
//!    certificate stops bcd with the way back;
//! 2. when the renewal is due (60% of the leaf's lifetime, or the retry time after a failure),
//!    renew over mTLS with the current certificate ([`renew_once`]): `node.key.next` is written
//!    before the request, then the answer is checked and stored through
//!    [`crate::identity_store::RenewalStore`] (`node.key.next` again, `identity.json`, the
//!    rename), so a crash at any step leaves a matching key and certificate. A failed renewal is
//!    retried with [`crate::renewal_schedule::next_renewal_attempt`] (30 s doubling to 10 min, a
//!    gateway's pushback waited out exactly);
//! 3. otherwise open the session with the current certificate: `Hello` with the trust version
//!    held, then a `StatusReport` every [`NodeOptions::status_interval`], until the renewal is
//!    due (the session is then closed, the certificate renewed, and the session reopened with the
//!    new one) or the session ends (reconnect with backoff, 1 s doubling to 30 s);
//! 4. a `RevocationNotice` ends [`run_node`] with [`NodeExit::Revoked`]: bcd never redials with
//!    that certificate. So does a session the gateway refuses at the handshake with the TLS
//!    alert `certificate_revoked` (a revocation that happened while bcd was disconnected); the
//!    alert comes over the connection pinned to the serving CA, so no one else can forge it.
//!
//! Each `Welcome` raises the `serverTime` high-water mark in `identity.json`, and its signed trust
//! bundle, once verified under the pinned join signing key and only when newer than the one
//! held, is stored there too ([`crate::trust_bundle`]); the next `StatusReport` carries the new
//! version.
//!
//! [`NetworkDoctor`] is `bcd doctor`'s network half: a pinned TLS handshake with the gateway, and
//! the clock against the `Welcome` of a real session.

use std::time::Duration as StdDuration;

use domain::pki::{Pin, PublicKey};
use time::format_description::well_known::Rfc3339;
use time::{Duration, OffsetDateTime};
use tokio_stream::wrappers::ReceiverStream;

use crate::client::{
    classify, connect, describe_status, is_revoked_alert, ClientError, ClientIdentity, NodeClient,
};
use crate::config::Config;
use crate::files::{DataDir, IDENTITY_FILE};
use crate::identity_store::{
    load, load_read_only, read_stored, LoadError, LoadedIdentity, StoreError, WAY_BACK,
};
use crate::join::CallError;
use crate::renewal::{check_renewal_answer, prepare_renewal, PrepareError, RenewalAnswerError};
use crate::renewal_schedule::{jitter, next_renewal_attempt, renew_at, Pushback};
use crate::status::{Check, Level, NetworkChecks, CLOCK_TOLERANCE};
use crate::trust_bundle::{apply_welcome_trust, TrustUpdate};
use proto::gateway_message::Body as GatewayBody;
use proto::node_message::Body as NodeBody;

/// What `bcd node` prints last when its certificate was revoked (exit status 1).
pub const REVOKED_EXIT_MESSAGE: &str = "agent: this node's certificate was revoked";
/// How long the gateway may take to answer `Hello` with `Welcome`.
pub const WELCOME_TIMEOUT: StdDuration = StdDuration::from_secs(30);
/// First reconnect delay after a lost session.
pub const RECONNECT_MIN: Duration = Duration::seconds(1);
/// Longest reconnect delay.
pub const RECONNECT_MAX: Duration = Duration::seconds(30);
/// Clock skew against the server past which doctor fails (warns past [`CLOCK_TOLERANCE`]).
pub const CLOCK_SKEW_FAIL: Duration = Duration::minutes(5);

/// How `bcd node` runs.
#[derive(Debug, Clone)]
pub struct NodeOptions {
    /// The gateway, `host:port`.
    pub server: String,
    /// `serving_ca_spki_pin`.
    pub serving_ca: Pin,
    /// How often a `StatusReport` is sent.
    pub status_interval: StdDuration,
    /// The JoinService signing key (`join-signing.jwk`, checked against `join_signing_key_pin`):
    /// Welcome trust bundles are verified under it and stored. `None`: they are not stored.
    pub join_signing_key: Option<PublicKey>,
}

/// How `bcd node` ended (it runs until one of these).
#[derive(Debug, thiserror::Error)]
pub enum NodeExit {
    /// The gateway sent a RevocationNotice.
    #[error("{REVOKED_EXIT_MESSAGE}")]
    Revoked {
        /// Its reason.
        reason: String,
        /// The serial it names.
        serial: String,
    },
    /// The identity does not load.
    #[error("bcd node: {0}")]
    Load(#[from] LoadError),
    /// The certificate expired before a renewal succeeded.
    #[error(
        "bcd node: the node certificate expired at {0} before a renewal succeeded; {WAY_BACK}"
    )]
    Expired(String),
    /// The configuration cannot work (a malformed server address...).
    #[error("bcd node: {0}")]
    Config(String),
}

/// Why one renewal failed.
#[derive(Debug, thiserror::Error)]
pub enum RenewError {
    /// Could not connect.
    #[error("renewal: {0}")]
    Connect(#[from] ClientError),
    /// Making the next key or writing `node.key.next`.
    #[error(transparent)]
    Prepare(#[from] PrepareError),
    /// The gateway refused or failed the call.
    #[error("renewal: the gateway answered {0}")]
    Call(String, Option<Pushback>),
    /// The answer is not a renewal of this identity.
    #[error(transparent)]
    Answer(#[from] RenewalAnswerError),
    /// The answer carried no certificate.
    #[error("renewal: the answer carries no certificate")]
    Empty,
    /// Storing the new identity failed.
    #[error("renewal: storing the new identity: {0}")]
    Store(#[from] StoreError),
    /// The renewed identity does not load (it should: it was just stored in order).
    #[error("renewal: {0}")]
    Reload(#[from] LoadError),
}

impl RenewError {
    fn pushback(&self) -> Option<Pushback> {
        match self {
            RenewError::Call(_, pushback) => *pushback,
            _ => None,
        }
    }
}

fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap_or_else(|_| t.to_string())
}

/// One log line on standard error (the journal under systemd).
pub fn log(message: impl std::fmt::Display) {
    eprintln!("{} bcd node: {message}", rfc3339(OffsetDateTime::now_utc()));
}

fn now_ms(now: OffsetDateTime) -> i64 {
    i64::try_from(now.unix_timestamp_nanos() / 1_000_000).unwrap_or(i64::MAX)
}

fn client_identity(loaded: &LoadedIdentity) -> ClientIdentity {
    ClientIdentity::new(&loaded.stored.chain, &loaded.key)
}

/// Renews once over `client`: writes `node.key.next`, sends Renew, checks the answer, stores it
/// in the spec's order, and loads the renewed identity.
pub async fn renew_once(
    client: &mut NodeClient,
    dir: &DataDir,
    current: &LoadedIdentity,
) -> Result<LoadedIdentity, RenewError> {
    let (begun, parts) = prepare_renewal(dir, current, OffsetDateTime::now_utc())?;
    let mut call = tonic::Request::new(proto::RenewRequest {
        csr: parts.csr_der,
        chain: parts.chain,
        client_time_ms: i64::try_from(parts.client_time_ms).unwrap_or(i64::MAX),
        signature: parts.proof.as_bytes().to_vec(),
    });
    call.set_timeout(crate::client::CALL_TIMEOUT);
    let answer = match client.renew(call).await {
        Ok(answer) => answer.into_inner(),
        Err(status) => {
            // No certificate came back: the next key is not needed.
            let _ = begun.abandon();
            let (message, pushback) = match classify(&status) {
                CallError::Retryable { message, pushback } => (message, pushback),
                CallError::Refused => (
                    "ACCESS_DENIED (the control plane refused this renewal; its reason is in the \
                     server's security.renew.refused events)"
                        .to_owned(),
                    None,
                ),
                CallError::Fatal(message) => (message, None),
                CallError::NotWired => ("not wired".to_owned(), None),
            };
            return Err(RenewError::Call(message, pushback));
        }
    };
    let Some(leaf_der) = answer.certificate_chain.first() else {
        let _ = begun.abandon();
        return Err(RenewError::Empty);
    };
    let new_leaf = match check_renewal_answer(&current.leaf, leaf_der, begun.next_key()) {
        Ok(leaf) => leaf,
        Err(e) => {
            let _ = begun.abandon();
            return Err(e.into());
        }
    };
    let renewed = current
        .stored
        .renewed(&new_leaf, answer.certificate_chain.clone());
    begun.store_certificate(&renewed)?.promote()?;
    Ok(load(dir)?)
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

/// Raises `serverTime` in `identity.json` to `seen` (a Welcome's time).
pub fn record_server_time(dir: &DataDir, seen: OffsetDateTime) -> Result<(), LoadError> {
    let Some(mut stored) = read_stored(dir)? else {
        return Ok(());
    };
    let before = stored.server_time.clone();
    stored.observe_server_time(seen);
    if stored.server_time != before {
        dir.write(IDENTITY_FILE, &stored.to_json())?;
    }
    Ok(())
}

fn time_of_ms(ms: i64) -> Option<OffsetDateTime> {
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
                    if let Some(t) = server_time {
                        if let Err(e) = record_server_time(dir, t) {
                            log(format_args!("recording the server time: {e}"));
                        }
                    }
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

fn reconnect_delay(failures: u32) -> StdDuration {
    let doublings = failures.saturating_sub(1).min(10);
    let nominal = (RECONNECT_MIN * 2f64.powi(doublings as i32)).min(RECONNECT_MAX);
    let d = nominal * (0.8 + 0.4 * jitter());
    d.clamp(RECONNECT_MIN, RECONNECT_MAX)
        .try_into()
        .unwrap_or(StdDuration::from_secs(1))
}

/// Runs `bcd node` until the certificate is revoked, expires, or the identity stops loading.
pub async fn run_node(dir: &DataDir, options: &NodeOptions) -> NodeExit {
    if let Err(e) = crate::client::GatewayAddress::parse(&options.server) {
        return NodeExit::Config(e.to_string());
    }
    let mut renew_failures = 0u32;
    let mut retry_at: Option<OffsetDateTime> = None;
    let mut lost = 0u32;
    let mut first = true;
    loop {
        let loaded = match load(dir) {
            Ok(loaded) => loaded,
            Err(e) => return NodeExit::Load(e),
        };
        if first {
            log(format_args!(
                "identity {} loaded; certificate valid until {}",
                loaded.describe(),
                rfc3339(loaded.leaf.not_after)
            ));
            first = false;
        }
        let now = OffsetDateTime::now_utc();
        if now >= loaded.leaf.not_after {
            return NodeExit::Expired(rfc3339(loaded.leaf.not_after));
        }
        let due =
            retry_at.unwrap_or_else(|| renew_at(loaded.leaf.not_before, loaded.leaf.not_after));
        let identity = client_identity(&loaded);

        if now >= due {
            let result = match connect(&options.server, options.serving_ca, Some(&identity)).await {
                Ok(mut client) => renew_once(&mut client, dir, &loaded).await,
                Err(e) => Err(RenewError::Connect(e)),
            };
            match result {
                Ok(renewed) => {
                    log(format_args!(
                        "renewed: certificate serial {} valid until {}; renewal due at {}",
                        renewed.leaf.serial.to_hex(),
                        rfc3339(renewed.leaf.not_after),
                        rfc3339(renew_at(renewed.leaf.not_before, renewed.leaf.not_after)),
                    ));
                    renew_failures = 0;
                    retry_at = None;
                }
                Err(e) => {
                    renew_failures += 1;
                    let now = OffsetDateTime::now_utc();
                    let next = next_renewal_attempt(
                        now,
                        loaded.leaf.not_after,
                        renew_failures,
                        e.pushback(),
                        jitter(),
                    )
                    // Past expiry there is nothing to wait for: keep trying until it expires.
                    .unwrap_or(now + crate::renewal_schedule::RENEW_RETRY_MIN);
                    log(format_args!(
                        "{e}; attempt {renew_failures} failed, next at {}",
                        rfc3339(next)
                    ));
                    retry_at = Some(next);
                }
            }
            continue;
        }

        let end = match connect(&options.server, options.serving_ca, Some(&identity)).await {
            Ok(mut client) => {
                hold_session(
                    &mut client,
                    dir,
                    &loaded,
                    due,
                    options.status_interval,
                    options.join_signing_key.as_ref(),
                )
                .await
            }
            Err(ClientError::CertificateRevoked { addr }) => SessionEnd::Revoked {
                reason: format!("the gateway at {addr} refused this certificate as revoked at the TLS handshake"),
                serial: loaded.leaf.serial.to_hex(),
            },
            Err(e) => SessionEnd::Lost(e.to_string()),
        };
        match end {
            SessionEnd::Revoked { reason, serial } => {
                log(format_args!(
                    "certificate revoked: {reason} (serial {serial}); not reconnecting with it"
                ));
                return NodeExit::Revoked { reason, serial };
            }
            SessionEnd::Due => lost = 0,
            SessionEnd::Lost(why) => {
                lost += 1;
                let delay = reconnect_delay(lost);
                log(format_args!(
                    "session lost: {why}; reconnecting in {} ms",
                    delay.as_millis()
                ));
                // Never sleep past the renewal.
                let until_due: StdDuration = (due - OffsetDateTime::now_utc())
                    .try_into()
                    .unwrap_or(StdDuration::ZERO);
                tokio::time::sleep(delay.min(until_due)).await;
            }
        }
    }
}

/// `bcd doctor`'s network checks over the real client.
#[derive(Debug)]
pub struct NetworkDoctor {
    runtime: Option<tokio::runtime::Runtime>,
}

impl Default for NetworkDoctor {
    fn default() -> Self {
        NetworkDoctor::new()
    }
}

impl NetworkDoctor {
    /// A doctor with its own current-thread runtime.
    pub fn new() -> NetworkDoctor {
        NetworkDoctor {
            runtime: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok(),
        }
    }

    fn block_on<F: std::future::Future>(&self, f: F) -> Option<F::Output> {
        self.runtime.as_ref().map(|rt| rt.block_on(f))
    }
}

/// The gateway's `Welcome` time for a session opened with this node's certificate.
pub async fn welcome_time(
    server: &str,
    serving_ca: Pin,
    loaded: &LoadedIdentity,
) -> Result<OffsetDateTime, String> {
    let identity = client_identity(loaded);
    let mut client = connect(server, serving_ca, Some(&identity))
        .await
        .map_err(|e| e.to_string())?;
    let (tx, rx) = tokio::sync::mpsc::channel::<proto::NodeMessage>(2);
    let hello = proto::NodeMessage {
        body: Some(NodeBody::Hello(proto::Hello {
            trust_version: loaded.stored.trust_version,
            agent_version: env!("CARGO_PKG_VERSION").to_owned(),
        })),
    };
    tx.send(hello)
        .await
        .map_err(|_| "the session's sender closed".to_owned())?;
    let exchange = async {
        let mut inbound = client
            .session(ReceiverStream::new(rx))
            .await
            .map_err(|s| describe_status(&s))?
            .into_inner();
        loop {
            match inbound.message().await.map_err(|s| describe_status(&s))? {
                Some(proto::GatewayMessage {
                    body: Some(GatewayBody::Welcome(w)),
                }) => {
                    return time_of_ms(w.server_time_ms)
                        .ok_or_else(|| "the Welcome's server time is out of range".to_owned())
                }
                Some(proto::GatewayMessage {
                    body: Some(GatewayBody::Revocation(n)),
                }) => return Err(format!("this certificate is revoked: {}", n.reason)),
                Some(_) => {}
                None => return Err("the gateway closed the session before Welcome".to_owned()),
            }
        }
    };
    let result = tokio::time::timeout(WELCOME_TIMEOUT, exchange)
        .await
        .map_err(|_| format!("no Welcome within {} s", WELCOME_TIMEOUT.as_secs()))?;
    drop(tx);
    result
}

impl NetworkChecks for NetworkDoctor {
    fn gateway_reachable(&self, config: &Config) -> Check {
        let (Some(server), Some(pin)) = (&config.server, config.pins.serving_ca_spki_pin) else {
            return Check::new(
                "gateway",
                Level::Warn,
                "not checked: set `server` and serving_ca_spki_pin in config.toml",
            );
        };
        match self.block_on(connect(server, pin, None)) {
            None => Check::new("gateway", Level::Fail, "cannot start an async runtime"),
            Some(Ok(_)) => Check::new(
                "gateway",
                Level::Ok,
                format!("{server} answers TLS 1.3 under the pinned serving CA"),
            ),
            Some(Err(e)) => Check::new(
                "gateway",
                Level::Fail,
                format!(
                    "{e}; check that the gateway runs (systemctl status bcctl) and that `server` \
                     and serving_ca_spki_pin match `bcctl pki show`"
                ),
            ),
        }
    }

    fn clock_skew(&self, config: &Config, now: OffsetDateTime) -> Check {
        let (Some(server), Some(pin)) = (&config.server, config.pins.serving_ca_spki_pin) else {
            return Check::new("clock skew", Level::Warn, "not checked: no server or pin");
        };
        let dir = DataDir::new(&config.data_dir);
        let loaded = match load_read_only(&dir) {
            Ok(loaded) => loaded,
            Err(_) => {
                return Check::new(
                    "clock skew",
                    Level::Warn,
                    "not checked: a session needs the node's identity (see identity above)",
                )
            }
        };
        let started = std::time::Instant::now();
        let welcome = match self.block_on(welcome_time(server, pin, &loaded)) {
            None => return Check::new("clock skew", Level::Fail, "cannot start an async runtime"),
            Some(Ok(t)) => t,
            Some(Err(e)) => {
                return Check::new(
                    "clock skew",
                    Level::Fail,
                    format!(
                        "the gateway did not open a session for this node: {e}; if this node \
                         was revoked, join again: bcd join --reset --yes, then bcd join with a \
                         new token"
                    ),
                )
            }
        };
        // Compare with the local time when the Welcome arrived.
        let local = now + started.elapsed();
        let skew = local - welcome;
        let detail = format!(
            "local clock {} the server's by {:.1} s",
            if skew.is_negative() {
                "behind"
            } else {
                "ahead of"
            },
            skew.abs().as_seconds_f64()
        );
        if skew.abs() > CLOCK_SKEW_FAIL {
            Check::new(
                "clock skew",
                Level::Fail,
                format!(
                    "{detail}: fix the clock (timedatectl status; chrony or systemd-timesyncd)"
                ),
            )
        } else if skew.abs() > CLOCK_TOLERANCE {
            Check::new(
                "clock skew",
                Level::Warn,
                format!(
                    "{detail}: fix the clock (timedatectl status; chrony or systemd-timesyncd)"
                ),
            )
        } else {
            Check::new("clock skew", Level::Ok, detail)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconnect_delay_is_bounded() {
        for failures in 0..40 {
            let d = reconnect_delay(failures);
            assert!(d >= StdDuration::from_secs(1) && d <= StdDuration::from_secs(30));
        }
    }
}
