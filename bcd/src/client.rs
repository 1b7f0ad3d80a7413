//! The network client: gRPC (`bc.wire.v1.NodeService`) over TLS 1.3 pinned to the serving CA.
//!
//! bcd never trusts system roots. [`PinnedServingCa`] is a rustls `ServerCertVerifier` that
//! accepts the gateway's chain only when one of the certificates the gateway sent has the SPKI
//! `serving_ca_spki_pin` names, and webpki verifies the leaf (signatures, validity, serverAuth,
//! and the name bcd dialled) with that certificate as the only trust anchor. The pinned CA must
//! itself be within its validity.
//!
//! TLS is terminated here rather than by tonic: [`connect`] dials TCP, runs the rustls handshake
//! (ALPN `h2`), and hands the stream to tonic through a connector, so the same code presents the
//! node certificate and key for Renew and the session and presents nothing for Join.
//!
//! [`GrpcJoinTransport`] implements [`crate::join::JoinTransport`] on a private current-thread
//! runtime (the join loop itself stays synchronous and testable with a stand-in transport).

use std::future::Future;
use std::pin::Pin as BoxPin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration as StdDuration;

use domain::pki::{Pin, PrivateKey};
use hyper_util::rt::TokioIo;
use prost::Message as _;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, OtherError, SignatureScheme};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;
use tonic::codegen::http::Uri;
use tonic::transport::{Channel, Endpoint};

use crate::join::{CallError, JoinRequestParts, JoinTransport};
use crate::renewal_schedule::Pushback;
use crate::verify_join::{JoinResponseFields, SignedJoinResponse};

/// The gRPC client bcd uses.
pub type NodeClient = proto::node_service_client::NodeServiceClient<Channel>;

/// How long a TCP connect plus TLS handshake may take.
pub const CONNECT_TIMEOUT: StdDuration = StdDuration::from_secs(10);
/// How long one unary call (Join, Renew) may take.
pub const CALL_TIMEOUT: StdDuration = StdDuration::from_secs(30);
/// The metadata key of a gateway's retry hint.
pub const PUSHBACK_HEADER: &str = "grpc-retry-pushback-ms";

/// Why the client could not connect or call.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// `server` is not `host:port`.
    #[error(
        "server {0:?} is not host:port (for example gateway.example.com:8443 or 127.0.0.1:8443)"
    )]
    BadServer(String),
    /// The node certificate or key cannot be used for TLS.
    #[error("the node certificate or key cannot be used for TLS: {0}; {way}", way = crate::identity_store::WAY_BACK)]
    ClientIdentity(String),
    /// TCP connect failed or timed out.
    #[error("cannot reach the gateway at {addr}: {reason} (is bcctl serve running there? check `server` in config.toml)")]
    Unreachable {
        /// The address dialled.
        addr: String,
        /// Why.
        reason: String,
    },
    /// The TLS handshake failed (pin mismatch, an expired chain, a refused client certificate).
    #[error("TLS handshake with {addr} failed: {reason}")]
    Handshake {
        /// The address dialled.
        addr: String,
        /// Why, as rustls says it.
        reason: String,
    },
    /// The gateway's certificate did not verify under the pinned serving CA: retrying does not
    /// help.
    #[error("the gateway at {addr} is not trusted: {reason} (check serving_ca_spki_pin against `bcctl pki show`)")]
    ServerCertificate {
        /// The address dialled.
        addr: String,
        /// Why.
        reason: String,
    },
    /// The gateway refused this node's certificate as revoked (TLS alert certificate_revoked).
    #[error("the gateway at {addr} refused this node's certificate as revoked (TLS alert certificate_revoked); join again: bcd join --reset --yes, then bcd join with a new token")]
    CertificateRevoked {
        /// The address dialled.
        addr: String,
    },
    /// The HTTP/2 connection over TLS could not be set up (or the gateway closed it, which is how
    /// a refused client certificate shows in TLS 1.3).
    #[error("gateway {addr}: {reason}")]
    Connection {
        /// The address dialled.
        addr: String,
        /// Why.
        reason: String,
    },
}

impl ClientError {
    /// Whether trying again later may succeed.
    pub fn is_retryable(&self) -> bool {
        !matches!(
            self,
            ClientError::BadServer(_)
                | ClientError::ClientIdentity(_)
                | ClientError::ServerCertificate { .. }
                | ClientError::CertificateRevoked { .. }
        )
    }
}

