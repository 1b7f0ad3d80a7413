//! The edge of both endpoints, in process over real TLS and Postgres: the per-peer limit on
//! refused joins (counted at the store), undecodable requests (INVALID_ARGUMENT, no decoder
//! text), no TLS session resumption (a second handshake is a full one, so the client verifier
//! runs again), an internal client certificate without clientAuth refused, and the api
//! endpoint's handshake timeout, connection cap and idle timeout.

use crate::common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use commands::{Clock, SystemClock};
use events::store::testkit::TestDb;
use gateway::edge::limits::EdgeLimits;
use gateway::join::refusal_limits::JoinRefusalLimits;
use gateway::split::api::{start_api, ApiConfig, RunningApi};
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::transport::{Channel, Endpoint, Uri};
use tonic::{Code, Status};

/// A TLS 1.3 client configuration trusting `serving_ca_der`, presenting `identity` if given.
fn client_config(
    serving_ca_der: &[u8],
    identity: Option<(Vec<Vec<u8>>, Vec<u8>)>,
) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from(serving_ca_der.to_vec()))
        .unwrap();
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
    Arc::new(config)
}

/// A channel to `addr` whose TCP connections come from `source` (an address on loopback).
async fn channel_from(
    addr: SocketAddr,
    source: &'static str,
    config: Arc<rustls::ClientConfig>,
) -> Channel {
    let connector = tokio_rustls::TlsConnector::from(config);
    Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let connector = connector.clone();
            async move {
                let socket = tokio::net::TcpSocket::new_v4()?;
                socket.bind(
                    format!("{source}:0")
                        .parse()
                        .map_err(std::io::Error::other)?,
                )?;
                let tcp = socket.connect(addr).await?;
                let name = ServerName::try_from("localhost").map_err(std::io::Error::other)?;
                let tls = connector.connect(name, tcp).await?;
                Ok::<_, std::io::Error>(TokioIo::new(tls))
            }
        }))
        .await
        .unwrap()
}

async fn join_refusal_events(store: &events::store::EventStore) -> usize {
    use events::store::LogStore;
    store
        .read_batch(0, 1_000_000)
        .await
        .unwrap()
        .iter()
        .filter(|e| e.event_type == "security.join.refused")
        .count()
}

#[tokio::test]
async fn refused_joins_over_the_per_peer_bound_do_not_reach_the_store() {
    let db = TestDb::postgres().await.unwrap();
    let env = common::start(db.store().await.unwrap(), |c| {
        c.join_refusals = JoinRefusalLimits {
            max_refusals: 3,
            window: Duration::from_secs(60),
            max_peers: 1024,
        };
    })
    .await;
    let ca = env.keys.serving_ca.cert_der().to_vec();
    let mut a = proto::node_service_client::NodeServiceClient::new(
        channel_from(env.gateway.addr, "127.0.0.1", client_config(&ca, None)).await,
    );
    let token = env.token(10).await;
    let mut answers = Vec::new();
    for _ in 0..8 {
        let (mut bad, _) = env.join_request(&token);
        bad.sealed_token[5] ^= 1;
        answers.push(a.join(bad).await.unwrap_err());
    }
    for s in &answers[..3] {
        assert_eq!(
            (s.code(), s.message()),
            (Code::PermissionDenied, "Join refused")
        );
    }
    for s in &answers[3..] {
        assert_eq!(s.code(), Code::ResourceExhausted);
        assert_eq!(
            s.message(),
            "too many refused joins from this address; retry in 60 s"
        );
        let ms: u64 = s
            .metadata()
            .get("grpc-retry-pushback-ms")
            .expect("a retry hint")
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((30_000..=60_000).contains(&ms), "{ms}");
    }
    // Exactly the refusals the JoinService saw were written; the limited ones reached nothing.
    assert_eq!(join_refusal_events(&env.store).await, 3);
    assert_eq!(env.gateway.join_limiter.refusals(), 3);
    assert_eq!(env.gateway.join_limiter.limited(), 5);

    // A good join from the limited peer waits too; from another peer it goes through.
    let (good, _) = env.join_request(&token);
    assert_eq!(
        a.join(good).await.unwrap_err().code(),
        Code::ResourceExhausted
    );
    let mut b = proto::node_service_client::NodeServiceClient::new(
        channel_from(env.gateway.addr, "127.0.0.2", client_config(&ca, None)).await,
    );
    let (good, _) = env.join_request(&token);
    b.join(good).await.expect("another peer joins");
    assert_eq!(join_refusal_events(&env.store).await, 3);
}

