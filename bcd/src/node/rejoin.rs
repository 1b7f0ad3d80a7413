//! Re-joining by x509pop from the identity on disk (spec 000 "x509pop"): `bcd join --attestor
//! x509pop`, and `bcd node` on its own when its certificate expired while the machine was off.
//!
//! A fresh key and CSR, no token; the x509pop producer signs with the current node key over the
//! new CSR, its node id and the clock; the answer must be this node (same node id, trust domain
//! and role) and is stored with [`crate::files::identity::store_rejoined`], the crash-safe order
//! for a directory that already holds an identity (`node.key.next`, `identity.json`, rename).
//! The control plane reclaims the node in place: a new identity generation, every older
//! certificate revoked.
//!
//! The certificate counts as expired by this machine's clock. When the re-join is refused,
//! `bcd node` asks the gateway for a session with the same certificate to read its Welcome's
//! time (unsigned: it is only reported): a clock more than the ±60 s window off is named as the
//! cause ([`RejoinError::ClockOff`]), with no reset asked for, since a certificate the gateway
//! still opens sessions with has not expired and x509pop refuses such a clock's proof anyway.

use domain::pki::{PublicKey, TrustDomain};
use time::Duration;

use super::doctor::welcome_time;
use super::log::{log, rfc3339};
use super::run::NodeOptions;
use super::session::skew_warning;
use crate::attest::x509pop::X509PopProducer;
use crate::attest::X509POP;
use crate::client::GrpcJoinTransport;
use crate::files::identity::{load_in, store_rejoined, LoadError, LoadedIdentity, WAY_BACK};
use crate::files::DataDir;
use crate::join::exchange::{
    exchange, joined_message, JoinEnv, JoinLoop, DEFAULT_APPROVAL_TIMEOUT,
};
use crate::join::hardware::HardwareClaims;
use crate::join::request::{prepare_with_key, JoinError, JoinTransport};
use crate::join::verify::VerifiedJoin;
use crate::node_key::new_node_key;

/// A stored re-join.
#[derive(Debug)]
pub struct Rejoined {
    /// The verified answer.
    pub verified: VerifiedJoin,
    /// The serial of the certificate it replaced (revoked by the control plane).
    pub replaced_serial: String,
}

impl Rejoined {
    /// `re-joined by x509pop as <node> (site ..., role ...); certificate valid until ...`.
    pub fn message(&self) -> String {
        joined_message("re-joined by x509pop", &self.verified)
    }
}

/// Re-joins the node `current` is, by x509pop, through `transport`, and stores the new identity.
pub fn rejoin_x509pop(
    dir: &DataDir,
    transport: &mut dyn JoinTransport,
    current: &LoadedIdentity,
    join_signing: &PublicKey,
    claims: HardwareClaims,
    approval_timeout: Duration,
    env: &mut JoinEnv<'_>,
) -> Result<Rejoined, JoinError> {
    let producer = X509PopProducer::new(current, Box::new(crate::clock::now))?;
    let made = new_node_key(&current.tpm).map_err(JoinError::Local)?;
    if let Some(warning) = &made.warning {
        (env.log)(&format!("bcd join: {warning}"));
    }
    let mut prepared = prepare_with_key(made.key, None, X509POP, current.leaf.role, claims)?;
    let trust_domain: &TrustDomain = &current.leaf.spiffe_id.trust_domain;
    let options = JoinLoop {
        join_signing: join_signing.pin(),
        trust_domain: Some(trust_domain),
        node_id: Some(current.leaf.spiffe_id.node.as_str()),
        approval_timeout,
    };
    let exchanged = exchange(transport, &mut prepared, &producer, &options, env)?;
    let verified = exchanged.verified;
    store_rejoined(
        dir,
        prepared.key,
        &verified.stored_identity(),
        &current.stored,
    )?;
    Ok(Rejoined {
        verified,
        replaced_serial: current.leaf.serial.to_hex(),
    })
}

