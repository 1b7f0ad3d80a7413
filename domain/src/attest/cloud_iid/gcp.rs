//! GCP's instance identity token (`format=full`): an RS256 JWT from Google, verified against
//! the configured JWKS (Google's `oauth2/v3/certs`), issued by `https://accounts.google.com`
//! for the configured audience, naming the instance in its `google.compute_engine` claims
//! (`project_id` is the account, `instance_id` the instance).

use super::config::GcpConfig;
use super::instance::CloudIdentity;
use super::jwt;
use super::refusal::CloudIidRefusal;
use super::wire::CloudProvider;

/// The issuers Google's identity tokens carry.
pub const GOOGLE_ISSUERS: [&str; 2] = ["https://accounts.google.com", "accounts.google.com"];

/// Verifies a GCP identity token.
pub fn verify(
    token: &str,
    config: &GcpConfig,
    now_us: i64,
) -> Result<CloudIdentity, CloudIidRefusal> {
    let jwks = jwt::parse_jwks(&config.jwks).ok_or(CloudIidRefusal::Signature)?;
    let claims = jwt::verify(token, &jwks)?;
    let issuer = jwt::string_claim(&claims, "iss")?;
    if !GOOGLE_ISSUERS.contains(&issuer) {
        return Err(CloudIidRefusal::WrongIssuer);
    }
    if !jwt::has_audience(&claims, &config.audience) {
        return Err(CloudIidRefusal::WrongAudience);
    }
    let issued_at_us = jwt::issued_at_us(&claims, now_us)?;
    let engine = claims
        .get("google")
        .and_then(|g| g.get("compute_engine"))
        .ok_or(CloudIidRefusal::Malformed)?;
    let field = |name: &str| {
        engine
            .get(name)
            .and_then(serde_json::Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .ok_or(CloudIidRefusal::Malformed)
    };
    Ok(CloudIdentity {
        provider: CloudProvider::Gcp,
        account: field("project_id")?,
        instance: field("instance_id")?,
        issued_at_us,
    })
}
