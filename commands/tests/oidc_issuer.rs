//! Issue 43 items 1 and 2: the OIDC issuer's keys through `OidcKeyAdmin` on both backends (add,
//! promote, retire; the refusals by their exact text, the retire window on a simulated clock),
//! tokens minted with the promoted key and checked against the published JWK Set, the
//! projection rebuilt from the log, and on Postgres two issuers on two pools (two api
//! replicas) signing with a promoted key within seconds, without a restart.

use std::sync::Arc;
use std::time::{Duration, Instant};

use commands::oidc::{publication, OidcError, OidcIssuer, OidcKeyAdmin, OidcSettings};
use commands::SimClock;
use domain::oidc::{IssuerUrl, TokenRequest};
use domain::pki::{Argon2idParams, DeploymentSecret, PublicKey, Signature, TrustDomain};
use events::store::testkit::TestDb;
use events::store::EventStore;

const CHEAP: Argon2idParams = Argon2idParams {
    memory_kib: 64,
    iterations: 1,
    parallelism: 1,
};
const T0: i64 = 1_800_000_000_000_000;
const MINUTE: i64 = 60;

fn secret() -> DeploymentSecret {
    DeploymentSecret::new("an-oidc-test-deployment-secret-of-enough-length").expect("secret")
}

fn settings() -> OidcSettings {
    OidcSettings {
        issuer: IssuerUrl::parse("https://id.example.com/wl").expect("issuer"),
        default_audience: "sts.amazonaws.com".into(),
    }
}

fn issuer(store: &EventStore, clock: &SimClock) -> OidcIssuer {
    OidcIssuer::new(
        store.clone(),
        Arc::new(clock.clone()),
        secret(),
        &settings(),
        TrustDomain::new("example.com").expect("td"),
    )
}

fn request() -> TokenRequest {
    TokenRequest {
        subject: "spiffe://example.com/site/s1/node/n1".into(),
        audience: None,
        lifetime_secs: 300,
        extra: Default::default(),
    }
}

