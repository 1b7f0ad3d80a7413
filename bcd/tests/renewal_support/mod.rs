//! Shared by the renewal tests: a fake gateway (real TLS 1.3 with a serving certificate from the
//! deployment's real serving CA, a tonic NodeService whose answers the test picks), leaves from
//! a CA of the attacker's own, and signed RenewResponse bodies.

#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use domain::pki::statement::{sign, RenewResponseStatement};
use domain::pki::{
    issue_serving_certificate, KeyRole, KeySet, NodeIdentity, PrivateKey, PublicKey, Serial,
    ServingCertificateRequest, ServingRole, SpiffeId,
};
use prost::Message;
use proto::node_service_server::{NodeService, NodeServiceServer};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use sha2::{Digest, Sha256};
use time::{Duration, OffsetDateTime};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::Connected;
use tonic::{Request, Response, Status, Streaming};

use crate::common::now;

/// What the fake gateway answers a Renew with.
pub type RenewAnswer =
    Arc<dyn Fn(proto::RenewRequest) -> Result<proto::SignedRenewResponse, Status> + Send + Sync>;

/// What the fake gateway answers a SiteLease with.
pub type LeaseAnswer =
    Arc<dyn Fn(proto::SiteLeaseRequest) -> Result<proto::SiteLeaseResponse, Status> + Send + Sync>;
/// What the fake gateway answers a BootToken with.
pub type BootAnswer =
    Arc<dyn Fn(proto::BootTokenRequest) -> Result<proto::BootTokenResponse, Status> + Send + Sync>;
/// What the fake gateway answers a Join with.
pub type JoinAnswer =
    Arc<dyn Fn(proto::JoinRequest) -> Result<proto::SignedJoinResponse, Status> + Send + Sync>;

/// What a session of the fake gateway does besides its Welcome: with a script, the Welcome
/// carries the real time moved by `welcome_offset_ms` (a gateway that lies about the time),
/// every command of `commands` follows it (in every session), and every message the node sends
/// is forwarded to `seen`.
#[derive(Clone)]
pub struct CommandScript {
    pub commands: Arc<std::sync::Mutex<Vec<proto::Command>>>,
    pub seen: tokio::sync::mpsc::UnboundedSender<proto::NodeMessage>,
    pub welcome_offset_ms: i64,
}

/// The fake gateway's answers besides Renew and Session (UNIMPLEMENTED when absent).
#[derive(Clone, Default)]
pub struct OtherAnswers {
    pub lease: Option<LeaseAnswer>,
    pub boot: Option<BootAnswer>,
    pub join: Option<JoinAnswer>,
    pub script: Option<CommandScript>,
    /// Ends every session with this status right after the Welcome (a gateway whose revocation
    /// feed stopped, say).
    pub end_sessions_with: Option<Status>,
    /// Sent right after the Welcome, then the stream ends (a RevocationNotice, say).
    pub after_welcome: Vec<proto::GatewayMessage>,
}

struct Fake {
    renew: RenewAnswer,
    welcome_time_ms: i64,
    other: OtherAnswers,
}

type GatewayStream = ReceiverStream<Result<proto::GatewayMessage, Status>>;

#[tonic::async_trait]
impl NodeService for Fake {
    async fn join(
        &self,
        request: Request<proto::JoinRequest>,
    ) -> Result<Response<proto::SignedJoinResponse>, Status> {
        match &self.other.join {
            Some(answer) => answer(request.into_inner()).map(Response::new),
            None => Err(Status::unimplemented("a fake gateway")),
        }
    }

    async fn renew(
        &self,
        request: Request<proto::RenewRequest>,
    ) -> Result<Response<proto::SignedRenewResponse>, Status> {
        (self.renew)(request.into_inner()).map(Response::new)
    }

    type SessionStream = GatewayStream;