/// Sends and receives raw bytes as gRPC messages.
#[derive(Default)]
struct RawCodec;

struct RawEncoder;
struct RawDecoder;

impl Encoder for RawEncoder {
    type Item = Vec<u8>;
    type Error = Status;
    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        use bytes::BufMut;
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for RawDecoder {
    type Item = Vec<u8>;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
        use bytes::Buf;
        let mut out = vec![0u8; src.remaining()];
        src.copy_to_slice(&mut out);
        Ok(Some(out))
    }
}

impl Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawEncoder;
    type Decoder = RawDecoder;
    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }
    fn decoder(&mut self) -> RawDecoder {
        RawDecoder
    }
}

async fn raw_call(channel: Channel, path: &'static str, bytes: Vec<u8>) -> Status {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    grpc.unary(
        tonic::Request::new(bytes),
        tonic::codegen::http::uri::PathAndQuery::from_static(path),
        RawCodec,
    )
    .await
    .expect_err("garbage is refused")
}

/// Not protobuf: field 1 with wire type 7, which does not exist.
const GARBAGE: &[u8] = &[0x0f, 0xff, 0xff, 0xff];

#[tokio::test]
async fn an_undecodable_request_is_invalid_argument_with_a_fixed_message() {
    let db = TestDb::postgres().await.unwrap();
    let env = common::start(db.store().await.unwrap(), |_| {}).await;
    let ca = env.keys.serving_ca.cert_der().to_vec();
    let channel = channel_from(env.gateway.addr, "127.0.0.1", client_config(&ca, None)).await;
    for path in [
        "/bc.wire.v1.NodeService/Join",
        "/bc.wire.v1.NodeService/Renew",
    ] {
        let s = raw_call(channel.clone(), path, GARBAGE.to_vec()).await;
        assert_eq!(
            (s.code(), s.message()),
            (
                Code::InvalidArgument,
                "the request is not a valid protobuf message for this method"
            ),
            "{path}"
        );
    }
    // The internal endpoint, as a gateway.
    let api = api(&env, EdgeLimits::internal()).await;
    let channel = channel_from(
        api.addr,
        "127.0.0.1",
        client_config(&ca, Some(common::internal_identity(&env.keys))),
    )
    .await;
    let s = raw_call(channel, "/bc.internal.v1.ApiService/Join", GARBAGE.to_vec()).await;
    assert_eq!(
        (s.code(), s.message()),
        (
            Code::InvalidArgument,
            "the request is not a valid protobuf message for this method"
        )
    );
}

async fn api(env: &common::Env, limits: EdgeLimits) -> RunningApi {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    start_api(
        env.store.clone(),
        env.keys.clone(),
        env.join.clone(),
        clock,
        ApiConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            names: vec!["localhost".into()],
            certificate_lifetime: time::Duration::days(1),
            limits,
            health_listen: None,
        },
    )
    .await
    .unwrap()
}

/// A TLS connection to `addr` as `localhost` with `config`, its handshake done.
async fn tls_to(
    addr: SocketAddr,
    config: &Arc<rustls::ClientConfig>,
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tokio_rustls::TlsConnector::from(config.clone())
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap()
}

/// One TLS connection with `config`: the HTTP/2 preface, then a read of the server's first
/// frames (which also takes in any session ticket the server sent). Returns how the handshake
/// went.
async fn handshake_kind(
    addr: SocketAddr,
    config: &Arc<rustls::ClientConfig>,
) -> Option<rustls::HandshakeKind> {
    let mut tls = tls_to(addr, config).await;
    tls.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .await
        .unwrap();
    tls.flush().await.unwrap();
    let mut buf = [0u8; 256];
    let _ = tokio::time::timeout(Duration::from_secs(5), tls.read(&mut buf)).await;
    let _ = tokio::time::timeout(Duration::from_millis(300), tls.read(&mut buf)).await;
    let kind = tls.get_ref().1.handshake_kind();
    let _ = tls.shutdown().await;
    kind
}

