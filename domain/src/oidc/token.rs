//! Workload tokens: the claims rules and ES256 signing (JWS compact serialization, RFC 7515;
//! ES256 per RFC 7518 section 3.4), pure. The signer is injected ([`JwsSigner`]): the shell
//! passes the promoted key it opened, a test a key of its own.
//!
//! Rules (spec 003, "Workload identity"): the token carries `iss`, `sub`, `aud`, `iat`, `nbf`,
//! `exp` and `jti`; it lives [`MIN_LIFETIME_SECS`] to [`MAX_LIFETIME_SECS`] seconds; extra
//! claims may not shadow the registered ones; `sub` is a SPIFFE ID of the issuer's trust domain
//! (a node's, or one of its workloads': `…/node/<id>/workload/<name>`); the header names the
//! promoted key (`kid`), `alg` `ES256`, `typ` `JWT`.

use serde_json::{Map, Value};

use crate::pki::encoding::b64url;
use crate::pki::{SpiffeId, TrustDomain};
use crate::plain_id::plain_id_problem;

/// The shortest token, seconds.
pub const MIN_LIFETIME_SECS: u64 = 60;
/// The longest token, seconds (15 minutes).
pub const MAX_LIFETIME_SECS: u64 = 900;
/// The claims the issuer sets and extra claims may not shadow.
pub const REGISTERED_CLAIMS: [&str; 7] = ["iss", "sub", "aud", "iat", "nbf", "exp", "jti"];
/// The longest audience, characters.
pub const MAX_AUDIENCE_CHARS: usize = 512;

/// Signs a JWS signing input with the issuer's promoted key.
pub trait JwsSigner {
    /// The key id the header names.
    fn kid(&self) -> &str;
    /// The ES256 signature (`r || s`) over `input`.
    fn sign_es256(&self, input: &[u8]) -> Result<[u8; 64], String>;
}

impl JwsSigner for super::seal::OidcSigningKey {
    fn kid(&self) -> &str {
        super::seal::OidcSigningKey::kid(self)
    }
    fn sign_es256(&self, input: &[u8]) -> Result<[u8; 64], String> {
        super::seal::OidcSigningKey::sign_es256(self, input)
    }
}

/// What a token is asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenRequest {
    /// `sub`: a SPIFFE ID of the issuer's trust domain.
    pub subject: String,
    /// `aud`; `None`: the issuer's default audience.
    pub audience: Option<String>,
    /// How long it lives, seconds.
    pub lifetime_secs: u64,
    /// Claims beside the registered ones (none may shadow them).
    pub extra: Map<String, Value>,
}

/// The issuer as the shell configured it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuerFacts {
    /// `iss`: the issuer URL.
    pub issuer: String,
    /// The audience when a request names none.
    pub default_audience: String,
    /// The deployment's trust domain: every `sub` is in it.
    pub trust_domain: TrustDomain,
}

/// Why a token was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenRefusal {
    /// The lifetime is outside 60 to 900 seconds.
    #[error("INVALID_INPUT: a workload token lives {MIN_LIFETIME_SECS} to {MAX_LIFETIME_SECS} seconds; {0} asked")]
    Lifetime(u64),
    /// An extra claim has a registered claim's name.
    #[error("INVALID_INPUT: extra claim {0:?} would shadow a registered claim (iss, sub, aud, iat, nbf, exp, jti)")]
    Shadowed(String),
    /// `sub` is not a SPIFFE ID of the trust domain.
    #[error(
        "INVALID_INPUT: subject {0:?} is not a node's or workload's SPIFFE ID in trust domain {1}"
    )]
    Subject(String, String),
    /// The audience is empty or too long.
    #[error("INVALID_INPUT: the audience must be 1 to {MAX_AUDIENCE_CHARS} characters")]
    Audience,
    /// No key signs.
    #[error("UNAVAILABLE: no OIDC key signs: add one and promote it (bcctl oidc keys add, bcctl oidc keys promote KID)")]
    NoSigningKey,
}

