//! Any OIDC issuer's token: the configured issuer whose `issuer` is the token's `iss`
//! (`wrong-issuer` when none is), verified against that issuer's JWKS, for its audience. The
//! account is the issuer, the instance the token's `sub`.

use super::config::OidcIssuerConfig;
use super::instance::CloudIdentity;
use super::jwt;
use super::refusal::CloudIidRefusal;
use super::wire::CloudProvider;

/// The `iss` of a token, read before its signature is checked, only to choose the keys.
fn unverified_issuer(token: &str) -> Result<String, CloudIidRefusal> {
    use base64::Engine as _;
    let mut parts = token.split('.');
    let (Some(_), Some(payload), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(CloudIidRefusal::Malformed);
    };
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .map_err(|_| CloudIidRefusal::Malformed)?;
    let claims: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&bytes).map_err(|_| CloudIidRefusal::Malformed)?;
    jwt::string_claim(&claims, "iss").map(str::to_owned)
}

/// Verifies an OIDC token against the configured issuers.
pub fn verify(
    token: &str,
    issuers: &[OidcIssuerConfig],
    now_us: i64,
) -> Result<CloudIdentity, CloudIidRefusal> {
    let iss = unverified_issuer(token)?;
    let issuer = issuers
        .iter()
        .find(|i| i.issuer == iss)
        .ok_or(CloudIidRefusal::WrongIssuer)?;
    let jwks = jwt::parse_jwks(&issuer.jwks).ok_or(CloudIidRefusal::Signature)?;
    let claims = jwt::verify(token, &jwks)?;
    // The signed `iss` must be the one that chose the keys.
    if jwt::string_claim(&claims, "iss")? != issuer.issuer {
        return Err(CloudIidRefusal::WrongIssuer);
    }
    if !jwt::has_audience(&claims, &issuer.audience) {
        return Err(CloudIidRefusal::WrongAudience);
    }
    let issued_at_us = jwt::issued_at_us(&claims, now_us)?;
    Ok(CloudIdentity {
        provider: CloudProvider::Oidc,
        account: issuer.issuer.clone(),
        instance: jwt::string_claim(&claims, "sub")?.to_owned(),
        issued_at_us,
    })
}
