//! The issuer's deciders, one test per refusal, and tokens checked against the key's public half.

use serde_json::{Map, Value};

use super::keys::RETIRE_AFTER_STOPPED_US;
use super::*;
use crate::pki::{PublicKey, Signature, TrustDomain};

fn key(kid: &str, state: KeyState, stopped_at_us: Option<i64>) -> IssuerKey {
    IssuerKey {
        kid: kid.into(),
        state,
        stopped_at_us,
    }
}

fn add_of(k: &OidcSigningKey) -> AddKey {
    AddKey {
        kid: k.kid().into(),
        public_key_spki: k.public_key_spki().to_vec(),
        sealed_private_key: vec![1; 64],
    }
}

const MIN: i64 = 60 * 1_000_000;

#[test]
fn add_publishes_a_new_key() {
    let k = OidcSigningKey::generate().expect("key");
    let d = decide_add_key(&add_of(&k), &[]).expect("added");
    assert!(matches!(&d.events[..], [OidcKeyEvent::Added(e)] if e.kid == k.kid()));
}

#[test]
fn add_refuses_an_id_that_is_not_the_thumbprint() {
    let k = OidcSigningKey::generate().expect("key");
    let mut cmd = add_of(&k);
    cmd.kid = "chosen".into();
    assert_eq!(
        decide_add_key(&cmd, &[]).unwrap_err().to_string(),
        "INVALID_INPUT: the key id \"chosen\" is not the public key's RFC 7638 thumbprint"
    );
}

#[test]
fn add_refuses_a_key_that_exists() {
    let k = OidcSigningKey::generate().expect("key");
    let keys = [key(k.kid(), KeyState::Retired, None)];
    assert_eq!(
        decide_add_key(&add_of(&k), &keys).unwrap_err(),
        OidcKeyRefusal::Exists(k.kid().into())
    );
}

#[test]
fn add_refuses_a_ninth_published_key() {
    let keys: Vec<IssuerKey> = (0..8)
        .map(|i| key(&format!("k{i}"), KeyState::Added, None))
        .collect();
    let k = OidcSigningKey::generate().expect("key");
    assert_eq!(
        decide_add_key(&add_of(&k), &keys).unwrap_err(),
        OidcKeyRefusal::TooMany(8)
    );
}

#[test]
fn promote_stops_the_key_that_signed() {
    let keys = [
        key("a", KeyState::Signing, None),
        key("b", KeyState::Added, None),
    ];
    let d = decide_promote_key("b", &keys).expect("promoted");
    assert!(
        matches!(&d.events[..], [OidcKeyEvent::Promoted(e)] if e.kid == "b" && e.previous_kid == "a")
    );
}

#[test]
fn promote_refuses_an_unknown_key() {
    assert_eq!(
        decide_promote_key("x", &[]).unwrap_err().to_string(),
        "NOT_FOUND: no OIDC key x (bcctl oidc keys list)"
    );
}

#[test]
fn promote_refuses_a_retired_key() {
    let keys = [key("a", KeyState::Retired, Some(0))];
    assert_eq!(
        decide_promote_key("a", &keys).unwrap_err(),
        OidcKeyRefusal::PromoteRetired("a".into())
    );
}

#[test]
fn promote_refuses_the_key_that_signs() {
    let keys = [key("a", KeyState::Signing, None)];
    assert_eq!(
        decide_promote_key("a", &keys).unwrap_err(),
        OidcKeyRefusal::AlreadySigning("a".into())
    );
}

#[test]
fn retire_refuses_an_unknown_key() {
    assert_eq!(
        decide_retire_key("x", &[], 0).unwrap_err(),
        OidcKeyRefusal::Unknown("x".into())
    );
}

#[test]
fn retire_refuses_the_signing_key() {
    let keys = [key("a", KeyState::Signing, None)];
    assert_eq!(
        decide_retire_key("a", &keys, i64::MAX / 2).unwrap_err(),
        OidcKeyRefusal::RetireSigning("a".into())
    );
}

#[test]
fn retire_refuses_a_retired_key() {
    let keys = [key("a", KeyState::Retired, Some(0))];
    assert_eq!(
        decide_retire_key("a", &keys, i64::MAX / 2).unwrap_err(),
        OidcKeyRefusal::AlreadyRetired("a".into())
    );
}

