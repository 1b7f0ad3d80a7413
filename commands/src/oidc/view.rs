//! What the key commands answer: a key as `oidc keys list` prints it.

use domain::oidc::{IssuerKey, KeyState};
use projections::oidc_keys::OidcKeyRow;
use serde::Serialize;

use super::error::OidcError;

/// One key of the issuer (never its private half).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OidcKeyView {
    /// Its id (RFC 7638 thumbprint; the tokens' `kid`).
    pub kid: String,
    /// `added`, `signing`, `stopped` or `retired`.
    pub state: &'static str,
    /// Whether the JWK Set holds it.
    pub published: bool,
    /// When it was added, µs since the epoch.
    pub added_at_us: i64,
    /// When it was last promoted.
    pub promoted_at_us: Option<i64>,
    /// When it stopped signing.
    pub stopped_at_us: Option<i64>,
    /// When it was retired.
    pub retired_at_us: Option<i64>,
    /// The earliest time `retire` accepts it (none while it signs, or once retired).
    pub retirable_at_us: Option<i64>,
}

impl OidcKeyView {
    /// The view of a row.
    pub fn of(row: &OidcKeyRow) -> Result<OidcKeyView, OidcError> {
        let key = issuer_key(row)?;
        Ok(OidcKeyView {
            kid: row.kid.clone(),
            state: key.state.name(),
            published: key.state.published(),
            added_at_us: row.added_at_us,
            promoted_at_us: row.promoted_at_us,
            stopped_at_us: row.stopped_at_us,
            retired_at_us: row.retired_at_us,
            retirable_at_us: key.retirable_at_us().map(|at| at.max(row.added_at_us)),
        })
    }

    /// Whether this key signs.
    pub fn signs(&self) -> bool {
        self.state == KeyState::Signing.name()
    }
}

/// A row as the deciders read it.
pub(crate) fn issuer_key(row: &OidcKeyRow) -> Result<IssuerKey, OidcError> {
    let state = KeyState::parse(&row.state)
        .ok_or_else(|| OidcError::Corrupt(format!("key {} in state {:?}", row.kid, row.state)))?;
    Ok(IssuerKey {
        kid: row.kid.clone(),
        state,
        stopped_at_us: row.stopped_at_us,
    })
}
