//! The api's internal endpoint and the gateway's relay over real mTLS: only a gateway's internal
//! client certificate (serving CA, `OU=bc-role:gateway`, clientAuth) gets in; a node
//! certificate, a gateway's agent-facing serving certificate or another deployment's internal
//! certificate is refused at the handshake; the relay trusts only the api's internal
//! certificate; a relayed Renew whose presented leaf is not the request's is refused; a Join
//! naming an unknown attestor reaches the node through a split gateway still UNSUPPORTED.

use crate::common;

use std::sync::Arc;

use commands::{Clock, SystemClock};
use domain::pki::{
    issue_serving_certificate, KeyRole, KeySet, KeySetLifetimes, PrivateKey, Serial,
    ServingCertificateRequest, ServingRole, TrustDomain,
};
use events::store::testkit::TestDb;
use gateway::split::api::{start_api, ApiConfig, RunningApi};
use gateway::split::relay::ApiClient;
use time::{Duration, OffsetDateTime};
use tonic::Code;

fn serving_cert(keys: &KeySet) -> (Vec<Vec<u8>>, Vec<u8>) {
    let key = PrivateKey::generate(KeyRole::Serving).unwrap();
    let issued = issue_serving_certificate(
        &keys.serving_ca,
        key.public_key(),
        &ServingCertificateRequest {
            dns_names: vec!["localhost".into()],
            ip_addresses: vec![],
            role: ServingRole::Gateway,
            serial: Serial::generate().unwrap(),
            lifetime: Duration::days(1),
        },
        OffsetDateTime::now_utc() - Duration::minutes(5),
    )
    .unwrap();
    (
        vec![issued.der, keys.serving_ca.cert_der().to_vec()],
        key.pkcs8_der().to_vec(),
    )
}

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

fn client(api: &RunningApi, env: &common::Env, identity: (Vec<Vec<u8>>, Vec<u8>)) -> ApiClient {
    ApiClient::new(
        &format!("localhost:{}", api.addr.port()),
        env.keys.serving_ca.cert_der(),
        identity.0,
        identity.1,
    )
    .unwrap()
}

#[tokio::test]
async fn only_a_gateway_internal_certificate_gets_in() {
    let db = TestDb::postgres().await.unwrap();
    let env = common::start(db.store().await.unwrap(), |_| {}).await;
    let api = api_for(&env).await;

    // The gateway's internal certificate: calls go through.
    let good = client(&api, &env, common::internal_identity(&env.keys));
    let trust = good.trust().await.unwrap();
    assert_eq!(trust.version, 0);
    let fresh = PrivateKey::generate(KeyRole::Serving).unwrap();
    let chain = good
        .issue_serving_certificate(
            fresh.public_key().spki_der().to_vec(),
            vec!["localhost".into()],
            std::time::Duration::from_secs(3600),
        )
        .await
        .unwrap();
    assert_eq!(chain.len(), 2);
    assert_eq!(chain[1], env.keys.serving_ca.cert_der());
    // A bad token through the relay is the same refusal as at the gateway.
    let (mut bad, _) = env.join_request(&env.token(1).await);
    bad.sealed_token[5] ^= 1;
    let s = good.join(bad).await.unwrap_err();
    assert_eq!(
        (s.code(), s.message()),
        (Code::PermissionDenied, "Join refused")
    );

    // A node's own certificate (node CA).
    let node = env.join_node(&env.token(1).await).await;
    let as_node = client(
        &api,
        &env,
        (node.chain.clone(), node.key.pkcs8_der().to_vec()),
    );
    assert!(as_node.trust().await.is_err(), "a node certificate got in");
    // A gateway's agent-facing serving certificate (right CA, serverAuth only).
    let as_serving = client(&api, &env, serving_cert(&env.keys));
    assert!(
        as_serving.trust().await.is_err(),
        "a serving certificate got in"
    );
    // Another deployment's internal certificate.
    let other = KeySet::generate(
        TrustDomain::new(common::TD).unwrap(),
        OffsetDateTime::now_utc() - Duration::days(1),
        KeySetLifetimes::default(),
    )
    .unwrap();
    let foreign = client(&api, &env, common::internal_identity(&other));
    assert!(
        foreign.trust().await.is_err(),
        "another CA's certificate got in"
    );
    // The refused relay says UNAVAILABLE to nodes, never what went wrong inside.
    let (req, _) = env.join_request(&env.token(1).await);
    assert_eq!(
        foreign.join(req).await.unwrap_err().code(),
        Code::Unavailable
    );

    // The relay trusts only the api's internal certificate: a gateway's serving certificate
    // (same serving CA, serverAuth, role gateway) is not taken for the api.
    use rustls::client::danger::ServerCertVerifier;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    let verifier =
        gateway::split::internal_tls::internal_server_verifier(env.keys.serving_ca.cert_der())
            .unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let check = |chain: &[Vec<u8>]| {
        verifier.verify_server_cert(
            &CertificateDer::from(chain[0].clone()),
            &[CertificateDer::from(chain[1].clone())],
            &name,
            &[],
            UnixTime::now(),
        )
    };
    let (gw_chain, _) = serving_cert(&env.keys);
    assert!(
        check(&gw_chain).is_err(),
        "a gateway serving certificate posed as the api"
    );
    let mut internal_req = ServingCertificateRequest {
        dns_names: vec!["localhost".into()],
        ip_addresses: vec![],
        role: ServingRole::Internal,
        serial: Serial::generate().unwrap(),
        lifetime: Duration::days(1),
    };
    let api_key = PrivateKey::generate(KeyRole::Serving).unwrap();
    let api_cert = issue_serving_certificate(
        &env.keys.serving_ca,
        api_key.public_key(),
        &internal_req,
        OffsetDateTime::now_utc() - Duration::minutes(5),
    )
    .unwrap();
    assert!(check(&[api_cert.der, env.keys.serving_ca.cert_der().to_vec()]).is_ok());
    // The same internal role from another deployment's serving CA is not trusted.
    internal_req.serial = Serial::generate().unwrap();
    let foreign_api = issue_serving_certificate(
        &other.serving_ca,
        api_key.public_key(),
        &internal_req,
        OffsetDateTime::now_utc() - Duration::minutes(5),
    )
    .unwrap();
    assert!(check(&[foreign_api.der, other.serving_ca.cert_der().to_vec()]).is_err());
    api.shutdown().await;
}