/// A token decided: its header and claims (before signing).
#[derive(Debug, Clone, PartialEq)]
pub struct TokenClaims {
    /// The header: `alg`, `typ`, `kid`.
    pub header: Map<String, Value>,
    /// The claims.
    pub claims: Map<String, Value>,
    /// `exp`, seconds since the epoch.
    pub expires_at: i64,
}

/// Checks `subject` is a node's SPIFFE ID in `td`, or a workload's under one.
fn check_subject(subject: &str, td: &TrustDomain) -> Result<(), TokenRefusal> {
    let bad = || TokenRefusal::Subject(subject.to_owned(), td.to_string());
    let node_part = match subject.rsplit_once("/workload/") {
        Some((node, name)) => {
            if plain_id_problem("workload", name).is_some() {
                return Err(bad());
            }
            node
        }
        None => subject,
    };
    let id = SpiffeId::parse(node_part).map_err(|_| bad())?;
    if id.trust_domain != *td {
        return Err(bad());
    }
    Ok(())
}

/// Decides a token at `now_secs` (seconds since the epoch) with the key `kid` that signs (if
/// one does); `jti` is the shell's fresh id.
pub fn decide_token(
    request: &TokenRequest,
    facts: &IssuerFacts,
    kid: Option<&str>,
    now_secs: i64,
    jti: &str,
) -> Result<TokenClaims, TokenRefusal> {
    if !(MIN_LIFETIME_SECS..=MAX_LIFETIME_SECS).contains(&request.lifetime_secs) {
        return Err(TokenRefusal::Lifetime(request.lifetime_secs));
    }
    if let Some(name) = request
        .extra
        .keys()
        .find(|k| REGISTERED_CLAIMS.contains(&k.as_str()))
    {
        return Err(TokenRefusal::Shadowed(name.clone()));
    }
    check_subject(&request.subject, &facts.trust_domain)?;
    let audience = request
        .audience
        .clone()
        .unwrap_or_else(|| facts.default_audience.clone());
    if audience.is_empty() || audience.chars().count() > MAX_AUDIENCE_CHARS {
        return Err(TokenRefusal::Audience);
    }
    let kid = kid.ok_or(TokenRefusal::NoSigningKey)?;
    let exp = now_secs + request.lifetime_secs as i64;
    let mut header = Map::new();
    header.insert("alg".into(), "ES256".into());
    header.insert("typ".into(), "JWT".into());
    header.insert("kid".into(), kid.into());
    let mut claims = Map::new();
    claims.insert("iss".into(), facts.issuer.clone().into());
    claims.insert("sub".into(), request.subject.clone().into());
    claims.insert("aud".into(), audience.into());
    claims.insert("iat".into(), now_secs.into());
    claims.insert("nbf".into(), now_secs.into());
    claims.insert("exp".into(), exp.into());
    claims.insert("jti".into(), jti.into());
    for (k, v) in &request.extra {
        claims.insert(k.clone(), v.clone());
    }
    Ok(TokenClaims {
        header,
        claims,
        expires_at: exp,
    })
}

/// Why a decided token could not be signed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignError {
    /// The signer is not the key the header names.
    #[error("the signer is key {signer}, the token names key {header}")]
    WrongKey {
        /// The header's `kid`.
        header: String,
        /// The signer's.
        signer: String,
    },
    /// The signer failed.
    #[error("{0}")]
    Signer(String),
}

/// Signs a decided token with `signer`: `b64url(header) . b64url(claims) . b64url(r || s)`.
pub fn sign_token(token: &TokenClaims, signer: &dyn JwsSigner) -> Result<String, SignError> {
    let header_kid = token
        .header
        .get("kid")
        .and_then(Value::as_str)
        .unwrap_or("");
    if header_kid != signer.kid() {
        return Err(SignError::WrongKey {
            header: header_kid.to_owned(),
            signer: signer.kid().to_owned(),
        });
    }
    let encode = |m: &Map<String, Value>| b64url(Value::Object(m.clone()).to_string().as_bytes());
    let input = format!("{}.{}", encode(&token.header), encode(&token.claims));
    let signature = signer
        .sign_es256(input.as_bytes())
        .map_err(SignError::Signer)?;
    Ok(format!("{input}.{}", b64url(&signature)))
}
