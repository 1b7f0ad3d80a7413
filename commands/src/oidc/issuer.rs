//! The issuer at work: minting a token with the promoted key ([`OidcIssuer::mint`]) and the
//! documents relying parties read ([`publication`]).
//!
//! An issuer reads which key signs from `oidc_keys` at most once per [`PROMOTION_CHECK`] and
//! opens a newly promoted key's sealed private half with the deployment secret (one Argon2id
//! run, off the async threads), so every api replica signs with a promoted key within about a
//! second, without a restart. The minute the retire window adds to the longest token covers
//! that second: a replica still signing with the key that stopped does so for at most
//! [`PROMOTION_CHECK`] after the promotion.

use std::sync::Arc;
use std::time::{Duration, Instant};

use domain::oidc::{
    decide_token, discovery_document, jwks_document, sign_token, IssuerFacts, IssuerUrl,
    OidcSigningKey, TokenRefusal, TokenRequest,
};
use domain::pki::{DeploymentSecret, TrustDomain};
use events::store::EventStore;
use projections::oidc_keys::{published_keys_in, signing_key_row_in};
use rand_core::RngCore;
use tokio::sync::Mutex;

use super::error::OidcError;
use crate::clock::Clock;

/// How long an issuer trusts its last reading of which key signs.
pub const PROMOTION_CHECK: Duration = Duration::from_secs(1);

/// The issuer's configuration (`[oidc]` of `bcctl serve`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OidcSettings {
    /// The issuer URL (every token's `iss`).
    pub issuer: IssuerUrl,
    /// The audience of a token whose request names none.
    pub default_audience: String,
}

/// The JWK Set of the published keys, read now (what the gateway serves on every request).
pub async fn jwks(store: &EventStore) -> Result<serde_json::Value, OidcError> {
    Ok(jwks_document(&published_keys_in(store).await?))
}

/// The discovery document and the JWK Set of the published keys, read now.
pub async fn publication(
    store: &EventStore,
    issuer: &IssuerUrl,
) -> Result<(serde_json::Value, serde_json::Value), OidcError> {
    Ok((discovery_document(issuer), jwks(store).await?))
}

/// A token minted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MintedToken {
    /// The JWS compact serialization.
    pub jwt: String,
    /// The key that signed it.
    pub kid: String,
    /// Its `jti`.
    pub jti: String,
    /// Its `exp`, seconds since the epoch.
    pub expires_at: i64,
}

/// The key that signed last time it was read, and when that was.
struct Reading {
    at: Instant,
    key: Option<Arc<OidcSigningKey>>,
}

/// Mints tokens with the promoted key (one per api process).
pub struct OidcIssuer {
    store: EventStore,
    clock: Arc<dyn Clock>,
    secret: Arc<DeploymentSecret>,
    facts: IssuerFacts,
    reading: Mutex<Option<Reading>>,
}

impl OidcIssuer {
    /// An issuer over `store` on `clock`, opening keys with `secret`, for the deployment's
    /// trust domain `trust_domain`.
    pub fn new(
        store: EventStore,
        clock: Arc<dyn Clock>,
        secret: DeploymentSecret,
        settings: &OidcSettings,
        trust_domain: TrustDomain,
    ) -> Self {
        OidcIssuer {
            store,
            clock,
            secret: Arc::new(secret),
            facts: IssuerFacts {
                issuer: settings.issuer.as_str().to_owned(),
                default_audience: settings.default_audience.clone(),
                trust_domain,
            },
            reading: Mutex::new(None),
        }
    }

    /// Mints a token for `request` with the key that signs now.
    pub async fn mint(&self, request: &TokenRequest) -> Result<MintedToken, OidcError> {
        let key = self.signing_key().await?;
        let now_secs = self.clock.now_us().div_euclid(1_000_000);
        let mut id = [0u8; 16];
        rand_core::OsRng.fill_bytes(&mut id);
        let jti = hex::encode(id);
        let kid = key.as_ref().map(|k| k.kid());
        let decided = decide_token(request, &self.facts, kid, now_secs, &jti)?;
        let key = key.ok_or(TokenRefusal::NoSigningKey)?;
        let jwt = sign_token(&decided, key.as_ref())?;
        Ok(MintedToken {
            jwt,
            kid: key.kid().to_owned(),
            jti,
            expires_at: decided.expires_at,
        })
    }

    /// The key that signs: the last reading while younger than [`PROMOTION_CHECK`] and naming
    /// a key, else read again (and a newly promoted key opened).
    async fn signing_key(&self) -> Result<Option<Arc<OidcSigningKey>>, OidcError> {
        let mut reading = self.reading.lock().await;
        // A reading of "no key signs" is not kept: the first promotion signs at once.
        if let Some(r) = reading
            .as_ref()
            .filter(|r| r.key.is_some() && r.at.elapsed() < PROMOTION_CHECK)
        {
            return Ok(r.key.clone());
        }
        let held = reading.as_ref().and_then(|r| r.key.clone());
        let key = match signing_key_row_in(&self.store).await? {
            None => None,
            Some(row) => match held.filter(|k| k.kid() == row.kid) {
                Some(k) => Some(k),
                None => {
                    let secret = self.secret.clone();
                    let opened = tokio::task::spawn_blocking(move || {
                        OidcSigningKey::open(
                            &row.sealed_private_key,
                            &secret,
                            &row.kid,
                            &row.public_key_spki,
                        )
                    })
                    .await
                    .map_err(|e| OidcError::Corrupt(format!("opening the key failed: {e}")))??;
                    Some(Arc::new(opened))
                }
            },
        };
        *reading = Some(Reading {
            at: Instant::now(),
            key: key.clone(),
        });
        Ok(key)
    }
}