/// Why the pinned verifier refused the gateway's chain.
#[derive(Debug, thiserror::Error)]
pub enum ServingCaError {
    /// No certificate the gateway sent has the pinned SPKI.
    #[error(
        "the gateway's chain holds no certificate of the pinned serving CA {pin}: \
         serving_ca_spki_pin is from another deployment, or something else answers at this address"
    )]
    NotPinned {
        /// The configured pin.
        pin: String,
    },
    /// The pinned CA's certificate is outside its validity.
    #[error(
        "the pinned serving CA's certificate is not valid now (renew the PKI: bcctl pki show)"
    )]
    CaNotValid,
    /// The chain failed webpki's checks.
    #[error("the gateway's certificate does not verify under the pinned serving CA: {0}")]
    Chain(String),
}

fn other(e: ServingCaError) -> rustls::Error {
    rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(e))))
}

/// The SHA-256 pin of a certificate's SubjectPublicKeyInfo, `None` when it does not parse.
pub fn certificate_spki_pin(der: &[u8]) -> Option<Pin> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    Some(Pin::of_spki_der(cert.tbs_certificate.subject_pki.raw))
}

fn valid_at(der: &[u8], now: UnixTime) -> bool {
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(der) else {
        return false;
    };
    let Ok(secs) = i64::try_from(now.as_secs()) else {
        return false;
    };
    match x509_parser::time::ASN1Time::from_timestamp(secs) {
        Ok(t) => cert.validity().is_valid_at(t),
        Err(_) => false,
    }
}

fn webpki_error(e: webpki::Error) -> rustls::Error {
    let cert = match e {
        webpki::Error::CertExpired { .. } => CertificateError::Expired,
        webpki::Error::CertNotValidYet { .. } => CertificateError::NotValidYet,
        webpki::Error::UnknownIssuer => CertificateError::UnknownIssuer,
        webpki::Error::InvalidSignatureForPublicKey => CertificateError::BadSignature,
        webpki::Error::CertNotValidForName(_) => CertificateError::NotValidForName,
        other_error => return other(ServingCaError::Chain(format!("{other_error:?}"))),
    };
    rustls::Error::InvalidCertificate(cert)
}

/// The server certificate verifier pinned to the serving CA's SPKI (see the module docs).
#[derive(Debug)]
pub struct PinnedServingCa {
    pin: Pin,
    provider: Arc<CryptoProvider>,
}

impl PinnedServingCa {
    /// A verifier for `serving_ca_spki_pin`.
    pub fn new(pin: Pin) -> PinnedServingCa {
        PinnedServingCa {
            pin,
            provider: provider(),
        }
    }
}

impl ServerCertVerifier for PinnedServingCa {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let anchor_at = intermediates
            .iter()
            .position(|c| certificate_spki_pin(c) == Some(self.pin))
            .ok_or_else(|| {
                other(ServingCaError::NotPinned {
                    pin: self.pin.to_string(),
                })
            })?;
        let anchor_der = &intermediates[anchor_at];
        if !valid_at(anchor_der, now) {
            return Err(other(ServingCaError::CaNotValid));
        }
        let anchor = webpki::anchor_from_trusted_cert(anchor_der).map_err(webpki_error)?;
        let others: Vec<CertificateDer<'_>> = intermediates
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != anchor_at)
            .map(|(_, c)| c.clone())
            .collect();
        let ee = webpki::EndEntityCert::try_from(end_entity).map_err(webpki_error)?;
        ee.verify_for_usage(
            self.provider.signature_verification_algorithms.all,
            &[anchor],
            &others,
            now,
            webpki::KeyUsage::server_auth(),
            None,
            None,
        )
        .map_err(webpki_error)?;
        ee.verify_is_valid_for_subject_name(server_name)
            .map_err(webpki_error)?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The ring crypto provider (as the gateway uses).
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The certificate chain and key bcd presents for Renew and the session.
#[derive(Debug, Clone)]
pub struct ClientIdentity {
    chain: Vec<Vec<u8>>,
    pkcs8: Vec<u8>,
}

impl ClientIdentity {
    /// The node's chain (leaf first, DER) and its key.
    pub fn new(chain: &[Vec<u8>], key: &PrivateKey) -> ClientIdentity {
        ClientIdentity {
            chain: chain.to_vec(),
            pkcs8: key.pkcs8_der().to_vec(),
        }
    }
}

