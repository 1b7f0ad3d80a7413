//! Shared by the gateway's integration tests: a gateway over a test store, joins through the
//! real JoinService, and a tonic client over our own rustls connector.

#![allow(dead_code)]

use std::sync::Arc;

use commands::identity::{IdentityConfig, JoinService, NewToken};
use commands::{Clock, SystemClock};
use domain::identity::{ExpectBinding, TokenRole};
use domain::pki::{
    build_csr, seal_token, KeyRole, KeySet, KeySetLifetimes, PrivateKey, TokenSecret, TrustDomain,
};
use events::store::EventStore;
use gateway::run::{GatewayConfig, Running};
use hyper_util::rt::TokioIo;
use prost::Message;
use proto::node_service_client::NodeServiceClient;
use proto::session_wire::{write_frame, Frame, FrameReader, ALPN};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;
use tonic::transport::{Channel, Endpoint, Uri};

pub const TD: &str = "fleet.test";

pub struct Env {
    pub store: EventStore,
    pub keys: Arc<KeySet>,
    pub join: Arc<JoinService>,
    pub gateway: Running,
}

pub async fn start(store: EventStore, config: impl FnOnce(&mut GatewayConfig)) -> Env {
    let keys = Arc::new(
        KeySet::generate(
            TrustDomain::new(TD).unwrap(),
            OffsetDateTime::now_utc() - time::Duration::days(1),
            KeySetLifetimes::default(),
        )
        .unwrap(),
    );
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let join = Arc::new(
        JoinService::new(
            store.clone(),
            keys.clone(),
            clock.clone(),
            IdentityConfig::new(keys.trust_domain.clone()),
        )
        .unwrap(),
    );
    let mut cfg = GatewayConfig::new("127.0.0.1:0".parse().unwrap());
    config(&mut cfg);
    let gateway = gateway::run::start(store.clone(), keys.clone(), join.clone(), clock, cfg)
        .await
        .unwrap();
    Env {
        store,
        keys,
        join,
        gateway,
    }
}

impl Env {
    pub async fn token(&self, uses: u32) -> String {
        self.join
            .create_token(&NewToken {
                tenant_id: "t1".into(),
                site_id: "s1".into(),
                pool_id: "p1".into(),
                role: TokenRole::Node,
                uses,
                ttl_seconds: 3600,
                expect: ExpectBinding::default(),
                allow_reclaim: false,
                reclaim_node_id: None,
                for_node_id: None,
                require_approval: false,
            })
            .await
            .unwrap()
            .secret
    }

    /// A join request with a fresh node key, the token sealed to the JoinService.
    pub fn join_request(&self, token: &str) -> (proto::JoinRequest, PrivateKey) {
        let key = PrivateKey::generate(KeyRole::Node).unwrap();
        let csr = build_csr(&key).unwrap();
        let sha: [u8; 32] = Sha256::digest(&csr).into();
        let secret = TokenSecret::parse(token).unwrap();
        let sealed = seal_token(self.keys.join_encryption.public_key(), &secret, &sha).unwrap();
        (
            proto::JoinRequest {
                csr,
                attestor: String::new(),
                sealed_token: sealed.as_bytes().to_vec(),
                role: "node".into(),
                claims: None,
                attestation: vec![],
                agent_version: String::new(),
            },
            key,
        )
    }

    pub async fn client(
        &self,
        identity: Option<&Node>,
    ) -> Result<NodeServiceClient<Channel>, String> {
        connect(
            self.gateway.addr,
            self.keys.serving_ca.cert_der(),
            identity.map(|n| (n.chain.clone(), n.key.pkcs8_der().to_vec())),
        )
        .await
    }

    /// Joins over the wire (no client certificate) and returns the node.
    pub async fn join_node(&self, token: &str) -> Node {
        let (req, key) = self.join_request(token);
        let csr_sha256: [u8; 32] = Sha256::digest(&req.csr).into();
        let mut c = self.client(None).await.unwrap();
        let signed = c.join(req).await.unwrap().into_inner();
        // Signed by the JoinService key over these exact bytes, bound to this CSR.
        let sig = domain::pki::Signature::from_bytes(&signed.signature).expect("64-byte signature");
        domain::pki::statement::verify(
            self.keys.join_signing.public_key(),
            &domain::pki::statement::JoinResponseStatement {
                csr_sha256,
                response: &signed.response,
            },
            &sig,
        )
        .expect("JoinResponse signed by the JoinService key over this CSR");
        let resp = proto::JoinResponse::decode(signed.response.as_slice()).unwrap();
        assert_eq!(resp.csr_sha256, csr_sha256.to_vec());
        Node {
            node_id: resp.node_id,
            chain: resp.certificate_chain,
            key,
        }
    }
}

