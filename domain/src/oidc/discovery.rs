//! What the issuer publishes (OpenID Connect Discovery 1.0 section 3, RFC 7517 section 5): the
//! discovery document at `<issuer path>/.well-known/openid-configuration` and the JWK Set at
//! `<issuer path>/.well-known/jwks.json`, and the rules for the issuer URL.

use super::jwk::public_jwk;

/// The discovery document's path under the issuer's path.
pub const DISCOVERY_SUFFIX: &str = "/.well-known/openid-configuration";
/// The JWK Set's path under the issuer's path.
pub const JWKS_SUFFIX: &str = "/.well-known/jwks.json";
/// How long a relying party may cache either document (`Cache-Control: max-age`), seconds.
pub const CACHE_MAX_AGE_SECS: u64 = 300;

/// The claims every token carries (`claims_supported`).
pub const CLAIMS_SUPPORTED: [&str; 7] = ["iss", "sub", "aud", "iat", "nbf", "exp", "jti"];

/// A checked issuer URL: `https://host[:port][/path]`, no query, fragment or user info, no
/// trailing slash (the `iss` of every token, compared byte for byte by relying parties).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuerUrl {
    url: String,
    path: String,
    port: Option<u16>,
}

impl IssuerUrl {
    /// Checks `url`; the error names what is wrong.
    pub fn parse(url: &str) -> Result<IssuerUrl, String> {
        let rest = url
            .strip_prefix("https://")
            .ok_or_else(|| format!("issuer {url:?} must start with https://"))?;
        if url.contains(['?', '#']) {
            return Err(format!("issuer {url:?} must have no query or fragment"));
        }
        if url.ends_with('/') {
            return Err(format!(
                "issuer {url:?} must not end with '/' (the discovery path is appended to it)"
            ));
        }
        let (authority, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        if authority.is_empty() || authority.contains('@') {
            return Err(format!(
                "issuer {url:?} must name a host, without user info"
            ));
        }
        let port_text = match authority.strip_prefix('[') {
            Some(v6) => v6.split_once(']').and_then(|(_, p)| p.strip_prefix(':')),
            None => authority.split_once(':').map(|(_, p)| p),
        };
        let port = port_text
            .map(|p| {
                p.parse::<u16>()
                    .map_err(|_| format!("issuer {url:?}: port {p:?} is not a number"))
            })
            .transpose()?;
        if path.contains("//") || path.chars().any(|c| c.is_whitespace()) {
            return Err(format!("issuer {url:?}: its path is not a plain path"));
        }
        Ok(IssuerUrl {
            url: url.to_owned(),
            path: path.to_owned(),
            port,
        })
    }

    /// The URL as given.
    pub fn as_str(&self) -> &str {
        &self.url
    }

    /// Its path (empty, or starting with '/').
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Whether the URL is on port 443 (explicitly or by default): the spec asks for it, and
    /// cloud relying parties (AWS IAM) fetch nothing else. Others are accepted (a test, a port
    /// behind a proxy) and `bcctl serve` warns.
    pub fn on_443(&self) -> bool {
        self.port.is_none_or(|p| p == 443)
    }

    /// The discovery document's path on the listener.
    pub fn discovery_path(&self) -> String {
        format!("{}{DISCOVERY_SUFFIX}", self.path)
    }

    /// The JWK Set's path on the listener.
    pub fn jwks_path(&self) -> String {
        format!("{}{JWKS_SUFFIX}", self.path)
    }

    /// The JWK Set's URL (`jwks_uri`).
    pub fn jwks_uri(&self) -> String {
        format!("{}{JWKS_SUFFIX}", self.url)
    }
}

/// The discovery document: what an OIDC relying party reads to find the keys and what the
/// tokens hold.
pub fn discovery_document(issuer: &IssuerUrl) -> serde_json::Value {
    serde_json::json!({
        "issuer": issuer.as_str(),
        "jwks_uri": issuer.jwks_uri(),
        "response_types_supported": ["id_token"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["ES256"],
        "claims_supported": CLAIMS_SUPPORTED,
    })
}

/// The JWK Set of the published keys, `(kid, SPKI DER)` in the order given (the shell passes
/// them in the order they were added). A key that is not P-256 is left out (it never is: the
/// add decider checks it).
pub fn jwks_document(keys: &[(String, Vec<u8>)]) -> serde_json::Value {
    let keys: Vec<serde_json::Value> = keys
        .iter()
        .filter_map(|(kid, spki)| public_jwk(kid, spki))
        .collect();
    serde_json::json!({ "keys": keys })
}