/// TLS 1.3 only, pinned to the serving CA, with ALPN `h2`; `identity` is presented when given.
pub fn client_config(
    serving_ca: Pin,
    identity: Option<&ClientIdentity>,
) -> Result<ClientConfig, ClientError> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| ClientError::ClientIdentity(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(PinnedServingCa::new(serving_ca)));
    let mut config = match identity {
        None => builder.with_no_client_auth(),
        Some(id) => {
            let chain = id
                .chain
                .iter()
                .map(|der| CertificateDer::from(der.clone()))
                .collect();
            let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(id.pkcs8.clone()));
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| ClientError::ClientIdentity(e.to_string()))?
        }
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

/// Where to connect: `host:port` and the name the serving certificate must carry.
#[derive(Debug, Clone)]
pub struct GatewayAddress {
    /// `host:port` as dialled.
    pub addr: String,
    /// The host as a TLS server name (DNS name or IP address).
    pub name: ServerName<'static>,
}

impl GatewayAddress {
    /// Parses `host:port` (`[v6]:port` for IPv6).
    pub fn parse(server: &str) -> Result<GatewayAddress, ClientError> {
        let bad = || ClientError::BadServer(server.to_owned());
        let server = server.trim();
        let (host, port) = server.rsplit_once(':').ok_or_else(bad)?;
        port.parse::<u16>().map_err(|_| bad())?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err(bad());
        }
        let name = ServerName::try_from(host.to_owned()).map_err(|_| bad())?;
        Ok(GatewayAddress {
            addr: server.to_owned(),
            name,
        })
    }
}

/// The tower connector tonic dials through: TCP, then our rustls handshake.
#[derive(Clone)]
struct PinnedConnector {
    address: GatewayAddress,
    tls: TlsConnector,
    /// A client certificate is presented: read the gateway's first bytes before writing.
    mutual: bool,
}

type ConnectFuture = BoxPin<
    Box<dyn Future<Output = Result<TokioIo<Prefixed<TlsStream<TcpStream>>>, ClientError>> + Send>,
>;

impl tower_service::Service<Uri> for PinnedConnector {
    type Response = TokioIo<Prefixed<TlsStream<TcpStream>>>;
    type Error = ClientError;
    type Future = ConnectFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _uri: Uri) -> Self::Future {
        let address = self.address.clone();
        let tls = self.tls.clone();
        let mutual = self.mutual;
        Box::pin(async move {
            let stream = dial(&address, &tls).await?;
            let stream = if mutual {
                first_read(&address, stream).await?
            } else {
                Prefixed::new(Vec::new(), stream)
            };
            Ok(TokioIo::new(stream))
        })
    }
}

/// How long to wait for the gateway's first bytes after a mutual handshake.
pub const FIRST_READ_TIMEOUT: StdDuration = StdDuration::from_secs(2);

/// In TLS 1.3 the client finishes its handshake before the gateway has checked the client
/// certificate; a refusal arrives as an alert just after. Writing first races it (the gateway
/// closes, the write gets a reset, and the alert is lost), so with a client certificate bcd
/// reads first: the gateway's HTTP/2 SETTINGS (kept for hyper) or the alert.
async fn first_read(
    address: &GatewayAddress,
    mut stream: TlsStream<TcpStream>,
) -> Result<Prefixed<TlsStream<TcpStream>>, ClientError> {
    use tokio::io::AsyncReadExt as _;
    let mut first = vec![0u8; 4096];
    match tokio::time::timeout(FIRST_READ_TIMEOUT, stream.read(&mut first)).await {
        // Nothing yet: carry on; hyper reads whatever comes.
        Err(_) => first.clear(),
        Ok(Ok(0)) => {
            return Err(ClientError::Connection {
                addr: address.addr.clone(),
                reason: "the gateway closed the connection right after the handshake".to_owned(),
            })
        }
        Ok(Ok(n)) => first.truncate(n),
        Ok(Err(e)) if is_revoked_alert(&e) => {
            return Err(ClientError::CertificateRevoked {
                addr: address.addr.clone(),
            })
        }
        Ok(Err(e)) => {
            return Err(ClientError::Handshake {
                addr: address.addr.clone(),
                reason: format!(
                    "the gateway refused this node's certificate: {}",
                    describe_io(&e)
                ),
            })
        }
    }
    Ok(Prefixed::new(first, stream))
}

/// A stream with bytes already read from it put back in front.
pub struct Prefixed<S> {
    prefix: Vec<u8>,
    at: usize,
    inner: S,
}

