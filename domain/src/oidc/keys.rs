//! The OIDC issuer's signing keys and their life, pure: add (published, not signing), promote
//! (signs from now on; the key that signed before stops), retire (leaves the JWKS). A key that
//! signed may be retired only once every token it could have signed has expired: the longest
//! token ([`super::token::MAX_LIFETIME_SECS`], 15 minutes) plus a minute after it stopped
//! signing ([`RETIRE_AFTER_STOPPED_US`]). A key that never signed may be retired at once; the
//! key that signs never (promote another first).
//!
//! The shell loads every key as an [`IssuerKey`] (from the `oidc_keys` projection) and appends
//! what a decider returns to the `oidc-issuer` stream at the version it read.

use events::schema::{OidcKeyAdded, OidcKeyPromoted, OidcKeyRetired};

use crate::decision::Decision;

use super::jwk::{jwk_thumbprint, p256_xy};
use super::token::MAX_LIFETIME_SECS;

/// How long after a key stopped signing it may be retired: the longest token plus one minute.
pub const RETIRE_AFTER_STOPPED_US: i64 = (MAX_LIFETIME_SECS as i64 + 60) * 1_000_000;

/// The most keys published (not retired) at once: a rotation needs two; more is a key left
/// behind.
pub const MAX_PUBLISHED_KEYS: usize = 8;

/// Where a key is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyState {
    /// Added: published in the JWKS, has never signed.
    Added,
    /// The one key that signs.
    Signing,
    /// Signed once, does no longer; still published until retired.
    Stopped,
    /// Retired: out of the JWKS for good.
    Retired,
}

impl KeyState {
    /// The name the projection and the CLI use.
    pub fn name(self) -> &'static str {
        match self {
            KeyState::Added => "added",
            KeyState::Signing => "signing",
            KeyState::Stopped => "stopped",
            KeyState::Retired => "retired",
        }
    }

    /// The state a projection row names.
    pub fn parse(name: &str) -> Option<KeyState> {
        [
            KeyState::Added,
            KeyState::Signing,
            KeyState::Stopped,
            KeyState::Retired,
        ]
        .into_iter()
        .find(|s| s.name() == name)
    }

    /// Whether the key is in the JWKS.
    pub fn published(self) -> bool {
        self != KeyState::Retired
    }
}

/// One key as the shell loaded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuerKey {
    /// The key id (its RFC 7638 thumbprint).
    pub kid: String,
    /// Where it is in its life.
    pub state: KeyState,
    /// When it stopped signing (another key was promoted), µs since the epoch.
    pub stopped_at_us: Option<i64>,
}

impl IssuerKey {
    /// The earliest time it may be retired (µs since the epoch): `None` while it signs (never)
    /// or once retired; the addition's time does not matter for a key that never signed (0).
    pub fn retirable_at_us(&self) -> Option<i64> {
        match self.state {
            KeyState::Added => Some(0),
            KeyState::Stopped => Some(
                self.stopped_at_us
                    .unwrap_or(0)
                    .saturating_add(RETIRE_AFTER_STOPPED_US),
            ),
            KeyState::Signing | KeyState::Retired => None,
        }
    }
}

/// The key that signs, if one does.
pub fn signing_key(keys: &[IssuerKey]) -> Option<&IssuerKey> {
    keys.iter().find(|k| k.state == KeyState::Signing)
}

/// One event of a key decision (all on the `oidc-issuer` stream).
#[derive(Debug, Clone, PartialEq)]
pub enum OidcKeyEvent {
    /// `oidc.key_added`.
    Added(OidcKeyAdded),
    /// `oidc.key_promoted`.
    Promoted(OidcKeyPromoted),
    /// `oidc.key_retired`.
    Retired(OidcKeyRetired),
}

/// Why a key command was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OidcKeyRefusal {
    /// Invalid input; the text says what.
    #[error("INVALID_INPUT: {0}")]
    Invalid(String),
    /// A key of this id exists (retired ones included).
    #[error("ALREADY_EXISTS: OIDC key {0} exists")]
    Exists(String),
    /// Too many keys published.
    #[error("INVALID_STATE: {0} OIDC keys are published (at most {MAX_PUBLISHED_KEYS}): retire one first (bcctl oidc keys retire KID)")]
    TooMany(usize),
    /// No key of this id.
    #[error("NOT_FOUND: no OIDC key {0} (bcctl oidc keys list)")]
    Unknown(String),
    /// A retired key never signs again.
    #[error("INVALID_STATE: OIDC key {0} is retired and never signs again: add a new key (bcctl oidc keys add), then promote it")]
    PromoteRetired(String),
    /// The key signs already.
    #[error("INVALID_STATE: OIDC key {0} signs already")]
    AlreadySigning(String),
    /// The key was retired already.
    #[error("INVALID_STATE: OIDC key {0} is retired already")]
    AlreadyRetired(String),
    /// The key that signs is never retired.
    #[error("INVALID_STATE: OIDC key {0} signs: promote another key first (bcctl oidc keys promote KID), then retire this one once its last token expired")]
    RetireSigning(String),
    /// A token the key signed may still be valid.
    #[error("INVALID_STATE: OIDC key {kid} stopped signing {stopped_secs_ago} s ago; a token it signed may be valid for up to {MAX_LIFETIME_SECS} s after that: retire it in {wait_secs} s or later (15 minutes plus a minute after it stopped signing)")]
    TooSoon {
        /// The key.
        kid: String,
        /// How long ago it stopped signing, whole seconds.
        stopped_secs_ago: i64,
        /// How long until it may be retired, whole seconds (rounded up).
        wait_secs: i64,
    },
}

