//! JWT and JWKS verification for the token providers (GCP, OIDC), on `jsonwebtoken`: the key
//! is chosen by the header's `kid` from the configured JWKS (a set of one key may omit it), only
//! asymmetric algorithms are accepted, and the claims are returned for the provider's own
//! checks. Time claims are checked here against the request's clock, never the system's.

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;

use super::refusal::CloudIidRefusal;

/// How far in the future a document's issue time (or a token's `nbf`) may be (clock skew). Here,
/// beside the token checks, rather than in `config` (which reads the JWKS with this module): no
/// import circle.
pub const MAX_FUTURE_SKEW: std::time::Duration = std::time::Duration::from_secs(60);

/// The algorithms a token may be signed with (no `HS*`: a shared secret proves nothing here).
const ALGORITHMS: [Algorithm; 9] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// A JWKS with at least one key, or `None`.
pub fn parse_jwks(json: &[u8]) -> Option<JwkSet> {
    let set: JwkSet = serde_json::from_slice(json).ok()?;
    (!set.keys.is_empty()).then_some(set)
}

/// Verifies `token`'s signature under `jwks` and returns its claims.
pub fn verify(
    token: &str,
    jwks: &JwkSet,
) -> Result<serde_json::Map<String, Value>, CloudIidRefusal> {
    let header = jsonwebtoken::decode_header(token).map_err(|_| CloudIidRefusal::Malformed)?;
    if !ALGORITHMS.contains(&header.alg) {
        return Err(CloudIidRefusal::Signature);
    }
    let jwk = match &header.kid {
        Some(kid) => jwks.find(kid),
        None if jwks.keys.len() == 1 => jwks.keys.first(),
        None => None,
    }
    .ok_or(CloudIidRefusal::Signature)?;
    let key = DecodingKey::from_jwk(jwk).map_err(|_| CloudIidRefusal::Signature)?;
    let mut validation = Validation::new(header.alg);
    validation.validate_exp = false;
    validation.validate_nbf = false;
    validation.validate_aud = false;
    validation.required_spec_claims.clear();
    let data = jsonwebtoken::decode::<serde_json::Map<String, Value>>(token, &key, &validation)
        .map_err(|e| {
            use jsonwebtoken::errors::ErrorKind as K;
            match e.kind() {
                K::InvalidToken | K::Base64(_) | K::Json(_) | K::Utf8(_) => {
                    CloudIidRefusal::Malformed
                }
                _ => CloudIidRefusal::Signature,
            }
        })?;
    Ok(data.claims)
}

/// The string claim `name`, or `malformed`.
pub fn string_claim<'a>(
    claims: &'a serde_json::Map<String, Value>,
    name: &str,
) -> Result<&'a str, CloudIidRefusal> {
    claims
        .get(name)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or(CloudIidRefusal::Malformed)
}

/// Whether the token's `aud` (a string or an array of strings) names `audience`.
pub fn has_audience(claims: &serde_json::Map<String, Value>, audience: &str) -> bool {
    match claims.get("aud") {
        Some(Value::String(a)) => a == audience,
        Some(Value::Array(all)) => all.iter().any(|a| a.as_str() == Some(audience)),
        _ => false,
    }
}

/// `iat` in µs (`malformed` without one), after refusing a token whose `exp` has passed at
/// `now_us` (`document-too-old`) or whose `nbf` (RFC 7519 section 4.1.5) is more than
/// [`MAX_FUTURE_SKEW`] ahead of it (`document-from-future`): a token not valid yet must not
/// spend the instance's one join.
pub fn issued_at_us(
    claims: &serde_json::Map<String, Value>,
    now_us: i64,
) -> Result<i64, CloudIidRefusal> {
    let seconds = |name: &str| claims.get(name).and_then(Value::as_i64);
    let iat = seconds("iat").ok_or(CloudIidRefusal::Malformed)?;
    if let Some(exp) = seconds("exp") {
        if exp.saturating_mul(1_000_000) <= now_us {
            return Err(CloudIidRefusal::DocumentTooOld);
        }
    }
    if let Some(nbf) = seconds("nbf") {
        let skew_us = i64::try_from(MAX_FUTURE_SKEW.as_micros()).unwrap_or(i64::MAX);
        if nbf.saturating_mul(1_000_000) > now_us.saturating_add(skew_us) {
            return Err(CloudIidRefusal::DocumentFromFuture);
        }
    }
    Ok(iat.saturating_mul(1_000_000))
}