impl<S> Prefixed<S> {
    fn new(prefix: Vec<u8>, inner: S) -> Prefixed<S> {
        Prefixed {
            prefix,
            at: 0,
            inner,
        }
    }
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Prefixed<S> {
    fn poll_read(
        self: BoxPin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if this.at < this.prefix.len() {
            let n = buf.remaining().min(this.prefix.len() - this.at);
            buf.put_slice(&this.prefix[this.at..this.at + n]);
            this.at += n;
            return Poll::Ready(Ok(()));
        }
        BoxPin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Prefixed<S> {
    fn poll_write(
        self: BoxPin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        BoxPin::new(&mut self.get_mut().inner).poll_write(cx, data)
    }

    fn poll_flush(self: BoxPin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        BoxPin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: BoxPin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        BoxPin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: BoxPin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        BoxPin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

async fn dial(
    address: &GatewayAddress,
    tls: &TlsConnector,
) -> Result<TlsStream<TcpStream>, ClientError> {
    let tcp = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&address.addr))
        .await
        .map_err(|_| ClientError::Unreachable {
            addr: address.addr.clone(),
            reason: "timed out".to_owned(),
        })?
        .map_err(|e| ClientError::Unreachable {
            addr: address.addr.clone(),
            reason: e.to_string(),
        })?;
    let _ = tcp.set_nodelay(true);
    tokio::time::timeout(CONNECT_TIMEOUT, tls.connect(address.name.clone(), tcp))
        .await
        .map_err(|_| ClientError::Handshake {
            addr: address.addr.clone(),
            reason: "timed out".to_owned(),
        })?
        .map_err(|e| {
            let server_cert = e
                .get_ref()
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
                .is_some_and(|r| matches!(r, rustls::Error::InvalidCertificate(_)));
            if server_cert {
                ClientError::ServerCertificate {
                    addr: address.addr.clone(),
                    reason: describe_io(&e),
                }
            } else {
                ClientError::Handshake {
                    addr: address.addr.clone(),
                    reason: describe_io(&e),
                }
            }
        })
}

/// A rustls error in words: our verifier's refusal by its own message (rustls would show its
/// debug form).
pub fn describe_tls_error(e: &rustls::Error) -> String {
    match e {
        rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(inner))) => {
            format!("invalid peer certificate: {inner}")
        }
        other => other.to_string(),
    }
}

/// A handshake's IO error in words (see [`describe_tls_error`]).
pub fn describe_io(e: &std::io::Error) -> String {
    match e.get_ref() {
        Some(inner) => match inner.downcast_ref::<rustls::Error>() {
            Some(tls) => describe_tls_error(tls),
            None => inner.to_string(),
        },
        None => e.to_string(),
    }
}

/// The TLS alert the gateway sent, if a failed call's cause is one (in TLS 1.3 a refused client
/// certificate shows as an alert on the first read after the handshake).
pub fn received_alert(e: &(dyn std::error::Error + 'static)) -> Option<rustls::AlertDescription> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        let tls = s.downcast_ref::<rustls::Error>().or_else(|| {
            s.downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        });
        if let Some(rustls::Error::AlertReceived(alert)) = tls {
            return Some(*alert);
        }
        // hyper may carry the rustls error only as text.
        let text = s.to_string();
        if let Some(name) = text
            .split("received fatal alert: ")
            .nth(1)
            .and_then(|rest| rest.split(|c: char| !c.is_ascii_alphanumeric()).next())
        {
            if let Some(alert) = alert_by_name(name) {
                return Some(alert);
            }
        }
        source = s.source();
    }
    None
}

fn alert_by_name(name: &str) -> Option<rustls::AlertDescription> {
    use rustls::AlertDescription as A;
    [
        A::CertificateRevoked,
        A::BadCertificate,
        A::CertificateExpired,
        A::UnknownCA,
        A::CertificateUnknown,
        A::UnsupportedCertificate,
        A::AccessDenied,
        A::CertificateRequired,
        A::HandshakeFailure,
        A::DecryptError,
    ]
    .into_iter()
    .find(|a| format!("{a:?}") == name)
}

