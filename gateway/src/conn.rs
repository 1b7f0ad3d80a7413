//! TLS in front of tonic: accepted TCP connections go through the rustls handshake (with the
//! [`crate::tls::NodeClientVerifier`]) before tonic sees them, and each connection carries the
//! [`VerifiedNode`] it proved, if any, into every request's extensions as a [`PeerInfo`].

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use domain::pki::TrustDomain;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tonic::transport::server::Connected;

use crate::tls::VerifiedNode;

/// How long a client may take to finish the TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// What a request knows about its connection: the peer address and the node identity its
/// client certificate proved (none for a machine that is joining).
#[derive(Clone, Debug)]
pub struct PeerInfo {
    pub remote: SocketAddr,
    pub node: Option<VerifiedNode>,
    /// The client certificate the handshake verified (DER), if any: on the api's internal
    /// endpoint, the gateway's internal certificate, whose names bound its serving certificates.
    pub client_leaf: Option<Arc<[u8]>>,
}

/// A TLS connection whose handshake completed.
pub struct TlsConn {
    inner: TlsStream<TcpStream>,
    info: PeerInfo,
}

impl Connected for TlsConn {
    type ConnectInfo = PeerInfo;

    fn connect_info(&self) -> PeerInfo {
        self.info.clone()
    }
}

impl AsyncRead for TlsConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// Accepts TCP connections on `listener`, runs each handshake concurrently (bounded by
/// [`HANDSHAKE_TIMEOUT`]) and yields the completed ones. Failed handshakes are logged at debug
/// level; the verifier has already counted them by reason.
pub fn tls_incoming(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    trust_domain: TrustDomain,
) -> tokio_stream::wrappers::ReceiverStream<Result<TlsConn, io::Error>> {
    let (tx, rx) = mpsc::channel::<Result<TlsConn, io::Error>>(256);
    let trust_domain = Arc::new(trust_domain);
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                _ = tx.closed() => break, // the server stopped: release the port
                a = listener.accept() => a,
            };
            let (tcp, remote) = match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // Out of file descriptors and the like: wait a little, keep serving.
                    tracing::warn!(error = %e, "accepting a TCP connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            let acceptor = acceptor.clone();
            let tx = tx.clone();
            let trust_domain = trust_domain.clone();
            tokio::spawn(async move {
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                    Ok(Ok(stream)) => {
                        let (node, client_leaf) = {
                            let (_, conn) = stream.get_ref();
                            let leaf = conn
                                .peer_certificates()
                                .and_then(|c| c.first())
                                .map(|c| Arc::from(c.as_ref()));
                            (VerifiedNode::from_connection(conn, &trust_domain), leaf)
                        };
                        let conn = TlsConn {
                            inner: stream,
                            info: PeerInfo {
                                remote,
                                node,
                                client_leaf,
                            },
                        };
                        let _ = tx.send(Ok(conn)).await;
                    }
                    Ok(Err(e)) => tracing::debug!(%remote, error = %e, "TLS handshake failed"),
                    Err(_) => tracing::debug!(%remote, "TLS handshake timed out"),
                }
            });
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}
