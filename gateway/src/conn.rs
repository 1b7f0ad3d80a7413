//! One accepted connection up to the point HTTP/2 starts: the rustls handshake (with the
//! endpoint's client verifier, [`crate::tls::NodeClientVerifier`] or
//! [`crate::internal_tls::InternalClientVerifier`]) and the client's HTTP/2 preface, both within
//! the endpoint's `handshake_timeout` ([`crate::limits::EdgeLimits`]; [`crate::http2`] applies
//! it). A connection that does not get that far is dropped, so an idle TLS connection that never
//! speaks HTTP/2 is held for at most the timeout.
//!
//! The connection then carries the [`VerifiedNode`] it proved, if any, into every request's
//! extensions as a [`PeerInfo`].

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use domain::pki::TrustDomain;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use crate::tls::VerifiedNode;

/// The bytes every HTTP/2 client sends first (RFC 9113, 3.4).
pub const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

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

/// Why a connection did not reach HTTP/2.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeFailure {
    #[error("TLS handshake failed: {0}")]
    Tls(io::Error),
    #[error("the connection closed before the HTTP/2 preface: {0}")]
    NoPreface(io::Error),
    #[error("the first bytes after the TLS handshake are not the HTTP/2 preface")]
    BadPreface,
}

/// A TLS connection whose handshake completed and whose client sent the HTTP/2 preface. The
/// preface, read to check it, is read again first by HTTP/2.
pub struct TlsConn {
    inner: TlsStream<TcpStream>,
    replay: usize,
}

impl TlsConn {
    /// The TLS session (for tests: the handshake kind, the peer's certificates).
    pub fn tls(&self) -> &rustls::ServerConnection {
        self.inner.get_ref().1
    }
}

/// The TLS handshake, then the HTTP/2 preface. The caller bounds the time it takes.
pub async fn handshake(
    acceptor: &TlsAcceptor,
    trust_domain: &TrustDomain,
    tcp: TcpStream,
    remote: SocketAddr,
) -> Result<(TlsConn, PeerInfo), HandshakeFailure> {
    let mut stream = acceptor.accept(tcp).await.map_err(HandshakeFailure::Tls)?;
    let (node, client_leaf) = {
        let (_, conn) = stream.get_ref();
        let leaf = conn
            .peer_certificates()
            .and_then(|c| c.first())
            .map(|c| Arc::from(c.as_ref()));
        (VerifiedNode::from_connection(conn, trust_domain), leaf)
    };
    let mut preface = [0u8; 24];
    stream
        .read_exact(&mut preface)
        .await
        .map_err(HandshakeFailure::NoPreface)?;
    if &preface != H2_PREFACE {
        return Err(HandshakeFailure::BadPreface);
    }
    Ok((
        TlsConn {
            inner: stream,
            replay: 0,
        },
        PeerInfo {
            remote,
            node,
            client_leaf,
        },
    ))
}

impl AsyncRead for TlsConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.replay < H2_PREFACE.len() {
            let rest = &H2_PREFACE[self.replay..];
            let n = rest.len().min(buf.remaining());
            buf.put_slice(&rest[..n]);
            self.replay += n;
            return Poll::Ready(Ok(()));
        }
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