#[test]
fn retire_refuses_until_fifteen_minutes_and_a_minute_after_it_stopped() {
    let stopped = 1_000 * MIN;
    let keys = [key("a", KeyState::Stopped, Some(stopped))];
    assert_eq!(RETIRE_AFTER_STOPPED_US, 16 * MIN);
    let refused = decide_retire_key("a", &keys, stopped + 16 * MIN - 1).unwrap_err();
    assert_eq!(
        refused,
        OidcKeyRefusal::TooSoon {
            kid: "a".into(),
            stopped_secs_ago: 959,
            wait_secs: 1
        }
    );
    assert!(refused.to_string().starts_with(
        "INVALID_STATE: OIDC key a stopped signing 959 s ago; a token it signed may be valid for up to 900 s after that: retire it in 1 s or later"
    ));
    let d = decide_retire_key("a", &keys, stopped + 16 * MIN).expect("retired");
    assert!(matches!(&d.events[..], [OidcKeyEvent::Retired(e)] if e.kid == "a"));
}

#[test]
fn a_key_that_never_signed_retires_at_once() {
    let keys = [key("a", KeyState::Added, None)];
    assert!(decide_retire_key("a", &keys, 0).is_ok());
}

#[test]
fn overdue_is_a_day_past_the_window() {
    let keys = [
        key("a", KeyState::Stopped, Some(0)),
        key("b", KeyState::Signing, None),
    ];
    let day = 24 * 60 * MIN;
    assert!(overdue_keys(&keys, 16 * MIN + day - 1).is_empty());
    assert_eq!(overdue_keys(&keys, 16 * MIN + day)[0].kid, "a");
}

fn facts() -> IssuerFacts {
    IssuerFacts {
        issuer: "https://id.example.com/oidc".into(),
        default_audience: "sts.amazonaws.com".into(),
        trust_domain: TrustDomain::new("example.com").expect("td"),
    }
}

const NODE: &str = "spiffe://example.com/site/s1/node/n1";

fn request(lifetime_secs: u64) -> TokenRequest {
    TokenRequest {
        subject: NODE.into(),
        audience: None,
        lifetime_secs,
        extra: Map::new(),
    }
}

fn b64url_json(part: &str) -> Value {
    let bytes = crate::pki::encoding::b64url_decode(part).expect("base64url");
    serde_json::from_slice(&bytes).expect("json")
}

#[test]
fn a_token_carries_the_registered_claims_and_verifies_with_the_key() {
    let k = OidcSigningKey::generate().expect("key");
    let mut req = request(300);
    req.extra.insert("node_id".into(), "n1".into());
    let decided = decide_token(&req, &facts(), Some(k.kid()), 1_000, "jti-1").expect("token");
    let jwt = sign_token(&decided, &k).expect("signed");
    let parts: Vec<&str> = jwt.split('.').collect();
    assert_eq!(parts.len(), 3);
    let header = b64url_json(parts[0]);
    assert_eq!(header["alg"], "ES256");
    assert_eq!(header["kid"], k.kid());
    let claims = b64url_json(parts[1]);
    assert_eq!(claims["iss"], "https://id.example.com/oidc");
    assert_eq!(claims["sub"], NODE);
    assert_eq!(claims["aud"], "sts.amazonaws.com");
    assert_eq!(
        (claims["iat"].as_i64(), claims["nbf"].as_i64()),
        (Some(1_000), Some(1_000))
    );
    assert_eq!(claims["exp"], 1_300);
    assert_eq!(claims["jti"], "jti-1");
    assert_eq!(claims["node_id"], "n1");
    let sig = crate::pki::encoding::b64url_decode(parts[2]).expect("sig");
    let sig = Signature::from_bytes(&sig).expect("64 bytes");
    let public = PublicKey::from_spki_der(k.public_key_spki()).expect("public");
    let input = format!("{}.{}", parts[0], parts[1]);
    assert!(public.verify_es256(input.as_bytes(), &sig));
}