    async fn session(
        &self,
        request: Request<Streaming<proto::NodeMessage>>,
    ) -> Result<Response<Self::SessionStream>, Status> {
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let script = self.other.script.clone();
        let server_time_ms = match &script {
            Some(script) => {
                (now().unix_timestamp() * 1000).saturating_add(script.welcome_offset_ms)
            }
            None => self.welcome_time_ms,
        };
        let welcome = proto::GatewayMessage {
            body: Some(proto::gateway_message::Body::Welcome(proto::Welcome {
                server_time_ms,
                trust_version: 0,
                signed_trust_bundle: Vec::new(),
                trust_bundle_signature: Vec::new(),
            })),
        };
        let mut inbound = request.into_inner();
        let end_with = self.other.end_sessions_with.clone();
        let after_welcome = self.other.after_welcome.clone();
        tokio::spawn(async move {
            let _ = tx.send(Ok(welcome)).await;
            if let Some(status) = end_with {
                let _ = tx.send(Err(status)).await;
                return;
            }
            if !after_welcome.is_empty() {
                for message in after_welcome {
                    let _ = tx.send(Ok(message)).await;
                }
                return;
            }
            let Some(script) = script else {
                // Hold the session while the node keeps it open.
                while let Ok(Some(_)) = inbound.message().await {}
                drop(tx);
                return;
            };
            let commands = script.commands.lock().unwrap().clone();
            for command in commands {
                let message = proto::GatewayMessage {
                    body: Some(proto::gateway_message::Body::Command(command)),
                };
                let _ = tx.send(Ok(message)).await;
            }
            while let Ok(Some(message)) = inbound.message().await {
                let _ = script.seen.send(message);
            }
            drop(tx);
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn site_lease(
        &self,
        request: Request<proto::SiteLeaseRequest>,
    ) -> Result<Response<proto::SiteLeaseResponse>, Status> {
        match &self.other.lease {
            Some(answer) => answer(request.into_inner()).map(Response::new),
            None => Err(Status::unimplemented("a fake gateway")),
        }
    }

    async fn boot_token(
        &self,
        request: Request<proto::BootTokenRequest>,
    ) -> Result<Response<proto::BootTokenResponse>, Status> {
        match &self.other.boot {
            Some(answer) => answer(request.into_inner()).map(Response::new),
            None => Err(Status::unimplemented("a fake gateway")),
        }
    }
}

struct Conn(tokio_rustls::server::TlsStream<TcpStream>);

impl Connected for Conn {
    type ConnectInfo = ();
    fn connect_info(&self) -> Self::ConnectInfo {}
}

impl AsyncRead for Conn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// A running fake gateway.
pub struct FakeGateway {
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl FakeGateway {
    /// `127.0.0.1:<port>`, as `bcd node --server` takes it.
    pub fn server(&self) -> String {
        self.addr.to_string()
    }
}

impl Drop for FakeGateway {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts a fake gateway holding a real serving certificate of `ks` (a compromised gateway),
/// answering Renew with `renew` and Session with a Welcome carrying `welcome_time_ms`.
pub async fn fake_gateway(ks: &KeySet, renew: RenewAnswer, welcome_time_ms: i64) -> FakeGateway {
    fake_gateway_with(ks, renew, welcome_time_ms, OtherAnswers::default()).await
}

/// [`fake_gateway`] that also answers SiteLease, BootToken and Join with `other`.
pub async fn fake_gateway_with(
    ks: &KeySet,
    renew: RenewAnswer,
    welcome_time_ms: i64,
    other: OtherAnswers,
) -> FakeGateway {
    let key = PrivateKey::generate(KeyRole::Serving).unwrap();
    let issued = issue_serving_certificate(
        &ks.serving_ca,
        key.public_key(),
        &ServingCertificateRequest {
            dns_names: vec!["gw.example.com".into()],
            ip_addresses: vec![IpAddr::V4(Ipv4Addr::LOCALHOST)],
            role: ServingRole::Gateway,
            serial: Serial::generate().unwrap(),
            lifetime: Duration::days(1),
        },
        now() - Duration::minutes(5),
    )
    .unwrap();
    let mut config = rustls::ServerConfig::builder_with_provider(bcd::client::provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![
                CertificateDer::from(issued.der),
                CertificateDer::from(ks.serving_ca.cert_der().to_vec()),
            ],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.pkcs8_der().to_vec())),
        )
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Conn, std::io::Error>>(16);
    let accept = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            let tx = tx.clone();
            tokio::spawn(async move {
                if let Ok(tls) = acceptor.accept(tcp).await {
                    let _ = tx.send(Ok(Conn(tls))).await;
                }
            });
        }
    });
    let service = NodeServiceServer::new(Fake {
        renew,
        welcome_time_ms,
        other,
    });
    let task = tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(ReceiverStream::new(rx))
            .await;
        accept.abort();
    });
    FakeGateway { addr, task }
}

