//! Renew over real TLS (issue 17): the answer is a SignedRenewResponse, signed by the
//! JoinService key under its own purpose (`renew-response`) and bound to the new CSR, on the
//! all-in-one gateway and through the api relay unchanged; the 7th renewal of a node in an hour
//! is RESOURCE_EXHAUSTED with `grpc-retry-pushback-ms`, on both paths.

use crate::common;

use std::sync::Arc;

use commands::{Clock, SystemClock};
use domain::pki::statement::{verify, JoinResponseStatement, RenewResponseStatement};
use domain::pki::{build_csr, KeyRole, NodeIdentity, PrivateKey, Signature, TrustDomain};
use events::store::testkit::TestDb;
use gateway::split::api::{start_api, ApiConfig};
use gateway::split::relay::ApiClient;
use prost::Message;
use sha2::{Digest, Sha256};
use time::{Duration, OffsetDateTime};
use tonic::Code;

/// A renewal request for `node` and the next key it certifies.
fn renew_request(node: &common::Node) -> (proto::RenewRequest, PrivateKey, [u8; 32]) {
    let next = PrivateKey::generate(KeyRole::Node).unwrap();
    let csr = build_csr(&next).unwrap();
    let csr_sha256: [u8; 32] = Sha256::digest(&csr).into();
    let td = TrustDomain::new(common::TD).unwrap();
    let id = NodeIdentity::from_leaf_der(&node.chain[0], &td).unwrap();
    let client_time_ms = u64::try_from(OffsetDateTime::now_utc().unix_timestamp() * 1000).unwrap();
    let proof = domain::pki::statement::sign(
        &node.key,
        &domain::pki::statement::RenewPop {
            csr_sha256,
            node_id: id.spiffe_id.node.clone(),
            client_time_ms,
        },
    )
    .unwrap();
    (
        proto::RenewRequest {
            csr,
            chain: node.chain.clone(),
            client_time_ms: i64::try_from(client_time_ms).unwrap(),
            signature: proof.as_bytes().to_vec(),
            key_attestation: None,
        },
        next,
        csr_sha256,
    )
}

/// Checks the signature and the binding of `signed`, returns its body.
fn open(
    env: &common::Env,
    signed: &proto::SignedRenewResponse,
    csr_sha256: [u8; 32],
) -> proto::RenewResponse {
    let sig = Signature::from_bytes(&signed.signature).expect("64-byte signature");
    let key = env.keys.join_signing.public_key();
    let statement = RenewResponseStatement {
        csr_sha256,
        response: &signed.response,
    };
    verify(key, &statement, &sig).expect("signed by the JoinService over this CSR");
    // Not valid as a JoinResponse signature over the same bytes.
    let join = JoinResponseStatement {
        csr_sha256,
        response: &signed.response,
    };
    assert!(verify(key, &join, &sig).is_err());
    proto::RenewResponse::decode(signed.response.as_slice()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_renew_response_is_signed_and_bound_to_the_csr_on_both_paths() {
    let db = TestDb::postgres().await.unwrap();
    let env = common::start(db.store().await.unwrap(), |_| {}).await;
    let node = env.join_node(&env.token(1).await).await;

    // The all-in-one gateway.
    let (req, next, sha) = renew_request(&node);
    let mut c = env.client(Some(&node)).await.unwrap();
    let signed = c.renew(req).await.unwrap().into_inner();
    let body = open(&env, &signed, sha);
    assert_eq!(body.csr_sha256, sha.to_vec());
    assert_eq!(
        (
            body.trust_domain.as_str(),
            body.node_id.as_str(),
            body.site_id.as_str(),
            body.role.as_str()
        ),
        (common::TD, node.node_id.as_str(), "s1", "node")
    );
    assert_eq!(body.identity_generation, 1);
    assert_eq!(body.certificate_chain.len(), 2);
    assert_eq!(body.certificate_chain[1], env.keys.node_ca.cert_der());
    let leaf =
        NodeIdentity::from_leaf_der(&body.certificate_chain[0], &env.keys.trust_domain).unwrap();
    assert_eq!(&leaf.public_key, next.public_key());

    // Through the api relay: the api's signed bytes, passed on as they are.
    let renewed = common::Node {
        node_id: node.node_id.clone(),
        chain: body.certificate_chain.clone(),
        key: next,
    };
    let api = api_for(&env).await;
    let relay = relay_for(&api, &env);
    let (req, _, sha) = renew_request(&renewed);
    let signed = relay.renew(req, renewed.chain[0].clone()).await.unwrap();
    let body = open(&env, &signed, sha);
    assert_eq!(body.node_id, node.node_id);
    api.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seventh_renewal_in_an_hour_is_resource_exhausted_with_a_pushback() {
    let db = TestDb::postgres().await.unwrap();
    let env = common::start(db.store().await.unwrap(), |_| {}).await;
    let api = api_for(&env).await;
    let relay = relay_for(&api, &env);
    let mut node = env.join_node(&env.token(1).await).await;
    for _ in 0..6 {
        let (req, next, sha) = renew_request(&node);
        let mut c = env.client(Some(&node)).await.unwrap();
        let signed = c.renew(req).await.unwrap().into_inner();
        node.chain = open(&env, &signed, sha).certificate_chain;
        node.key = next;
    }
    let pushback = |s: &tonic::Status| -> u64 {
        s.metadata()
            .get("grpc-retry-pushback-ms")
            .expect("a pushback")
            .to_str()
            .unwrap()
            .parse()
            .unwrap()
    };
    // Direct: the 7th.
    let (req, _, _) = renew_request(&node);
    let mut c = env.client(Some(&node)).await.unwrap();
    let s = c.renew(req).await.unwrap_err();
    assert_eq!(s.code(), Code::ResourceExhausted, "{s:?}");
    assert_eq!(
        s.message(),
        format!(
            "this node renewed 6 times in the last hour; retry in {} ms",
            pushback(&s)
        )
    );
    // The first renewal leaves the window an hour after it was issued (notBefore, whole
    // seconds): at most an hour from now, and more than 50 minutes.
    let ms = pushback(&s);
    assert!(ms <= 3_600_000 && ms > 3_000_000, "{ms}");
    // Through the relay: the same code and pushback reach the node.
    let (req, _, _) = renew_request(&node);
    let s = relay.renew(req, node.chain[0].clone()).await.unwrap_err();
    assert_eq!(s.code(), Code::ResourceExhausted, "{s:?}");
    let relayed = pushback(&s);
    assert!(relayed <= ms && relayed > 3_000_000, "{relayed} after {ms}");
    api.shutdown().await;
}

async fn api_for(env: &common::Env) -> gateway::split::api::RunningApi {
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

fn relay_for(api: &gateway::split::api::RunningApi, env: &common::Env) -> ApiClient {
    let (chain, key) = common::internal_identity(&env.keys);
    ApiClient::new(
        &format!("localhost:{}", api.addr.port()),
        env.keys.serving_ca.cert_der(),
        chain,
        key,
    )
    .unwrap()
}