/// Whether the gateway refused this node's certificate as revoked at the handshake.
pub fn is_revoked_alert(e: &(dyn std::error::Error + 'static)) -> bool {
    received_alert(e) == Some(rustls::AlertDescription::CertificateRevoked)
}

/// A failed call in words: a TLS alert by name, else the gRPC code and message.
pub fn describe_status(status: &tonic::Status) -> String {
    match received_alert(status) {
        Some(alert) => format!(
            "the gateway refused this node's certificate at the TLS handshake (alert {alert:?})"
        ),
        None => format!("{:?}: {}", status.code(), error_chain(status)),
    }
}

/// Every message in an error's source chain, joined by `: `.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![e.to_string()];
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = s.source();
    }
    parts.join(": ")
}

/// Connects to the gateway: pinned TLS 1.3, the node identity presented when given.
pub async fn connect(
    server: &str,
    serving_ca: Pin,
    identity: Option<&ClientIdentity>,
) -> Result<NodeClient, ClientError> {
    let address = GatewayAddress::parse(server)?;
    let tls = TlsConnector::from(Arc::new(client_config(serving_ca, identity)?));
    let endpoint = Endpoint::from_shared(format!("http://{}", address.addr))
        .map_err(|_| ClientError::BadServer(server.to_owned()))?
        .connect_timeout(CONNECT_TIMEOUT)
        .http2_keep_alive_interval(StdDuration::from_secs(20))
        .keep_alive_timeout(StdDuration::from_secs(20));
    let addr = address.addr.clone();
    let channel = endpoint
        .connect_with_connector(PinnedConnector {
            address,
            tls,
            mutual: identity.is_some(),
        })
        .await
        .map_err(|e| {
            if is_revoked_alert(&e) {
                return ClientError::CertificateRevoked { addr: addr.clone() };
            }
            // Our own connector's error, when that is what failed, says it best.
            let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
            while let Some(s) = source {
                if let Some(ours) = s.downcast_ref::<ClientError>() {
                    return match ours {
                        ClientError::Unreachable { addr, reason } => ClientError::Unreachable {
                            addr: addr.clone(),
                            reason: reason.clone(),
                        },
                        ClientError::Handshake { addr, reason } => ClientError::Handshake {
                            addr: addr.clone(),
                            reason: reason.clone(),
                        },
                        ClientError::ServerCertificate { addr, reason } => {
                            ClientError::ServerCertificate {
                                addr: addr.clone(),
                                reason: reason.clone(),
                            }
                        }
                        ClientError::CertificateRevoked { addr } => {
                            ClientError::CertificateRevoked { addr: addr.clone() }
                        }
                        other => ClientError::Connection {
                            addr: addr.clone(),
                            reason: other.to_string(),
                        },
                    };
                }
                source = s.source();
            }
            ClientError::Connection {
                addr,
                reason: error_chain(&e),
            }
        })?;
    Ok(proto::node_service_client::NodeServiceClient::new(channel))
}

/// The gateway's `grpc-retry-pushback-ms` on a failed call, if any.
pub fn pushback_of(status: &tonic::Status) -> Option<Pushback> {
    status
        .metadata()
        .get(PUSHBACK_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(Pushback::from_header)
}

/// How a failed call is treated: ACCESS_DENIED is a refusal, transient codes are retried.
pub fn classify(status: &tonic::Status) -> CallError {
    use tonic::Code;
    match status.code() {
        Code::PermissionDenied | Code::Unauthenticated => CallError::Refused,
        Code::Unavailable
        | Code::ResourceExhausted
        | Code::DeadlineExceeded
        | Code::Aborted
        | Code::Cancelled
        | Code::Unknown => CallError::Retryable {
            message: format!("{:?}: {}", status.code(), status.message()),
            pushback: pushback_of(status),
        },
        code => CallError::Fatal(format!("{code:?}: {}", status.message())),
    }
}

/// Decodes a signed `bc.wire.v1.JoinResponse` body into the fields the agent checks.
pub fn decode_join_body(body: &[u8]) -> Result<JoinResponseFields, String> {
    let response = proto::JoinResponse::decode(body).map_err(|e| e.to_string())?;
    let mut chain = response.certificate_chain.into_iter();
    let leaf_der = chain
        .next()
        .ok_or("the JoinResponse carries no certificate")?;
    Ok(JoinResponseFields {
        csr_sha256: response.csr_sha256,
        trust_domain: response.trust_domain,
        leaf_der,
        chain_ders: chain.collect(),
        trust_version: 0,
        trust_roots: response.trust_roots,
        trust_bundle: None,
    })
}

/// [`JoinTransport`] over gRPC: pinned TLS, no client certificate.
pub struct GrpcJoinTransport {
    runtime: tokio::runtime::Runtime,
    server: String,
    serving_ca: Pin,
    signer_spki_der: Vec<u8>,
    client: Option<NodeClient>,
}

impl std::fmt::Debug for GrpcJoinTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrpcJoinTransport")
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

impl GrpcJoinTransport {
    /// A transport to `server`, pinned to `serving_ca`. The JoinService signing key's SPKI
    /// (from `join-signing.jwk`, checked against its pin by the caller) is attached to every
    /// answer so [`crate::verify_join`] checks the signature under it.
    pub fn new(
        server: &str,
        serving_ca: Pin,
        signer_spki_der: Vec<u8>,
    ) -> Result<GrpcJoinTransport, std::io::Error> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        Ok(GrpcJoinTransport {
            runtime,
            server: server.to_owned(),
            serving_ca,
            signer_spki_der,
            client: None,
        })
    }
}

