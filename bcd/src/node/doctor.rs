//! [`NetworkDoctor`], `bcd doctor`'s network half: a pinned TLS handshake with the gateway, and
//! the clock against the `Welcome` of a real session (over the wire `bcd node` uses:
//! [`crate::client::connect_session`]). The Welcome's time is not signed, so this check only
//! reports: nothing bcd decides reads it (the `local clock` check compares the clock with the
//! highest signed time bcd has seen).

use domain::pki::Pin;
use time::{Duration, OffsetDateTime};

use super::session::{client_identity, time_of_ms, WELCOME_TIMEOUT};
use crate::client::{connect, connect_session, describe_status, ClientError};
use crate::config::Config;
use crate::files::identity::{load_read_only_in, LoadedIdentity};
use crate::files::revoked::REVOKED_WAY_BACK;
use crate::files::DataDir;
use crate::status::{Check, Level, NetworkChecks, CLOCK_TOLERANCE};
use proto::gateway_message::Body as GatewayBody;
use proto::node_message::Body as NodeBody;

/// Clock skew against the server past which doctor fails: the window renewals and x509pop
/// re-joins are judged in (spec 003 and 000: ±60 s), past which both are refused.
pub const CLOCK_SKEW_FAIL: Duration = CLOCK_TOLERANCE;
/// Clock skew against the server past which doctor warns: half the window.
pub const CLOCK_SKEW_WARN: Duration = Duration::seconds(30);

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

/// Why doctor's session got no `Welcome`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WelcomeError {
    /// The gateway says the certificate is revoked (a `RevocationNotice`, or the TLS alert
    /// `certificate_revoked` at the handshake).
    Revoked(String),
    /// Anything else.
    Other(String),
}

impl From<String> for WelcomeError {
    fn from(s: String) -> WelcomeError {
        WelcomeError::Other(s)
    }
}

/// The gateway's `Welcome` time for a session opened with this node's certificate.
pub async fn welcome_time(
    server: &str,
    serving_ca: Pin,
    loaded: &LoadedIdentity,
) -> Result<OffsetDateTime, WelcomeError> {
    let identity = client_identity(loaded);
    let client = match connect_session(server, serving_ca, &identity).await {
        Ok(client) => client,
        Err(ClientError::CertificateRevoked { addr }) => {
            return Err(WelcomeError::Revoked(format!(
                "the gateway at {addr} refused this certificate at the TLS handshake with the \
                 alert certificate_revoked"
            )))
        }
        Err(e) => return Err(WelcomeError::Other(e.to_string())),
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<proto::NodeMessage>(2);
    let hello = proto::NodeMessage {
        body: Some(NodeBody::Hello(proto::Hello {
            trust_version: loaded.stored.trust_version,
            // No version and no boot id: the gateway records a Hello's as what the node runs
            // (decision 0105), and the doctor may be a newer bcd than the running daemon.
            ..Default::default()
        })),
    };
    tx.send(hello)
        .await
        .map_err(|_| WelcomeError::Other("the session's sender closed".to_owned()))?;
    let exchange = async {
        let mut inbound = client
            .open_session(rx)
            .await
            .map_err(|s| describe_status(&s))?;
        loop {
            match inbound.message().await.map_err(|s| describe_status(&s))? {
                Some(proto::GatewayMessage {
                    body: Some(GatewayBody::Welcome(w)),
                }) => {
                    return time_of_ms(w.server_time_ms).ok_or_else(|| {
                        WelcomeError::Other("the Welcome's server time is out of range".to_owned())
                    })
                }
                Some(proto::GatewayMessage {
                    body: Some(GatewayBody::Revocation(n)),
                }) => return Err(WelcomeError::Revoked(n.reason)),
                Some(_) => {}
                None => {
                    return Err(WelcomeError::Other(
                        "the gateway closed the session before Welcome".to_owned(),
                    ))
                }
            }
        }
    };
    let result = tokio::time::timeout(WELCOME_TIMEOUT, exchange)
        .await
        .map_err(|_| {
            WelcomeError::Other(format!("no Welcome within {} s", WELCOME_TIMEOUT.as_secs()))
        })?;
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
        let loaded = match load_read_only_in(&dir, &config.tpm_host()) {
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
            // Reported under its own check, with the way back once.
            Some(Err(WelcomeError::Revoked(reason))) => {
                // An expired identity already printed its way back (identity check): once.
                let way_back = if now >= loaded.leaf.not_after {
                    "it has expired too: join again as the identity check says, with a new token"
                } else {
                    REVOKED_WAY_BACK
                };
                return Check::new(
                    "revocation",
                    Level::Fail,
                    format!(
                        "{} is revoked: the gateway says so ({reason}); {way_back}",
                        loaded.describe()
                    ),
                );
            }
            Some(Err(WelcomeError::Other(e))) => {
                return Check::new(
                    "clock skew",
                    Level::Fail,
                    format!(
                        "the gateway did not open a session for this node: {e}; no server time \
                         to compare with (see the gateway check above, and the gateway's log)"
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
                    "{detail}: renewals and x509pop re-joins are refused past {} s, and this \
                     clock judges the certificate's expiry; fix the clock (timedatectl status; \
                     chrony or systemd-timesyncd), then start bcd node again (no reset is needed)",
                    CLOCK_SKEW_FAIL.whole_seconds()
                ),
            )
        } else if skew.abs() > CLOCK_SKEW_WARN {
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