fn refusal<T: std::fmt::Debug>(r: Result<T, OidcError>) -> String {
    match r {
        Err(OidcError::Refused(r)) => r.to_string(),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// Verifies `jwt` with the published JWK Set as a relying party would: the header's `kid`
/// found in the set, the ES256 signature over the first two parts.
async fn verify(store: &EventStore, jwt: &str) -> Result<serde_json::Value, String> {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let (_, jwks) = publication(store, &settings().issuer)
        .await
        .map_err(|e| e.to_string())?;
    let parts: Vec<&str> = jwt.split('.').collect();
    let header: serde_json::Value =
        serde_json::from_slice(&b64.decode(parts[0]).map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    let jwk = jwks["keys"]
        .as_array()
        .and_then(|keys| keys.iter().find(|k| k["kid"] == header["kid"]))
        .ok_or_else(|| format!("kid {} not in the JWK Set", header["kid"]))?;
    let coordinate = |name: &str| {
        b64.decode(jwk[name].as_str().unwrap_or(""))
            .unwrap_or_default()
    };
    let mut point = vec![4u8];
    point.extend(coordinate("x"));
    point.extend(coordinate("y"));
    let key = PublicKey::from_uncompressed_point(&point).map_err(|e| e.to_string())?;
    let sig = Signature::from_bytes(&b64.decode(parts[2]).map_err(|e| e.to_string())?)
        .ok_or("signature length")?;
    if !key.verify_es256(format!("{}.{}", parts[0], parts[1]).as_bytes(), &sig) {
        return Err("signature does not verify".into());
    }
    serde_json::from_slice(&b64.decode(parts[1]).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())
}

#[tokio::test]
async fn a_rotation_add_promote_retire_never_fails_a_verification() {
    for db in TestDb::each().await.unwrap() {
        let store = db.store().await.unwrap();
        let clock = SimClock::at_us(T0);
        let keys = OidcKeyAdmin::new(store.clone(), Arc::new(clock.clone()));
        let minting = issuer(&store, &clock);
        match minting.mint(&request()).await {
            Err(OidcError::Token(r)) => assert!(
                r.to_string().starts_with("UNAVAILABLE: no OIDC key signs"),
                "{r}"
            ),
            other => panic!("expected no signing key, got {other:?}"),
        }
        let a = keys.add_with(&secret(), &CHEAP).await.unwrap();
        assert_eq!((a.state, a.published), ("added", true));
        keys.promote(&a.kid).await.unwrap();
        let first = minting.mint(&request()).await.unwrap();
        assert_eq!(first.kid, a.kid);
        let claims = verify(&store, &first.jwt).await.unwrap();
        assert_eq!(claims["iss"], "https://id.example.com/wl");
        assert_eq!(claims["aud"], "sts.amazonaws.com");
        assert_eq!(claims["exp"], T0 / 1_000_000 + 300);

        // Add B a second later (keys list by when they were added, then by kid, which is a
        // thumbprint: added in the same microsecond, their order would be a coin toss):
        // published at once, A still signs.
        clock.advance_secs(1);
        let b = keys.add_with(&secret(), &CHEAP).await.unwrap();
        let mut held = vec![first.jwt];
        for _ in 0..3 {
            held.push(minting.mint(&request()).await.unwrap().jwt);
        }
        keys.promote(&b.kid).await.unwrap();
        clock.advance_secs(2);
        // The issuer reads which key signs at most once a (real) second.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let after = minting.mint(&request()).await.unwrap();
        assert_eq!(
            after.kid, b.kid,
            "the promoted key signs after the cache's second"
        );
        held.push(after.jwt);
        for jwt in &held {
            verify(&store, jwt).await.unwrap();
        }
        // Retire A: refused while a token it signed could be valid.
        clock.advance_secs(15 * MINUTE);
        let refused = refusal(keys.retire(&a.kid).await);
        assert!(
            refused.starts_with(&format!(
                "INVALID_STATE: OIDC key {} stopped signing 902 s ago",
                a.kid
            )),
            "{refused}"
        );
        assert!(refused.contains("retire it in 58 s or later"), "{refused}");
        clock.advance_secs(58);
        let retired = keys.retire(&a.kid).await.unwrap();
        assert_eq!((retired.state, retired.published), ("retired", false));
        // Every token of A has expired by now; B's verify with A gone.
        let fresh = minting.mint(&request()).await.unwrap();
        verify(&store, &fresh.jwt).await.unwrap();
        let (_, jwks) = publication(&store, &settings().issuer).await.unwrap();
        assert_eq!(jwks["keys"].as_array().map(Vec::len), Some(1));
        assert_eq!(jwks["keys"][0]["kid"], b.kid.as_str());

        let listed = keys.list().await.unwrap();
        let states: Vec<&str> = listed.iter().map(|k| k.state).collect();
        assert_eq!(states, ["retired", "signing"]);
        rebuilt_alike(&store).await;
    }
}

/// The projection rebuilt from the log holds the same rows.
async fn rebuilt_alike(store: &EventStore) {
    let before = OidcKeyAdmin::new(store.clone(), Arc::new(SimClock::at_us(T0)))
        .list()
        .await
        .unwrap();
    projections::rebuild(store, &commands::oidc::projections(), None, 1000, |_| {})
        .await
        .unwrap();
    let after = OidcKeyAdmin::new(store.clone(), Arc::new(SimClock::at_us(T0)))
        .list()
        .await
        .unwrap();
    assert_eq!(before, after);
}

#[tokio::test]
async fn each_key_refusal_by_its_reason() {
    for db in TestDb::each().await.unwrap() {
        let store = db.store().await.unwrap();
        let clock = SimClock::at_us(T0);
        let keys = OidcKeyAdmin::new(store.clone(), Arc::new(clock.clone()));
        assert_eq!(
            refusal(keys.promote("nope").await),
            "NOT_FOUND: no OIDC key nope (bcctl oidc keys list)"
        );
        assert_eq!(
            refusal(keys.retire("nope").await),
            "NOT_FOUND: no OIDC key nope (bcctl oidc keys list)"
        );
        let a = keys.add_with(&secret(), &CHEAP).await.unwrap();
        keys.promote(&a.kid).await.unwrap();
        assert_eq!(
            refusal(keys.promote(&a.kid).await),
            format!("INVALID_STATE: OIDC key {} signs already", a.kid)
        );
        assert!(refusal(keys.retire(&a.kid).await).starts_with(&format!(
            "INVALID_STATE: OIDC key {} signs: promote another key first",
            a.kid
        )));
        let b = keys.add_with(&secret(), &CHEAP).await.unwrap();
        // A key that never signed retires at once.
        keys.retire(&b.kid).await.unwrap();
        assert!(refusal(keys.promote(&b.kid).await).starts_with(&format!(
            "INVALID_STATE: OIDC key {} is retired and never signs again",
            b.kid
        )));
        assert_eq!(
            refusal(keys.retire(&b.kid).await),
            format!("INVALID_STATE: OIDC key {} is retired already", b.kid)
        );
        let c = keys.add_with(&secret(), &CHEAP).await.unwrap();
        keys.promote(&c.kid).await.unwrap();
        assert!(refusal(keys.retire(&a.kid).await).contains("retire it in 960 s or later"));
    }
}

#[tokio::test]
async fn a_key_sealed_under_another_secret_does_not_sign() {
    let db = TestDb::sqlite().unwrap();
    let store = db.store().await.unwrap();
    let clock = SimClock::at_us(T0);
    let keys = OidcKeyAdmin::new(store.clone(), Arc::new(clock.clone()));
    let other =
        DeploymentSecret::new("another-deployment-secret-entirely-of-enough-length").unwrap();
    let a = keys.add_with(&other, &CHEAP).await.unwrap();
    keys.promote(&a.kid).await.unwrap();
    match issuer(&store, &clock).mint(&request()).await {
        Err(OidcError::Key(e)) => assert!(e.to_string().contains("does not open"), "{e}"),
        other => panic!("expected the key not to open, got {other:?}"),
    }
}

/// Two api replicas (two issuers over two pools of one Postgres database): a promotion through
/// a third is signed with by both within seconds, neither restarted.
#[tokio::test]
async fn every_replica_signs_with_a_promoted_key_within_seconds() {
    let db = TestDb::postgres().await.unwrap();
    let clock = SimClock::at_us(T0);
    let admin_store = db.store().await.unwrap();
    let keys = OidcKeyAdmin::new(admin_store.clone(), Arc::new(clock.clone()));
    let a = keys.add_with(&secret(), &CHEAP).await.unwrap();
    keys.promote(&a.kid).await.unwrap();
    let replicas = [
        issuer(&EventStore::open(db.url()).await.unwrap(), &clock),
        issuer(&EventStore::open(db.url()).await.unwrap(), &clock),
    ];
    for r in &replicas {
        assert_eq!(r.mint(&request()).await.unwrap().kid, a.kid);
    }
    let b = keys.add_with(&secret(), &CHEAP).await.unwrap();
    keys.promote(&b.kid).await.unwrap();
    let promoted = Instant::now();
    for (i, r) in replicas.iter().enumerate() {
        loop {
            let kid = r.mint(&request()).await.unwrap().kid;
            if kid == b.kid {
                break;
            }
            assert!(
                promoted.elapsed() < Duration::from_secs(5),
                "replica {i} still signs with {kid}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        eprintln!(
            "replica {i} signs with the promoted key {} ms after the promotion",
            promoted.elapsed().as_millis()
        );
    }
}