/// Why `bcd node` could not re-join.
#[derive(Debug, thiserror::Error)]
pub enum RejoinError {
    /// The identity does not load.
    #[error("bcd node: {0}")]
    Load(#[from] LoadError),
    /// No join signing key: an answer could not be verified.
    #[error(
        "bcd node: the node certificate expired at {0}; it could re-join by x509pop, but \
         join_signing_key_pin is not set (or join-signing.jwk is missing), so no answer could be \
         verified; {WAY_BACK}"
    )]
    NoSigningKey(String),
    /// The re-join was refused, and the gateway's Welcome shows this machine's clock off by more
    /// than the window: the cause, with no reset asked for.
    #[error(
        "bcd node: the x509pop re-join was refused: {warning}. The gateway still opens sessions \
         with this certificate (valid until {not_after}): it has not expired, this machine's \
         clock took it for expired. Nothing was changed: once the clock is right, start bcd node \
         again (no reset is needed)"
    )]
    ClockOff {
        /// The skew, as the session warns of it.
        warning: String,
        /// The certificate's notAfter.
        not_after: String,
    },
    /// The re-join failed.
    #[error(
        "bcd node: the node certificate expired at {expired}; the x509pop re-join failed: {error}"
    )]
    Failed {
        /// When the certificate expired.
        expired: String,
        /// Why.
        error: JoinError,
    },
}

/// `bcd node`'s start (and its restart after [`super::NodeExit::Expired`]): when the identity
/// loads and its certificate expired, re-join by x509pop, logging what it does. `Ok(None)`: the
/// certificate had not expired, or its TPM key could not be loaded now; nothing done.
pub fn rejoin_if_expired(
    dir: &DataDir,
    options: &NodeOptions,
    claims: HardwareClaims,
) -> Result<Option<Rejoined>, RejoinError> {
    let current = match load_in(dir, &options.tpm) {
        Ok(current) => current,
        // The TPM, or bcd helper, does not answer yet (a helper starting after the node):
        // `run_node` waits for it and says so; whether the certificate expired is seen then.
        Err(LoadError::Tpm { .. }) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let now = crate::clock::now();
    if now < current.leaf.not_after {
        return Ok(None);
    }
    let expired = rfc3339(current.leaf.not_after);
    let Some(signing) = options.join_signing_key.as_ref() else {
        return Err(RejoinError::NoSigningKey(expired));
    };
    log(format_args!(
        "the certificate of {} (serial {}) expired at {expired}; re-joining by x509pop from the \
         identity on disk (no token)",
        current.describe(),
        current.leaf.serial.to_hex()
    ));
    let failed = |error: JoinError| RejoinError::Failed {
        expired: expired.clone(),
        error,
    };
    let mut transport = GrpcJoinTransport::new(
        &options.server,
        options.serving_ca,
        signing.spki_der().to_vec(),
    )
    .map_err(|e| {
        failed(JoinError::Transport(format!(
            "cannot start an async runtime: {e}"
        )))
    })?;
    let mut sleep = |d: Duration| std::thread::sleep(d.try_into().unwrap_or_default());
    let mut draw = crate::renewal::schedule::jitter;
    let mut say = |line: &str| log(line.trim_start_matches("bcd join: "));
    let mut env = JoinEnv {
        sleep: &mut sleep,
        jitter: &mut draw,
        now: &crate::clock::now,
        log: &mut say,
    };
    let rejoined = match rejoin_x509pop(
        dir,
        &mut transport,
        &current,
        signing,
        claims,
        DEFAULT_APPROVAL_TIMEOUT,
        &mut env,
    ) {
        Ok(rejoined) => rejoined,
        Err(error @ JoinError::Refused { .. }) => {
            return Err(match clock_off(options, &current) {
                Some(warning) => RejoinError::ClockOff {
                    warning,
                    not_after: expired.clone(),
                },
                None => failed(error),
            })
        }
        Err(error) => return Err(failed(error)),
    };
    log(format_args!(
        "{}; the expired certificate (serial {}) is revoked",
        rejoined.message(),
        rejoined.replaced_serial
    ));
    Ok(Some(rejoined))
}

/// After a refused re-join: the warning for this machine's clock when a session with `current`
/// opens and its Welcome's time is off the clock by more than the window (the Welcome's time is
/// not signed: it only names the cause, it decides nothing). `None`: no session, or a clock
/// within the window.
fn clock_off(options: &NodeOptions, current: &LoadedIdentity) -> Option<String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    let welcome = runtime
        .block_on(welcome_time(&options.server, options.serving_ca, current))
        .ok()?;
    skew_warning(crate::clock::now() - welcome)
}