pub struct Node {
    pub node_id: String,
    pub chain: Vec<Vec<u8>>,
    pub key: PrivateKey,
}

/// A NodeService client over TLS pinned to `serving_ca_der`, presenting `identity` if given.
pub async fn connect(
    addr: std::net::SocketAddr,
    serving_ca_der: &[u8],
    identity: Option<(Vec<Vec<u8>>, Vec<u8>)>,
) -> Result<NodeServiceClient<Channel>, String> {
    Ok(NodeServiceClient::new(
        channel(addr, serving_ca_der, identity).await?,
    ))
}

/// A node's TLS client configuration: TLS 1.3, ALPN h2, pinned to `serving_ca_der`, presenting
/// `identity` (chain, key PKCS#8) if given.
pub fn client_tls(
    serving_ca_der: &[u8],
    identity: Option<(Vec<Vec<u8>>, Vec<u8>)>,
) -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from(serving_ca_der.to_vec()))
        .map_err(|e| e.to_string())?;
    let builder = rustls::ClientConfig::builder_with_provider(gateway::edge::tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots);
    let mut config = match identity {
        Some((chain, key)) => builder
            .with_client_auth_cert(
                chain.into_iter().map(CertificateDer::from).collect(),
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key)),
            )
            .map_err(|e| e.to_string())?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

/// A channel over TLS pinned to `serving_ca_der`, presenting `identity` if given.
pub async fn channel(
    addr: std::net::SocketAddr,
    serving_ca_der: &[u8],
    identity: Option<(Vec<Vec<u8>>, Vec<u8>)>,
) -> Result<Channel, String> {
    let config = client_tls(serving_ca_der, identity)?;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let channel = Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let connector = connector.clone();
            async move {
                let tcp = tokio::net::TcpStream::connect(addr).await?;
                let name = ServerName::try_from("localhost").map_err(std::io::Error::other)?;
                let tls = connector.connect(name, tcp).await?;
                Ok::<_, std::io::Error>(TokioIo::new(tls))
            }
        }))
        .await
        .map_err(|e| format!("{e:?}"))?;
    Ok(channel)
}

/// A gRPC Session on `client`: Hello queued, the stream opened. Returns the sender (room for
/// `capacity` messages) and the gateway's stream; the Welcome is the caller's to read.
pub async fn grpc_session(
    client: &mut NodeServiceClient<Channel>,
    capacity: usize,
) -> Result<
    (
        tokio::sync::mpsc::Sender<proto::NodeMessage>,
        tonic::Streaming<proto::GatewayMessage>,
    ),
    String,
