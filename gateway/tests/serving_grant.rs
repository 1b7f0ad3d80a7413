//! Issue 17: gateway serving certificates from the api over real mTLS are issued only for the
//! names the gateway's internal certificate lists (anything else: PERMISSION_DENIED, nothing
//! written), live at most 7 days (a longer lifetime is clamped), and each leaves exactly one
//! `gateway.serving.issued` event; a split gateway configured with a name outside its internal
//! certificate does not start.

use crate::common;

use std::sync::Arc;

use commands::{Clock, SystemClock};
use domain::pki::{KeyRole, PrivateKey};
use events::schema::GatewayServingIssued;
use events::store::testkit::TestDb;
use events::store::LogStore;
use gateway::run::{GatewayConfig, StartError};
use gateway::split::api::{start_api, ApiConfig, RunningApi};
use gateway::split::relay::ApiClient;
use sha2::{Digest, Sha256};
use time::Duration;
use tonic::Code;

/// The stream `gateway.serving.issued` events of the tests' gateway (`gw-1`) go to.
const GW_STREAM: &str = "gateway/gw-1";

async fn api_for(env: &common::Env) -> RunningApi {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    start_api(
        env.store.clone(),
        env.keys.clone(),
        env.join.clone(),
        clock,
        ApiConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            names: vec!["localhost".into()],
            certificate_lifetime: Duration::days(1),
            limits: gateway::edge::limits::EdgeLimits::internal(),
            health_listen: None,
        },
    )
    .await
    .unwrap()
}

/// A relay client presenting `common::internal_identity` (gateway `gw-1`, allowed to serve as
/// `localhost` and `127.0.0.1`).
fn client(api: &RunningApi, env: &common::Env) -> ApiClient {
    client_as(api, env, common::internal_identity(&env.keys))
}

fn client_as(api: &RunningApi, env: &common::Env, identity: (Vec<Vec<u8>>, Vec<u8>)) -> ApiClient {
    ApiClient::new(
        &format!("localhost:{}", api.addr.port()),
        env.keys.serving_ca.cert_der(),
        identity.0,
        identity.1,
    )
    .unwrap()
}

async fn ask(
    c: &ApiClient,
    names: &[&str],
    lifetime: std::time::Duration,
) -> Result<Vec<Vec<u8>>, tonic::Status> {
    let key = PrivateKey::generate(KeyRole::Serving).unwrap();
    c.issue_serving_certificate(
        key.public_key().spki_der().to_vec(),
        names.iter().map(|n| n.to_string()).collect(),
        lifetime,
    )
    .await
}

const DAY: std::time::Duration = std::time::Duration::from_secs(86_400);

fn validity(der: &[u8]) -> (i64, i64) {
    let (_, cert) = x509_parser::parse_x509_certificate(der).unwrap();
    (
        cert.validity().not_before.timestamp(),
        cert.validity().not_after.timestamp(),
    )
}

#[tokio::test]
async fn a_name_outside_the_gateways_internal_certificate_is_refused() {
    let db = TestDb::postgres().await.unwrap();
    let env = common::start(db.store().await.unwrap(), |_| {}).await;
    let api = api_for(&env).await;
    let c = client(&api, &env);
    let granted = "[\"gw-1\", \"localhost\", \"127.0.0.1\"]";
    for (names, refused) in [
        (&["evil.example.com"][..], "[\"evil.example.com\"]"),
        // One name outside the set spoils the request.
        (
            &["localhost", "bank.example.com", "10.1.2.3"][..],
            "[\"bank.example.com\", \"10.1.2.3\"]",
        ),
    ] {
        let s = ask(&c, names, DAY).await.unwrap_err();
        assert_eq!(s.code(), Code::PermissionDenied, "{names:?}");
        assert_eq!(
            s.message(),
            format!(
                "gateway gw-1 may not serve as {refused}: its internal certificate lists only \
                 {granted} (re-issue it with `bcctl pki issue-internal --name gw-1 \
                 --serving-name NAME` for each name, or fix serving_names)"
            ),
            "{names:?}"
        );
    }
    // No name at all is not a request.
    let s = ask(&c, &[], DAY).await.unwrap_err();
    assert_eq!(
        (s.code(), s.message()),
        (
            Code::InvalidArgument,
            "the request names no DNS name or IP address"
        )
    );
    // Nothing was issued, so nothing was written.
    assert_eq!(env.store.read_stream(GW_STREAM).await.unwrap().len(), 0);
    api.shutdown().await;
    env.gateway.shutdown().await;
}