/// A node with its certificate reads before it writes (bcd does, so that a refusal alert after
/// its TLS 1.3 handshake is not lost): the gateway's first bytes must come without the node
/// sending anything, and they are HTTP/2's SETTINGS (RFC 9113, 3.4). The gateway used to read
/// the client's preface before starting HTTP/2, so such a node waited for its own read timeout
/// on every connection.
#[tokio::test]
async fn the_gateway_speaks_first_after_a_nodes_handshake() {
    let db = TestDb::postgres().await.unwrap();
    let env = common::start(db.store().await.unwrap(), |_| {}).await;
    let ca = env.keys.serving_ca.cert_der().to_vec();
    let node = env.join_node(&env.token(1).await).await;
    let config = client_config(
        &ca,
        Some((node.chain.clone(), node.key.pkcs8_der().to_vec())),
    );
    let mut tls = tls_to(env.gateway.addr, &config).await;
    let mut header = [0u8; 9];
    tokio::time::timeout(Duration::from_secs(10), tls.read_exact(&mut header))
        .await
        .expect("the gateway sent nothing before the node wrote")
        .expect("the gateway closed the connection");
    // A frame header: 24-bit length, type SETTINGS (0x4), no flags, stream 0.
    assert_eq!(header[3], 0x4, "first frame type, header {header:?}");
    assert_eq!(header[4], 0, "flags");
    assert_eq!(&header[5..9], &[0, 0, 0, 0], "stream id");
    // The preface is still checked: bytes that are not it close the connection.
    tls.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    tls.flush().await.unwrap();
    assert!(
        closed_within(&mut tls, Duration::from_secs(10)).await,
        "a connection whose first bytes are not the preface is closed"
    );
}

#[tokio::test]
async fn no_tls_session_is_resumed_on_either_endpoint() {
    let db = TestDb::postgres().await.unwrap();
    let env = common::start(db.store().await.unwrap(), |_| {}).await;
    let ca = env.keys.serving_ca.cert_der().to_vec();
    // A node with its certificate, and a client that offers resumption (rustls' default).
    let node = env.join_node(&env.token(1).await).await;
    let config = client_config(
        &ca,
        Some((node.chain.clone(), node.key.pkcs8_der().to_vec())),
    );
    for round in 0..2 {
        assert_eq!(
            handshake_kind(env.gateway.addr, &config).await,
            Some(rustls::HandshakeKind::Full),
            "public endpoint, handshake {round}"
        );
    }
    let api = api(&env, EdgeLimits::internal()).await;
    let config = client_config(&ca, Some(common::internal_identity(&env.keys)));
    for round in 0..2 {
        assert_eq!(
            handshake_kind(api.addr, &config).await,
            Some(rustls::HandshakeKind::Full),
            "internal endpoint, handshake {round}"
        );
    }
}

#[tokio::test]
async fn an_internal_client_certificate_without_client_auth_is_refused() {
    let db = TestDb::postgres().await.unwrap();
    let env = common::start(db.store().await.unwrap(), |_| {}).await;
    let api = api(&env, EdgeLimits::internal()).await;
    // Signed by the serving CA with the gateway role, but no extended key usage at all.
    let key = domain::pki::PrivateKey::generate(domain::pki::KeyRole::Serving).unwrap();
    let subject_key = rcgen::KeyPair::try_from(key.pkcs8_der()).unwrap();
    let ca_key = rcgen::KeyPair::try_from(env.keys.serving_ca.private_key().pkcs8_der()).unwrap();
    let issuer = rcgen::Issuer::from_ca_cert_der(
        &CertificateDer::from(env.keys.serving_ca.cert_der().to_vec()),
        ca_key,
    )
    .unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["gw-1".to_string()]).unwrap();
    let mut dn = rcgen::DistinguishedName::new();
    dn.push(rcgen::DnType::OrganizationalUnitName, "bc-role:gateway");
    params.distinguished_name = dn;
    params.not_before = time::OffsetDateTime::now_utc() - time::Duration::hours(1);
    params.not_after = time::OffsetDateTime::now_utc() + time::Duration::hours(10);
    params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
    params.use_authority_key_identifier_extension = true;
    let cert = params.signed_by(&subject_key, &issuer).unwrap();
    let identity = (
        vec![cert.der().to_vec(), env.keys.serving_ca.cert_der().to_vec()],
        key.pkcs8_der().to_vec(),
    );
    let client = gateway::split::relay::ApiClient::new(
        &format!("localhost:{}", api.addr.port()),
        env.keys.serving_ca.cert_der(),
        identity.0,
        identity.1,
    )
    .unwrap();
    assert!(
        client.trust().await.is_err(),
        "a certificate without clientAuth got in"
    );
    // The same certificate with clientAuth (what `bcctl pki issue-internal` makes) gets in.
    let (chain, key) = common::internal_identity(&env.keys);
    let good = gateway::split::relay::ApiClient::new(
        &format!("localhost:{}", api.addr.port()),
        env.keys.serving_ca.cert_der(),
        chain,
        key,
    )
    .unwrap();
    good.trust()
        .await
        .expect("an internal certificate with clientAuth gets in");
}

