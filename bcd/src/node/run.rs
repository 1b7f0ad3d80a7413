//! [`run_node`], the `bcd node` loop: load the identity, renew when due (retrying on failure),
//! otherwise hold a session until the renewal is due, reconnecting with backoff, until a
//! revocation, an expiry or an identity that stops loading ends it ([`NodeExit`]).

use std::time::Duration as StdDuration;

use domain::pki::{Pin, PublicKey};
use time::{Duration, OffsetDateTime};

use super::backoff::RECONNECT_MIN;
use super::backoff::{Backoff, SplitMix64};
use super::log::{log, rfc3339};
use super::renew::{renew_retrying, RenewError};
use super::session::{client_identity, hold_session, Held, SessionEnd};
use crate::client::ClientIdentity;
use crate::client::{connect, connect_session, ClientError, GatewayAddress};
use crate::files::identity::{load_in, LoadError, LoadedIdentity, WAY_BACK};
use crate::files::pem_files::{refresh, FileSettings};
use crate::files::DataDir;
use crate::node_key::TpmHost;
use crate::renewal::request::PendingRenewal;
use crate::renewal::schedule::{jitter, renew_at, renewal_retry_at};
use crate::signed_commands::{CommandContext, CommandSettings};
use domain::quorum::SetDigest;
use tokio::time::Instant;

/// What `bcd node` prints last when its certificate was revoked (exit status 1).
pub const REVOKED_EXIT_MESSAGE: &str = "agent: this node's certificate was revoked";
/// The longest wait a gateway's retry hint can make `bcd node` wait before reconnecting.
pub const PUSHBACK_MAX: StdDuration = StdDuration::from_secs(600);

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
    /// renewal answers and Welcome trust bundles are verified under it. `None`: no bundle is
    /// stored and no renewal is attempted (an answer could not be verified).
    pub join_signing_key: Option<PublicKey>,
    /// The host's TPM (`[tpm] tcti`): TPM-held keys load and new keys are made there.
    pub tpm: TpmHost,
    /// `[commands]` and the first-set pin (`approver_set_sha256`).
    pub commands: CommandSettings,
    /// `approver_set_sha256`.
    pub approver_set_pin: Option<SetDigest>,
    /// `[files]`: the PEM files refreshed after each renewal, and `on_renew`.
    pub files: FileSettings,
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

/// How long to wait before reconnecting when the gateway asked for `wait` and this node's own
/// backoff drew `own`: at least both, at most [`PUSHBACK_MAX`].
fn pushed_back_delay(wait: StdDuration, own: StdDuration) -> StdDuration {
    wait.max(own).min(PUSHBACK_MAX)
}

/// What the session loop's backoff does when a session ended with `end`, `held` after its
/// Welcome (`None`: never welcomed): the wait before the next attempt (`None`: none, the
/// renewal is due). A lasting session resets the streak first ([`Backoff::session_ended`]).
fn after_session(
    backoff: &mut Backoff,
    end: &SessionEnd,
    held: Option<StdDuration>,
) -> Option<StdDuration> {
    backoff.session_ended(held);
    match end {
        SessionEnd::Due | SessionEnd::Revoked { .. } => {
            backoff.reset();
            None
        }
        SessionEnd::Lost(_) => Some(backoff.next_delay()),
        SessionEnd::PushedBack { wait, .. } => Some(pushed_back_delay(*wait, backoff.next_delay())),
    }
}