#[tokio::test]
async fn a_relayed_renew_must_carry_the_presented_leaf() {
    let db = TestDb::postgres().await.unwrap();
    let env = common::start(db.store().await.unwrap(), |_| {}).await;
    let api = api_for(&env).await;
    let relay = client(&api, &env, common::internal_identity(&env.keys));
    let a = env.join_node(&env.token(1).await).await;
    let b = env.join_node(&env.token(1).await).await;
    // A renewal request of node a, relayed as if node b had presented it: refused.
    let request = common::renew_request(&a);
    let s = relay
        .renew(request.clone(), b.chain[0].clone())
        .await
        .unwrap_err();
    assert_eq!(
        (s.code(), s.message()),
        (Code::PermissionDenied, "Renew refused")
    );
    // With the leaf a presented, it renews (the signed answer: crate::renew_signed).
    let signed = relay.renew(request, a.chain[0].clone()).await.unwrap();
    let renewed =
        <proto::RenewResponse as prost::Message>::decode(signed.response.as_slice()).unwrap();
    assert_eq!(renewed.certificate_chain.len(), 2);
    assert_ne!(renewed.certificate_chain[0], a.chain[0]);
    api.shutdown().await;
}

/// Through a split gateway (node -> gateway -> api), a Join naming an attestor the api does not
/// run keeps its code and message: UNIMPLEMENTED (the spec's UNSUPPORTED) naming the attestor,
/// never the refusal or UNAVAILABLE. The same token then joins with the attestor empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_attestor_stays_unsupported_through_the_relay() {
    let db = TestDb::postgres().await.unwrap();
    let env = common::start(db.store().await.unwrap(), |_| {}).await;
    let api = api_for(&env).await;
    let relay = client(&api, &env, common::internal_identity(&env.keys));
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let split = gateway::run::start_gateway(
        env.store.clone(),
        &common::public_bundle(&env.keys),
        relay,
        clock,
        gateway::run::GatewayConfig::new("127.0.0.1:0".parse().unwrap()),
    )
    .await
    .unwrap();
    let mut node = common::connect(split.addr, env.keys.serving_ca.cert_der(), None)
        .await
        .unwrap();
    let token = env.token(1).await;

    let (mut req, _) = env.join_request(&token);
    req.attestor = "tpm".into();
    let s = node.join(req).await.unwrap_err();
    assert_eq!(
        (s.code(), s.message()),
        (
            Code::Unimplemented,
            "UNSUPPORTED: attestor \"tpm\" is not supported by this control plane; supported: \"join-token\", \"provisioned\", \"x509pop\", \"discovery\" (an empty attestor means \"join-token\")"
        )
    );
    assert!(split
        .sources
        .render()
        .contains("bc_join_requests_total{outcome=\"unsupported\"} 1"));

    let (req, _) = env.join_request(&token);
    assert_eq!(req.attestor, "");
    let signed = node.join(req).await.unwrap().into_inner();
    assert!(!signed.response.is_empty());
    split.shutdown().await;
    api.shutdown().await;
}