/// `oidc keys add`: a key the shell generated and sealed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddKey {
    /// Its id, which must be the public key's RFC 7638 thumbprint.
    pub kid: String,
    /// Its public key, SubjectPublicKeyInfo DER.
    pub public_key_spki: Vec<u8>,
    /// Its private key, sealed ([`super::seal`]).
    pub sealed_private_key: Vec<u8>,
}

fn find<'a>(keys: &'a [IssuerKey], kid: &str) -> Result<&'a IssuerKey, OidcKeyRefusal> {
    keys.iter()
        .find(|k| k.kid == kid)
        .ok_or_else(|| OidcKeyRefusal::Unknown(kid.to_owned()))
}

/// Decides `oidc keys add`: the id must be the key's thumbprint, new, and fewer than
/// [`MAX_PUBLISHED_KEYS`] published.
pub fn decide_add_key(
    cmd: &AddKey,
    keys: &[IssuerKey],
) -> Result<Decision<OidcKeyEvent, ()>, OidcKeyRefusal> {
    let (x, y) = p256_xy(&cmd.public_key_spki)
        .ok_or_else(|| OidcKeyRefusal::Invalid("the public key is not a P-256 key".into()))?;
    if jwk_thumbprint(&x, &y) != cmd.kid {
        return Err(OidcKeyRefusal::Invalid(format!(
            "the key id {:?} is not the public key's RFC 7638 thumbprint",
            cmd.kid
        )));
    }
    if cmd.sealed_private_key.is_empty() {
        return Err(OidcKeyRefusal::Invalid(
            "the sealed private key is empty".into(),
        ));
    }
    if keys.iter().any(|k| k.kid == cmd.kid) {
        return Err(OidcKeyRefusal::Exists(cmd.kid.clone()));
    }
    let published = keys.iter().filter(|k| k.state.published()).count();
    if published >= MAX_PUBLISHED_KEYS {
        return Err(OidcKeyRefusal::TooMany(published));
    }
    Ok(Decision::events_only(vec![OidcKeyEvent::Added(
        OidcKeyAdded {
            kid: cmd.kid.clone(),
            public_key_spki: cmd.public_key_spki.clone(),
            sealed_private_key: cmd.sealed_private_key.clone(),
        },
    )]))
}

/// Decides `oidc keys promote KID`: a published key that does not sign yet signs from now on;
/// the key that signed (if any) stops. Promoting a stopped key back is allowed (it is still
/// published, so every verifier has it).
pub fn decide_promote_key(
    kid: &str,
    keys: &[IssuerKey],
) -> Result<Decision<OidcKeyEvent, ()>, OidcKeyRefusal> {
    let key = find(keys, kid)?;
    match key.state {
        KeyState::Retired => return Err(OidcKeyRefusal::PromoteRetired(kid.to_owned())),
        KeyState::Signing => return Err(OidcKeyRefusal::AlreadySigning(kid.to_owned())),
        KeyState::Added | KeyState::Stopped => {}
    }
    let previous_kid = signing_key(keys).map(|k| k.kid.clone()).unwrap_or_default();
    Ok(Decision::events_only(vec![OidcKeyEvent::Promoted(
        OidcKeyPromoted {
            kid: kid.to_owned(),
            previous_kid,
        },
    )]))
}

/// Decides `oidc keys retire KID` at `now_us`: refused for the signing key, a retired one, and
/// a stopped one before [`IssuerKey::retirable_at_us`].
pub fn decide_retire_key(
    kid: &str,
    keys: &[IssuerKey],
    now_us: i64,
) -> Result<Decision<OidcKeyEvent, ()>, OidcKeyRefusal> {
    let key = find(keys, kid)?;
    match key.state {
        KeyState::Retired => return Err(OidcKeyRefusal::AlreadyRetired(kid.to_owned())),
        KeyState::Signing => return Err(OidcKeyRefusal::RetireSigning(kid.to_owned())),
        KeyState::Added | KeyState::Stopped => {}
    }
    let at = key.retirable_at_us().unwrap_or(i64::MAX);
    if now_us < at {
        let stopped = key.stopped_at_us.unwrap_or(now_us);
        return Err(OidcKeyRefusal::TooSoon {
            kid: kid.to_owned(),
            stopped_secs_ago: (now_us - stopped).max(0) / 1_000_000,
            wait_secs: (at - now_us + 999_999) / 1_000_000,
        });
    }
    Ok(Decision::events_only(vec![OidcKeyEvent::Retired(
        OidcKeyRetired {
            kid: kid.to_owned(),
        },
    )]))
}

/// How long after a key became retirable `doctor` calls it overdue: a day. A stopped key left
/// published costs nothing in safety (it signs nothing), but a key left behind is one more
/// secret kept.
pub const OVERDUE_AFTER_US: i64 = 24 * 3600 * 1_000_000;

/// The stopped keys that could have been retired more than [`OVERDUE_AFTER_US`] ago.
pub fn overdue_keys(keys: &[IssuerKey], now_us: i64) -> Vec<&IssuerKey> {
    keys.iter()
        .filter(|k| k.state == KeyState::Stopped)
        .filter(|k| {
            k.retirable_at_us()
                .is_some_and(|at| now_us >= at.saturating_add(OVERDUE_AFTER_US))
        })
        .collect()
}