/// A leaf for `public_key` naming `id` and `role_ou`, valid from now for `lifetime`, from a CA
/// of its own: (leaf DER, CA DER).
pub fn own_ca_leaf(
    id: &SpiffeId,
    role_ou: &str,
    public_key: &PublicKey,
    lifetime: Duration,
) -> (Vec<u8>, Vec<u8>) {
    let ca_key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut ca = rcgen::CertificateParams::default();
    ca.distinguished_name
        .push(rcgen::DnType::OrganizationName, id.trust_domain.as_str());
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "Node CA");
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
    ca.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign];
    ca.not_before = now() - Duration::hours(1);
    ca.not_after = now() + Duration::days(3660);
    let ca_der = ca.self_signed(&ca_key).unwrap().der().to_vec();
    let issuer = rcgen::Issuer::new(ca, ca_key);

    let mut leaf = rcgen::CertificateParams::default();
    leaf.distinguished_name
        .push(rcgen::DnType::OrganizationalUnitName, role_ou);
    leaf.subject_alt_names = vec![rcgen::SanType::URI(id.to_string().try_into().unwrap())];
    leaf.is_ca = rcgen::IsCa::ExplicitNoCa;
    leaf.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
    leaf.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    leaf.not_before = now();
    leaf.not_after = now() + lifetime;
    let spki = rcgen::SubjectPublicKeyInfo::from_der(public_key.spki_der()).unwrap();
    let der = leaf.signed_by(&spki, &issuer).unwrap().der().to_vec();
    (der, ca_der)
}

/// The public key a Renew request's CSR carries.
pub fn csr_key(request: &proto::RenewRequest) -> PublicKey {
    domain::pki::VerifiedCsr::verify(&request.csr)
        .unwrap()
        .public_key()
        .clone()
}

/// SHA-256 of a Renew request's CSR.
pub fn csr_sha256(request: &proto::RenewRequest) -> [u8; 32] {
    Sha256::digest(&request.csr).into()
}

/// A RenewResponse body for `id` (as the leaf `current` names it) with `chain`.
pub fn body(
    current: &NodeIdentity,
    csr_sha256: [u8; 32],
    chain: Vec<Vec<u8>>,
    server_time: OffsetDateTime,
) -> proto::RenewResponse {
    proto::RenewResponse {
        certificate_chain: chain,
        trust_roots: Vec::new(),
        not_after_ms: 0,
        server_time_ms: (server_time.unix_timestamp_nanos() / 1_000_000) as i64,
        csr_sha256: csr_sha256.to_vec(),
        trust_domain: current.spiffe_id.trust_domain.to_string(),
        node_id: current.spiffe_id.node.to_string(),
        site_id: current.spiffe_id.site.to_string(),
        role: current.role.to_string(),
        identity_generation: 1,
        allowed_kinds: Vec::new(),
    }
}

/// `body` encoded and signed with `signer` under `renew-response`, bound to `bound_to`.
pub fn signed(
    signer: &PrivateKey,
    bound_to: [u8; 32],
    body: &proto::RenewResponse,
) -> proto::SignedRenewResponse {
    let response = body.encode_to_vec();
    let signature = sign(
        signer,
        &RenewResponseStatement {
            csr_sha256: bound_to,
            response: &response,
        },
    )
    .unwrap();
    proto::SignedRenewResponse {
        response,
        signature: signature.as_bytes().to_vec(),
    }
}