#[tokio::test]
async fn a_lifetime_above_seven_days_is_clamped() {
    let db = TestDb::sqlite().unwrap();
    let env = common::start(db.store().await.unwrap(), |_| {}).await;
    let api = api_for(&env).await;
    let c = client(&api, &env);
    let chain = ask(&c, &["localhost", "127.0.0.1"], 90 * DAY)
        .await
        .unwrap();
    let (not_before, not_after) = validity(&chain[0]);
    assert_eq!(not_after - not_before, 7 * 86_400);
    // A shorter one is kept as asked.
    let chain = ask(&c, &["localhost"], DAY).await.unwrap();
    let (not_before, not_after) = validity(&chain[0]);
    // notBefore is backdated 5 minutes (domain::pki::BACKDATE).
    assert_eq!(not_after - not_before, 86_400 + 300);
    api.shutdown().await;
    env.gateway.shutdown().await;
}

#[tokio::test]
async fn an_issued_serving_certificate_leaves_exactly_one_event() {
    let db = TestDb::postgres().await.unwrap();
    let env = common::start(db.store().await.unwrap(), |_| {}).await;
    let api = api_for(&env).await;
    let identity = common::internal_identity(&env.keys);
    let internal_der = identity.0[0].clone();
    let c = client_as(&api, &env, identity);
    let chain = ask(&c, &["LOCALHOST", "127.0.0.1"], 30 * DAY)
        .await
        .unwrap();
    let events = env.store.read_stream(GW_STREAM).await.unwrap();
    assert_eq!(events.len(), 1);
    let e = &events[0];
    assert_eq!(e.event_type, "gateway.serving.issued");
    assert_eq!(e.tenant_id, "deployment");
    let p: GatewayServingIssued = e.decode().unwrap();
    let (_, leaf) = x509_parser::parse_x509_certificate(&chain[0]).unwrap();
    let (_, internal) = x509_parser::parse_x509_certificate(&internal_der).unwrap();
    let (not_before, not_after) = validity(&chain[0]);
    assert_eq!(p.gateway_name, "gw-1");
    assert_eq!(
        p.internal_certificate_serial,
        hex::encode(internal.raw_serial())
    );
    assert_eq!(
        p.internal_certificate_sha256,
        Sha256::digest(&internal_der).to_vec()
    );
    assert_eq!(p.dns_names, vec!["localhost".to_string()]);
    assert_eq!(p.ip_addresses, vec!["127.0.0.1".to_string()]);
    assert_eq!(p.serial, hex::encode(leaf.raw_serial()));
    assert_eq!(p.certificate_sha256, Sha256::digest(&chain[0]).to_vec());
    assert_eq!((p.not_before, p.not_after), (not_before, not_after));
    assert_eq!(p.requested_lifetime_seconds, 30 * 86_400);
    // A second one is a second event; refusals in between add none.
    ask(&c, &["evil.example.com"], DAY).await.unwrap_err();
    ask(&c, &["localhost"], DAY).await.unwrap();
    assert_eq!(env.store.read_stream(GW_STREAM).await.unwrap().len(), 2);
    api.shutdown().await;
    env.gateway.shutdown().await;
}

#[tokio::test]
async fn a_split_gateway_named_outside_its_internal_certificate_does_not_start() {
    let db = TestDb::sqlite().unwrap();
    let env = common::start(db.store().await.unwrap(), |_| {}).await;
    let api = api_for(&env).await;
    let mut config = GatewayConfig::new("127.0.0.1:0".parse().unwrap());
    config.serving_names = vec!["localhost".into(), "gw.other.example".into()];
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let started = gateway::run::start_gateway(
        env.store.clone(),
        &common::public_bundle(&env.keys),
        client(&api, &env),
        clock,
        config,
    )
    .await;
    match started {
        Err(StartError::Api { reason, .. }) => assert_eq!(
            reason,
            "PermissionDenied: gateway gw-1 may not serve as [\"gw.other.example\"]: its \
             internal certificate lists only [\"gw-1\", \"localhost\", \"127.0.0.1\"] (re-issue \
             it with `bcctl pki issue-internal --name gw-1 --serving-name NAME` for each name, \
             or fix serving_names)"
        ),
        Err(other) => panic!("another error: {other}"),
        Ok(running) => {
            running.shutdown().await;
            panic!("a split gateway started with a name its internal certificate does not list");
        }
    }
    assert_eq!(env.store.read_stream(GW_STREAM).await.unwrap().len(), 0);
    api.shutdown().await;
    env.gateway.shutdown().await;
}
