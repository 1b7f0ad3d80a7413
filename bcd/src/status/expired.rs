//! What `bcd status` and `bcd doctor` advise for a certificate expired by this machine's clock:
//! what `bcd node` would do about it (issue 44 item 5), judged from the same facts `bcd node`
//! judges them by.
//!
//! `bcd node` re-joins an expired certificate by x509pop from the identity on disk, by itself:
//! at its start, and when a running node's certificate expires (`crate::node::rejoin`). It needs
//! the JoinService signing key to verify the answer: with `join_signing_key_pin` unset it stops
//! with the way back (join again), and with the pin set but `join-signing.jwk` unreadable or not
//! matching it does not start at all. The control plane admits an x509pop re-join up to its
//! grace after notAfter (`[attestors.x509pop] grace`, 7 days by default); bcd cannot read the
//! control plane's setting, so past the default it says the re-join will be refused unless the
//! grace was raised, and gives the way back.

use serde::Serialize;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::config::Config;
use crate::files::identity::{LoadedIdentity, WAY_BACK};
use crate::join::request::{load_join_signing_key, JOIN_SIGNING_JWK};

/// How an expired identity comes back (`bcd status --json`'s `recovery`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Recovery {
    /// `bcd node` re-joins by x509pop by itself: nothing to reset, no token.
    X509pop,
    /// Join again: `bcd join --reset --yes`, then `bcd join` with a new token.
    Join,
}

/// Whether `bcd node` could verify a re-join's answer: the JoinService signing key, as
/// `bcd node` loads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SigningKey {
    /// `join_signing_key_pin` set and `join-signing.jwk` matches it.
    Loads,
    /// `join_signing_key_pin` is not set.
    NotSet,
    /// The pin is set but the key does not load (why).
    Unloadable(String),
}

impl SigningKey {
    /// The signing key of `config`, loaded as `bcd node` loads it.
    pub fn of(config: &Config) -> Self {
        match &config.pins.join_signing_key_pin {
            None => SigningKey::NotSet,
            Some(pin) => {
                match load_join_signing_key(&config.keys_dir().join(JOIN_SIGNING_JWK), pin) {
                    Ok(_) => SigningKey::Loads,
                    Err(e) => SigningKey::Unloadable(e.to_string()),
                }
            }
        }
    }
}

/// The control plane's x509pop grace unless configured otherwise.
fn default_grace() -> time::Duration {
    let grace = domain::attest::x509pop::DEFAULT_GRACE;
    time::Duration::seconds(i64::try_from(grace.as_secs()).unwrap_or(i64::MAX))
}

/// The problem line and the recovery for `loaded`, whose certificate expired by `now`, with
/// `signing` as `bcd node` would find it.
pub fn expired_advice(
    loaded: &LoadedIdentity,
    signing: &SigningKey,
    now: OffsetDateTime,
) -> (Recovery, String) {
    let not_after = loaded.leaf.not_after;
    let expired =
        format!(
        "the certificate of {} expired at {} by this machine's clock (bcd doctor's clock checks \
         compare it with the server's); an expired certificate cannot be renewed",
        loaded.describe(),
        not_after.format(&Rfc3339).unwrap_or_else(|_| not_after.to_string())
    );
    match signing {
        SigningKey::NotSet => (
            Recovery::Join,
            format!(
                "{expired}, and bcd node cannot re-join by x509pop: join_signing_key_pin is not \
                 set, so no answer could be verified; {WAY_BACK}"
            ),
        ),
        SigningKey::Unloadable(why) => (
            Recovery::X509pop,
            format!(
                "{expired}; bcd node does not start until its join signing key loads ({why}); \
                 once it does, bcd node re-joins by x509pop from the identity on disk by itself \
                 (no token, no reset)"
            ),
        ),
        SigningKey::Loads if now - not_after > default_grace() => (
            Recovery::Join,
            format!(
                "{expired}; bcd node tries to re-join by x509pop, but the certificate expired \
                 more than the control plane's default grace (7 days) ago, so the re-join is \
                 refused (x509pop:expired-beyond-grace) unless its [attestors.x509pop] grace was \
                 raised; {WAY_BACK}"
            ),
        ),
        SigningKey::Loads => (
            Recovery::X509pop,
            format!(
                "{expired}; bcd node re-joins by x509pop from the identity on disk by itself (no \
                 token, no reset): a running bcd node does it now, a stopped one when it starts \
                 (systemctl start bcd)"
            ),
        ),
    }
}
