//! A gateway's serving certificate, and the api's internal one, are renewed while they run: new
//! handshakes get a new certificate (new key, later expiry) at two thirds of the old one's
//! validity, over and over, and connections opened before keep working. In the `all` role the
//! gateway issues it itself; in the `gateway` role the api issues it over internal mTLS.

use crate::common;

use std::sync::Arc;
use std::time::Duration as StdDuration;

use commands::{Clock, SystemClock};
use events::store::testkit::TestDb;
use gateway::run::GatewayConfig;
use gateway::split::api::{start_api, ApiConfig};
use gateway::split::relay::ApiClient;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use time::{Duration, OffsetDateTime};

/// The leaf a fresh TLS handshake with `addr` is given (pinned to `ca_der`).
async fn served_leaf(
    addr: std::net::SocketAddr,
    ca_der: &[u8],
    identity: Option<(Vec<Vec<u8>>, Vec<u8>)>,
) -> Vec<u8> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from(ca_der.to_vec())).unwrap();
    let builder = rustls::ClientConfig::builder_with_provider(gateway::edge::tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots);
    let mut config = match identity {
        Some((chain, key)) => builder
            .with_client_auth_cert(
                chain.into_iter().map(CertificateDer::from).collect(),
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key)),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    tls.get_ref().1.peer_certificates().unwrap()[0]
        .as_ref()
        .to_vec()
}

struct Leaf {
    serial: Vec<u8>,
    spki: Vec<u8>,
    not_after: OffsetDateTime,
}

fn leaf(der: &[u8]) -> Leaf {
    let (_, c) = x509_parser::parse_x509_certificate(der).unwrap();
    Leaf {
        serial: c.raw_serial().to_vec(),
        spki: c.tbs_certificate.subject_pki.raw.to_vec(),
        not_after: c.validity().not_after.to_datetime(),
    }
}

/// Waits (up to 20 s) until a handshake is given a leaf other than `old`; checks it is a real
/// renewal: another serial, another key, a later expiry.
async fn next_leaf(
    addr: std::net::SocketAddr,
    ca_der: &[u8],
    identity: Option<(Vec<Vec<u8>>, Vec<u8>)>,
    old: &[u8],
) -> Vec<u8> {
    for _ in 0..80 {
        let now = served_leaf(addr, ca_der, identity.clone()).await;
        if now != old {
            let (a, b) = (leaf(old), leaf(&now));
            assert_ne!(a.serial, b.serial, "a new serial");
            assert_ne!(a.spki, b.spki, "a fresh key");
            assert!(b.not_after > a.not_after, "a later expiry");
            return now;
        }
        tokio::time::sleep(StdDuration::from_millis(250)).await;
    }
    panic!("the certificate was not renewed within 20 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_all_role_gateway_renews_its_serving_certificate() {
    let db = TestDb::sqlite().unwrap();
    let env = common::start(db.store().await.unwrap(), |c: &mut GatewayConfig| {
        c.serving_lifetime = Duration::seconds(6)
    })
    .await;
    let ca = env.keys.serving_ca.cert_der().to_vec();
    let addr = env.gateway.addr;
    let first = served_leaf(addr, &ca, None).await;
    // A connection made before the renewal.
    let token = env.token(3).await;
    let mut early = env.client(None).await.unwrap();
    let (req, _) = env.join_request(&token);
    early.join(req).await.unwrap();

    let second = next_leaf(addr, &ca, None, &first).await;
    let third = next_leaf(addr, &ca, None, &second).await;
    assert_ne!(first, third);
    // The early connection still works, and new ones do too.
    let (req, _) = env.join_request(&token);
    early.join(req).await.unwrap();
    env.join_node(&token).await;
    env.gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_gateway_and_the_api_renew_their_certificates() {
    let db = TestDb::postgres().await.unwrap();
    let env = common::start(db.store().await.unwrap(), |_| {}).await;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let api = start_api(
        env.store.clone(),
        env.keys.clone(),
        env.join.clone(),
        clock.clone(),
        ApiConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            names: vec!["localhost".into()],
            certificate_lifetime: Duration::seconds(6),
            limits: gateway::edge::limits::EdgeLimits::internal(),
            health_listen: None,
        },
    )
    .await
    .unwrap();
    let identity = common::internal_identity(&env.keys);
    let client = ApiClient::new(
        &format!("localhost:{}", api.addr.port()),
        env.keys.serving_ca.cert_der(),
        identity.0.clone(),
        identity.1.clone(),
    )
    .unwrap();
    let public = common::public_bundle(&env.keys);
    let mut config = GatewayConfig::new("127.0.0.1:0".parse().unwrap());
    config.serving_lifetime = Duration::seconds(6);
    let split = gateway::run::start_gateway(env.store.clone(), &public, client, clock, config)
        .await
        .unwrap();
    let ca = env.keys.serving_ca.cert_der().to_vec();

    // The split gateway's agent-facing certificate, issued by the api, renewed twice.
    let first = served_leaf(split.addr, &ca, None).await;
    let second = next_leaf(split.addr, &ca, None, &first).await;
    next_leaf(split.addr, &ca, None, &second).await;
    // The api's own internal certificate, renewed too.
    let api_first = served_leaf(api.addr, &ca, Some(identity.clone())).await;
    next_leaf(api.addr, &ca, Some(identity), &api_first).await;
    // Joins still go through the split gateway to the api.
    let token = env.token(1).await;
    let (req, _) = env.join_request(&token);
    let mut c = common::connect(split.addr, &ca, None).await.unwrap();
    c.join(req).await.unwrap();
    split.shutdown().await;
    api.shutdown().await;
    env.gateway.shutdown().await;
}