#[test]
fn a_workload_subject_and_a_named_audience_pass() {
    let mut req = request(60);
    req.subject = format!("{NODE}/workload/web");
    req.audience = Some("vault".into());
    let d = decide_token(&req, &facts(), Some("k"), 0, "j").expect("token");
    assert_eq!(d.claims["aud"], "vault");
}

#[test]
fn a_lifetime_outside_sixty_to_nine_hundred_seconds_is_refused() {
    for secs in [59, 901] {
        assert_eq!(
            decide_token(&request(secs), &facts(), Some("k"), 0, "j").unwrap_err(),
            TokenRefusal::Lifetime(secs)
        );
    }
    assert!(decide_token(&request(900), &facts(), Some("k"), 0, "j").is_ok());
}

#[test]
fn an_extra_claim_may_not_shadow_a_registered_one() {
    for name in ["iss", "sub", "aud", "iat", "nbf", "exp", "jti"] {
        let mut req = request(60);
        req.extra.insert(name.into(), "x".into());
        assert_eq!(
            decide_token(&req, &facts(), Some("k"), 0, "j").unwrap_err(),
            TokenRefusal::Shadowed(name.into())
        );
    }
}

#[test]
fn a_subject_that_is_no_spiffe_id_of_the_trust_domain_is_refused() {
    for sub in [
        "node-1",
        "spiffe://other.org/site/s1/node/n1",
        "spiffe://example.com/site/s1/node/n1/workload/",
        "spiffe://example.com/workload/web",
    ] {
        let mut req = request(60);
        req.subject = sub.into();
        assert!(
            matches!(decide_token(&req, &facts(), Some("k"), 0, "j"), Err(TokenRefusal::Subject(s, _)) if s == sub),
            "{sub}"
        );
    }
}

#[test]
fn an_empty_audience_is_refused() {
    let mut req = request(60);
    req.audience = Some(String::new());
    assert_eq!(
        decide_token(&req, &facts(), Some("k"), 0, "j").unwrap_err(),
        TokenRefusal::Audience
    );
}

#[test]
fn no_token_without_a_signing_key() {
    assert_eq!(
        decide_token(&request(60), &facts(), None, 0, "j").unwrap_err(),
        TokenRefusal::NoSigningKey
    );
}

#[test]
fn the_signer_must_be_the_key_the_header_names() {
    let k = OidcSigningKey::generate().expect("key");
    let d = decide_token(&request(60), &facts(), Some("other"), 0, "j").expect("token");
    assert!(matches!(
        sign_token(&d, &k),
        Err(SignError::WrongKey { .. })
    ));
}

#[test]
fn the_issuer_url_is_https_without_query_fragment_or_trailing_slash() {
    let ok = IssuerUrl::parse("https://id.example.com/oidc").expect("ok");
    assert_eq!(
        ok.discovery_path(),
        "/oidc/.well-known/openid-configuration"
    );
    assert_eq!(
        ok.jwks_uri(),
        "https://id.example.com/oidc/.well-known/jwks.json"
    );
    assert!(ok.on_443());
    assert!(!IssuerUrl::parse("https://127.0.0.1:8446")
        .expect("port")
        .on_443());
    assert_eq!(
        IssuerUrl::parse("https://h").expect("bare").jwks_path(),
        "/.well-known/jwks.json"
    );
    for bad in [
        "http://id.example.com",
        "https://id.example.com/?a=1",
        "https://id.example.com/#f",
        "https://id.example.com/",
        "https://user@id.example.com",
        "https://id.example.com:x",
    ] {
        assert!(IssuerUrl::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn the_documents_name_the_issuer_and_the_published_keys() {
    let issuer = IssuerUrl::parse("https://id.example.com").expect("issuer");
    let d = discovery_document(&issuer);
    assert_eq!(
        d["jwks_uri"],
        "https://id.example.com/.well-known/jwks.json"
    );
    assert_eq!(d["id_token_signing_alg_values_supported"][0], "ES256");
    let k = OidcSigningKey::generate().expect("key");
    let jwks = jwks_document(&[(k.kid().into(), k.public_key_spki().to_vec())]);
    assert_eq!(jwks["keys"][0]["kid"], k.kid());
    assert_eq!(jwks["keys"][0]["crv"], "P-256");
    assert!(jwks["keys"][0].get("d").is_none());
}