/// The identity, loaded. The TPM, or bcd helper holding it for an unprivileged node, not
/// answering (a helper restarting, a TPM busy) is not a reason to stop, as a lost session is
/// not: it is waited out with `backoff`. A key the TPM derives differently is another error and
/// still ends the node.
async fn load_waiting(
    dir: &DataDir,
    tpm: &TpmHost,
    backoff: &mut Backoff,
) -> Result<LoadedIdentity, LoadError> {
    loop {
        match load_in(dir, tpm) {
            Ok(loaded) => {
                backoff.reset();
                return Ok(loaded);
            }
            Err(e @ LoadError::Tpm { .. }) => {
                let wait = backoff.next_delay();
                log(format_args!(
                    "{e}; trying again in {:.1} s",
                    wait.as_secs_f64()
                ));
                tokio::time::sleep(wait).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// The renewal's state across the loop.
#[derive(Default)]
struct Renewing {
    /// Failed attempts in a row.
    failures: u32,
    /// The next key of a failed renewal, reused by the retry (its answer may only have been
    /// lost).
    pending: PendingRenewal,
    /// When to try again after a failure (`None`: at 60 % of the certificate's life).
    retry_at: Option<OffsetDateTime>,
}

/// One renewal, due now: on success the PEM files and `on_renew` follow; on failure the next
/// attempt is scheduled, never past notAfter (at notAfter itself the loop ends with
/// [`NodeExit::Expired`], which re-joins by x509pop).
async fn renew_now(
    dir: &DataDir,
    options: &NodeOptions,
    loaded: &LoadedIdentity,
    identity: &ClientIdentity,
    renewing: &mut Renewing,
) {
    let result = match connect(&options.server, options.serving_ca, Some(identity)).await {
        Ok(mut client) => {
            renew_retrying(
                &mut client,
                dir,
                loaded,
                options.join_signing_key.as_ref(),
                &mut renewing.pending,
            )
            .await
        }
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
            // identity.json is committed: now the PEM files, then on_renew.
            refresh(&options.files, &renewed, &mut |line| log(line));
            renewing.failures = 0;
            renewing.retry_at = None;
        }
        Err(e) => {
            renewing.failures += 1;
            let now = crate::clock::now();
            let next = renewal_retry_at(
                now,
                loaded.leaf.not_after,
                renewing.failures,
                e.pushback(),
                jitter(),
            );
            log(renewal_failed_line(
                &e,
                renewing.failures,
                loaded.leaf.not_after - now,
                (next < loaded.leaf.not_after).then_some(next),
            ));
            renewing.retry_at = Some(next);
        }
    }
}

/// Sleeps `delay`, never past the renewal at `due`.
async fn sleep_before_due(delay: StdDuration, due: OffsetDateTime) {
    let until_due: StdDuration = (due - crate::clock::now())
        .try_into()
        .unwrap_or(StdDuration::ZERO);
    tokio::time::sleep(delay.min(until_due)).await;
}

/// Runs `bcd node` until the certificate is revoked, expires, or the identity stops loading.
pub async fn run_node(dir: &DataDir, options: &NodeOptions) -> NodeExit {
    if let Err(e) = GatewayAddress::parse(&options.server) {
        return NodeExit::Config(e.to_string());
    }
    let mut renewing = Renewing::default();
    // Lost sessions, and identities the TPM did not load: each its own streak.
    let mut reconnect = Backoff::new(SplitMix64::from_entropy());
    let mut key_backoff = Backoff::new(SplitMix64::from_entropy());
    let mut first = true;
    loop {
        let loaded = match load_waiting(dir, &options.tpm, &mut key_backoff).await {
            Ok(loaded) => loaded,
            Err(e) => return NodeExit::Load(e),
        };
        if first {
            log(format_args!(
                "identity {} loaded; certificate valid until {}",
                loaded.describe(),
                rfc3339(loaded.leaf.not_after)
            ));
            // The PEM files follow identity.json: a crash between the two (or a join by an
            // older bcd) is repaired here, and on_renew runs when anything was rewritten.
            refresh(&options.files, &loaded, &mut |line| log(line));
            first = false;
        }
        let now = crate::clock::now();
        if now >= loaded.leaf.not_after {
            return NodeExit::Expired(rfc3339(loaded.leaf.not_after));
        }
        let due = renewing
            .retry_at
            .unwrap_or_else(|| renew_at(loaded.leaf.not_before, loaded.leaf.not_after));
        let identity = client_identity(&loaded);

        if now >= due {
            renew_now(dir, options, &loaded, &identity, &mut renewing).await;
            continue;
        }

        let mut welcomed_at: Option<Instant> = None;
        let end = match connect_session(&options.server, options.serving_ca, &identity).await {
            Ok(client) => {
                hold_session(
                    client,
                    dir,
                    &loaded,
                    due,
                    Held {
                        status_interval: options.status_interval,
                        signing_key: options.join_signing_key.as_ref(),
                        files: &options.files,
                    },
                    Some(&CommandContext {
                        dir: dir.clone(),
                        settings: options.commands.clone(),
                        pin: options.approver_set_pin,
                    }),
                    &mut welcomed_at,
                )
                .await
            }
            Err(ClientError::CertificateRevoked { addr }) => SessionEnd::Revoked {
                reason: format!("the gateway at {addr} refused this certificate as revoked at the TLS handshake"),
                serial: loaded.leaf.serial.to_hex(),
            },
            Err(e) => SessionEnd::Lost(e.to_string()),
        };
        let held = welcomed_at.map(|at| at.elapsed());
        let delay = after_session(&mut reconnect, &end, held);
        match end {
            SessionEnd::Revoked { reason, serial } => {
                log(format_args!(
                    "certificate revoked: {reason} (serial {serial}); not reconnecting with it"
                ));
                // For bcd status, bcd doctor and bcd join: this identity is dead. The session
                // was this certificate's, so the record names its serial as bcd writes it.
                if let Err(e) = crate::files::revoked::record(
                    dir,
                    &loaded.leaf.serial.to_hex(),
                    &reason,
                    crate::clock::now(),
                ) {
                    log(format_args!("could not record the revocation: {e}"));
                }
                return NodeExit::Revoked { reason, serial };
            }
            SessionEnd::Due => {}
            SessionEnd::Lost(why) => {
                let delay = delay.unwrap_or(RECONNECT_MIN);
                log(format_args!(
                    "session lost: {why}; reconnecting in {} ms",
                    delay.as_millis()
                ));
                sleep_before_due(delay, due).await;
            }
            SessionEnd::PushedBack { why, wait } => {
                let delay = delay.unwrap_or(wait);
                log(format_args!(
                    "session lost: {why}; the gateway asked for {} ms: reconnecting in {} ms",
                    wait.as_millis(),
                    delay.as_millis()
                ));
                sleep_before_due(delay, due).await;
            }
        }
    }
}

/// The log line of a failed renewal (spec 002: `renewal failed` with the attempt and
/// `expiresIn`), and when the next attempt is.
pub fn renewal_failed_line(
    error: &dyn std::fmt::Display,
    attempt: u32,
    expires_in: Duration,
    next: Option<OffsetDateTime>,
) -> String {
    let next = match next {
        Some(at) => format!("next attempt at {}", rfc3339(at)),
        None => "no retry fits before the certificate expires; at its expiry bcd node re-joins by \
                 x509pop"
            .to_owned(),
    };
    format!(
        "renewal failed: {error}; attempt {attempt}, expiresIn {}s; {next}",
        expires_in.whole_seconds().max(0)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    #[test]
    fn the_renewal_failure_line_carries_attempt_and_expires_in() {
        let at = datetime!(2026-01-01 00:00:30 UTC);
        assert_eq!(
            renewal_failed_line(
                &"renewal: the gateway answered UNAVAILABLE",
                2,
                Duration::seconds(95),
                Some(at)
            ),
            "renewal failed: renewal: the gateway answered UNAVAILABLE; attempt 2, expiresIn 95s; \
             next attempt at 2026-01-01T00:00:30Z"
        );
        assert_eq!(
            renewal_failed_line(&"x", 3, Duration::seconds(-4), None),
            "renewal failed: x; attempt 3, expiresIn 0s; no retry fits before the certificate \
             expires; at its expiry bcd node re-joins by \
                 x509pop"
        );
    }

    /// Issue 40, item 13: a gateway whose revocation feed stopped asks for a minute and more;
    /// bcd waits that long (not its own 1 s), and no gateway can park it past ten minutes.
    #[test]
    fn a_gateway_retry_hint_lengthens_the_reconnect_delay_within_a_bound() {
        let minute = StdDuration::from_secs(61);
        let second = StdDuration::from_secs(1);
        assert_eq!(pushed_back_delay(minute, second), minute);
        assert_eq!(pushed_back_delay(StdDuration::ZERO, second), second);
        assert_eq!(
            pushed_back_delay(StdDuration::from_secs(86_400), second),
            PUSHBACK_MAX
        );
        let mut status = tonic::Status::unavailable("the gateway's revocation feed has stopped");
        status.metadata_mut().insert(
            crate::client::PUSHBACK_HEADER,
            "61000".parse().expect("ascii"),
        );
        match super::super::session::lost(&status) {
            SessionEnd::PushedBack { wait, why } => {
                assert_eq!(wait, minute);
                assert!(why.contains("revocation feed has stopped"), "{why}");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            super::super::session::lost(&tonic::Status::unavailable("x")),
            SessionEnd::Lost(_)
        ));
    }

    /// Issue 44, item 8: the loop's use of the backoff. Losses grow the streak; a session open
    /// 10 s after its Welcome, or one closed for the renewal, ends it; a gateway's hint is
    /// waited out on top of the node's own draw (seeded: exact waits).
    #[test]
    fn the_session_loop_resets_its_backoff_after_a_lasting_session() {
        let lost = SessionEnd::Lost("the gateway closed the session".to_owned());
        let mut backoff = Backoff::new(SplitMix64::seeded(8));
        let ms = |d: Option<StdDuration>| d.map(|d| d.as_millis());
        // Three sessions refused or lost before their Welcome, one lost 9 s after it.
        assert_eq!(ms(after_session(&mut backoff, &lost, None)), Some(2237));
        assert_eq!(ms(after_session(&mut backoff, &lost, None)), Some(4494));
        assert_eq!(ms(after_session(&mut backoff, &lost, None)), Some(9600));
        let short = Some(StdDuration::from_secs(9));
        assert_eq!(ms(after_session(&mut backoff, &lost, short)), Some(15903));
        assert_eq!(backoff.failures(), 4);
        // A session that lasted: the next wait is a first one again, in [1 s, 3 s).
        let lasted = Some(StdDuration::from_secs(3600));
        assert_eq!(ms(after_session(&mut backoff, &lost, lasted)), Some(1127));
        assert_eq!(backoff.failures(), 1);
        // Closed for the renewal: no wait, and the streak ends.
        assert_eq!(after_session(&mut backoff, &SessionEnd::Due, None), None);
        assert_eq!(backoff.failures(), 0);
        // A hint of a minute outweighs the node's own draw; the draw still counts.
        let pushed = SessionEnd::PushedBack {
            why: "x".to_owned(),
            wait: StdDuration::from_secs(61),
        };
        assert_eq!(ms(after_session(&mut backoff, &pushed, None)), Some(61_000));
        assert_eq!(backoff.failures(), 1);
    }
}