/// Whether the server closes a connection (raw TCP or TLS) within `within`.
async fn closed_within(stream: &mut (impl tokio::io::AsyncRead + Unpin), within: Duration) -> bool {
    let mut buf = [0u8; 256];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
        }
    }
}

#[tokio::test]
async fn the_internal_endpoint_closes_silent_connections_after_its_handshake_timeout() {
    let db = TestDb::postgres().await.unwrap();
    let env = common::start(db.store().await.unwrap(), |_| {}).await;
    let limits = EdgeLimits {
        handshake_timeout: Duration::from_millis(500),
        ..EdgeLimits::internal()
    };
    let api = api(&env, limits).await;
    let mut silent = Vec::new();
    for _ in 0..20 {
        silent.push(tokio::net::TcpStream::connect(api.addr).await.unwrap());
    }
    let started = tokio::time::Instant::now();
    for tcp in &mut silent {
        let left = Duration::from_secs(5).saturating_sub(started.elapsed());
        assert!(
            closed_within(tcp, left).await,
            "a silent connection held past 5 s"
        );
    }
}

#[tokio::test]
async fn the_internal_endpoint_caps_connections_per_peer() {
    let db = TestDb::postgres().await.unwrap();
    let env = common::start(db.store().await.unwrap(), |_| {}).await;
    let limits = EdgeLimits {
        max_connections_per_peer: 2,
        handshake_timeout: Duration::from_secs(60),
        ..EdgeLimits::internal()
    };
    let api = api(&env, limits).await;
    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(tokio::net::TcpStream::connect(api.addr).await.unwrap());
    }
    let mut third = tokio::net::TcpStream::connect(api.addr).await.unwrap();
    assert!(
        closed_within(&mut third, Duration::from_secs(5)).await,
        "the third connection from one peer is closed at accept"
    );
    for tcp in &mut held {
        assert!(
            !closed_within(tcp, Duration::from_millis(200)).await,
            "the first two are held"
        );
    }
}

#[tokio::test]
async fn the_internal_endpoint_closes_an_idle_gateway_connection() {
    let db = TestDb::postgres().await.unwrap();
    let env = common::start(db.store().await.unwrap(), |_| {}).await;
    let limits = EdgeLimits {
        idle_timeout: Duration::from_millis(500),
        ..EdgeLimits::internal()
    };
    let api = api(&env, limits).await;
    let ca = env.keys.serving_ca.cert_der().to_vec();
    let config = client_config(&ca, Some(common::internal_identity(&env.keys)));
    let tcp = tokio::net::TcpStream::connect(api.addr).await.unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(config)
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    tls.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .await
        .unwrap();
    tls.flush().await.unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 1024];
    let closed = loop {
        match tokio::time::timeout(Duration::from_secs(8), tls.read(&mut buf)).await {
            Err(_) => break false,
            Ok(Ok(0)) | Ok(Err(_)) => break true,
            Ok(Ok(n)) => seen.extend_from_slice(&buf[..n]),
        }
    };
    assert!(closed, "an idle connection held past 8 s");
    // Frames: 9-byte headers; a GOAWAY (type 7) came before the end.
    let mut at = 0;
    let mut goaway = false;
    while at + 9 <= seen.len() {
        let len = u32::from_be_bytes([0, seen[at], seen[at + 1], seen[at + 2]]) as usize;
        goaway |= seen[at + 3] == 7;
        at += 9 + len;
    }
    assert!(goaway, "the server said GOAWAY");
}

#[tokio::test]
async fn a_real_join_is_far_below_the_message_limit() {
    let db = TestDb::postgres().await.unwrap();
    let env = common::start(db.store().await.unwrap(), |_| {}).await;
    let (req, _) = env.join_request(&env.token(1).await);
    let len = prost::Message::encoded_len(&req);
    eprintln!("a join-token Join is {len} bytes");
    // Room for TPM evidence and an event log: the limit is far above a join-token Join.
    assert!(len < 1024, "{len}");
    assert!(len * 32 < EdgeLimits::public().max_message_bytes);
}