impl JoinTransport for GrpcJoinTransport {
    fn join(&mut self, request: &JoinRequestParts) -> Result<SignedJoinResponse, CallError> {
        let wire = proto::JoinRequest {
            csr: request.csr_der.clone(),
            attestor: String::new(),
            sealed_token: request.sealed_token.as_bytes().to_vec(),
            role: request.role.to_string(),
            claims: Some(proto::HardwareClaims {
                product_uuid: request.claims.product_uuid.clone().unwrap_or_default(),
                macs: request.claims.macs.clone(),
                hardware_key: Vec::new(),
            }),
            attestation: Vec::new(),
        };
        let server = self.server.clone();
        let pin = self.serving_ca;
        let cached = self.client.take();
        let result = self.runtime.block_on(async move {
            let mut client = match cached {
                Some(client) => client,
                None => match connect(&server, pin, None).await {
                    Ok(client) => client,
                    Err(e) if e.is_retryable() => {
                        return Err(CallError::Retryable {
                            message: e.to_string(),
                            pushback: None,
                        })
                    }
                    Err(e) => return Err(CallError::Fatal(e.to_string())),
                },
            };
            let mut call = tonic::Request::new(wire);
            call.set_timeout(CALL_TIMEOUT);
            match client.join(call).await {
                Ok(answer) => Ok((client, answer.into_inner())),
                Err(status) => Err(classify(&status)),
            }
        });
        match result {
            Ok((client, answer)) => {
                self.client = Some(client);
                Ok(SignedJoinResponse {
                    body: answer.response,
                    signature: answer.signature,
                    signer_spki_der: self.signer_spki_der.clone(),
                })
            }
            // A failed call drops the connection; the next attempt dials again.
            Err(e) => Err(e),
        }
    }

    fn decode_body(&self, body: &[u8]) -> Result<JoinResponseFields, String> {
        decode_join_body(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_server_addresses() {
        assert!(GatewayAddress::parse("127.0.0.1:8443").is_ok());
        assert!(GatewayAddress::parse("gw.example.com:1").is_ok());
        assert!(GatewayAddress::parse("[::1]:8443").is_ok());
        assert!(GatewayAddress::parse("gw.example.com").is_err());
        assert!(GatewayAddress::parse(":8443").is_err());
        assert!(GatewayAddress::parse("gw:notaport").is_err());
    }

    #[test]
    fn finds_a_revocation_alert_in_text() {
        let io = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "received fatal alert: CertificateRevoked".to_owned(),
        );
        assert!(is_revoked_alert(&io));
        let io = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::AlertReceived(rustls::AlertDescription::CertificateRevoked),
        );
        assert!(is_revoked_alert(&io));
        let io = std::io::Error::other("received fatal alert: BadCertificate");
        assert!(!is_revoked_alert(&io));
    }

    #[test]
    fn classifies_statuses() {
        let denied = tonic::Status::permission_denied("Join refused");
        assert_eq!(classify(&denied), CallError::Refused);
        let mut busy = tonic::Status::unavailable("busy");
        busy.metadata_mut()
            .insert(PUSHBACK_HEADER, "2500".parse().expect("ascii"));
        match classify(&busy) {
            CallError::Retryable { pushback, .. } => assert_eq!(
                pushback,
                Some(Pushback::After(time::Duration::milliseconds(2500)))
            ),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            classify(&tonic::Status::invalid_argument("x")),
            CallError::Fatal(_)
        ));
    }
}
