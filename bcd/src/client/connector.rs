//! The tower connector tonic dials through: TCP, then our rustls handshake, then (when a client
//! certificate is presented) the gateway's first bytes, so a refusal alert is not lost. The
//! framed session (`session`) dials with the same pieces and maps failures the same way.

use std::future::Future;
use std::pin::Pin as BoxPin;
use std::task::{Context, Poll};
use std::time::Duration as StdDuration;

use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;
use tonic::codegen::http::Uri;

use super::diagnose::{describe_io, is_revoked_alert};
use super::error::ClientError;
use super::prefixed::Prefixed;

/// How long a TCP connect plus TLS handshake may take.
pub const CONNECT_TIMEOUT: StdDuration = StdDuration::from_secs(10);

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
pub(super) struct PinnedConnector {
    pub(super) address: GatewayAddress,
    pub(super) tls: TlsConnector,
    /// A client certificate is presented: read the gateway's first bytes before writing.
    pub(super) mutual: bool,
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
        Ok(Ok(0)) => return Err(closed_after_handshake(address)),
        Ok(Ok(n)) => first.truncate(n),
        Ok(Err(e)) => return Err(refused(address, &e)),
    }
    Ok(Prefixed::new(first, stream))
}

/// The gateway closed the connection right after a mutual handshake, before its first bytes.
pub(super) fn closed_after_handshake(address: &GatewayAddress) -> ClientError {
    ClientError::Connection {
        addr: address.addr.clone(),
        reason: "the gateway closed the connection right after the handshake".to_owned(),
    }
}

/// The first read after a mutual handshake failed: the gateway's refusal alert (certificate
/// revoked, or another) or a cut connection.
pub(super) fn refused(address: &GatewayAddress, e: &std::io::Error) -> ClientError {
    if is_revoked_alert(e) {
        return ClientError::CertificateRevoked {
            addr: address.addr.clone(),
        };
    }
    ClientError::Handshake {
        addr: address.addr.clone(),
        reason: format!(
            "the gateway refused this node's certificate: {}",
            describe_io(e)
        ),
    }
}

/// TCP to the gateway, within [`CONNECT_TIMEOUT`].
pub(super) async fn tcp_connect(address: &GatewayAddress) -> Result<TcpStream, ClientError> {
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
    Ok(tcp)
}

/// The TLS handshake did not finish within [`CONNECT_TIMEOUT`].
pub(super) fn handshake_timed_out(address: &GatewayAddress) -> ClientError {
    ClientError::Handshake {
        addr: address.addr.clone(),
        reason: "timed out".to_owned(),
    }
}

/// The TLS handshake failed: the gateway's certificate (pin, chain, name), or anything else.
pub(super) fn handshake_failed(address: &GatewayAddress, e: &std::io::Error) -> ClientError {
    let server_cert = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .is_some_and(|r| matches!(r, rustls::Error::InvalidCertificate(_)));
    if server_cert {
        ClientError::ServerCertificate {
            addr: address.addr.clone(),
            reason: describe_io(e),
        }
    } else {
        ClientError::Handshake {
            addr: address.addr.clone(),
            reason: describe_io(e),
        }
    }
}

async fn dial(
    address: &GatewayAddress,
    tls: &TlsConnector,
) -> Result<TlsStream<TcpStream>, ClientError> {
    let tcp = tcp_connect(address).await?;
    tokio::time::timeout(CONNECT_TIMEOUT, tls.connect(address.name.clone(), tcp))
        .await
        .map_err(|_| handshake_timed_out(address))?
        .map_err(|e| handshake_failed(address, &e))
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
}