> {
    let (tx, rx) = tokio::sync::mpsc::channel(capacity);
    tx.send(hello()).await.map_err(|e| e.to_string())?;
    let inbound = client
        .session(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .map_err(|s| s.to_string())?
        .into_inner();
    Ok((tx, inbound))
}

/// A node session over the session wire (ALPN `bc-session/1`): a TLS connection presenting
/// `identity`, the gateway's Open read, Hello sent and the Welcome read. Returns the connection
/// and its frame reader.
pub async fn wire_session(
    addr: std::net::SocketAddr,
    serving_ca_der: &[u8],
    identity: (Vec<Vec<u8>>, Vec<u8>),
) -> Result<(WireConn, FrameReader), String> {
    let mut wire = wire_connect(addr, serving_ca_der, Some(identity)).await?;
    let mut reader = FrameReader::new(1 << 20);
    match reader.next(&mut wire).await.map_err(|e| e.to_string())? {
        Some(Frame::Open) => {}
        other => return Err(format!("expected Open, got {other:?}")),
    }
    write_frame(&mut wire, &Frame::message(&hello()))
        .await
        .map_err(|e| e.to_string())?;
    match wire_message(&mut wire, &mut reader).await?.body {
        Some(proto::gateway_message::Body::Welcome(w)) if w.server_time_ms > 0 => {}
        other => return Err(format!("expected a Welcome, got {other:?}")),
    }
    Ok((wire, reader))
}

/// A session-wire connection.
pub type WireConn = tokio_rustls::client::TlsStream<tokio::net::TcpStream>;

/// A TLS connection choosing the session wire by ALPN, presenting `identity` if given.
pub async fn wire_connect(
    addr: std::net::SocketAddr,
    serving_ca_der: &[u8],
    identity: Option<(Vec<Vec<u8>>, Vec<u8>)>,
) -> Result<WireConn, String> {
    let mut config = client_tls(serving_ca_der, identity)?;
    config.alpn_protocols = vec![ALPN.to_vec()];
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    let name = ServerName::try_from("localhost").map_err(|e| e.to_string())?;
    let wire = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())?;
    if wire.get_ref().1.alpn_protocol() != Some(ALPN) {
        return Err("the gateway did not choose the session wire".into());
    }
    Ok(wire)
}

/// The next frame on a wire session, which must be a Message: the GatewayMessage it carries.
pub async fn wire_message(
    wire: &mut WireConn,
    reader: &mut FrameReader,
) -> Result<proto::GatewayMessage, String> {
    match reader.next(wire).await.map_err(|e| e.to_string())? {
        Some(Frame::Message(bytes)) => {
            proto::GatewayMessage::decode(bytes.as_slice()).map_err(|e| e.to_string())
        }
        other => Err(format!("expected a Message frame, got {other:?}")),
    }
}

pub fn hello() -> proto::NodeMessage {
    proto::NodeMessage {
        body: Some(proto::node_message::Body::Hello(proto::Hello {
            trust_version: 0,
            agent_version: "test".into(),
            ..Default::default()
        })),
    }
}

/// A renewal request for `node`: a fresh key's CSR and a renew-pop by the node's current key.
pub fn renew_request(node: &Node) -> proto::RenewRequest {
    let next = PrivateKey::generate(KeyRole::Node).unwrap();
    let csr = build_csr(&next).unwrap();
    let csr_sha256: [u8; 32] = Sha256::digest(&csr).into();
    let td = TrustDomain::new(TD).unwrap();
    let id = domain::pki::NodeIdentity::from_leaf_der(&node.chain[0], &td).unwrap();
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
    proto::RenewRequest {
        csr,
        chain: node.chain.clone(),
        client_time_ms: i64::try_from(client_time_ms).unwrap(),
        signature: proof.as_bytes().to_vec(),
        key_attestation: None,
    }
}

/// A gateway's internal client certificate (`bcctl pki issue-internal`) from `keys`' serving
/// CA, allowed to serve as `localhost` and `127.0.0.1` (the gateways' default names): (chain,
/// key PKCS#8).
pub fn internal_identity(keys: &KeySet) -> (Vec<Vec<u8>>, Vec<u8>) {
    internal_identity_for(keys, &["localhost", "127.0.0.1"])
}

/// A gateway `gw-1`'s internal client certificate allowed to serve as `serving_names`.
pub fn internal_identity_for(keys: &KeySet, serving_names: &[&str]) -> (Vec<Vec<u8>>, Vec<u8>) {
    let key = PrivateKey::generate(KeyRole::Serving).unwrap();
    let names: Vec<String> = serving_names.iter().map(|n| n.to_string()).collect();
    let issued = domain::pki::issue_internal_client_certificate(
        &keys.serving_ca,
        key.public_key(),
        "gw-1",
        &names,
        &domain::pki::Serial::generate().unwrap(),
        time::Duration::days(1),
        OffsetDateTime::now_utc() - time::Duration::minutes(5),
    )
    .unwrap();
    (
        vec![issued.der, keys.serving_ca.cert_der().to_vec()],
        key.pkcs8_der().to_vec(),
    )
}

/// The public half of `keys`, what a split gateway reads.
pub fn public_bundle(keys: &KeySet) -> domain::pki::PublicBundle {
    domain::pki::PublicBundle::of(keys)
}
