//! One accepted connection up to HTTP/2: the rustls handshake (with the endpoint's client verifier,
//! [`crate::edge::tls::NodeClientVerifier`] or
//! [`crate::split::internal_tls::InternalClientVerifier`]), then the client's HTTP/2 preface, both
//! within the endpoint's `handshake_timeout` ([`crate::edge::limits::EdgeLimits`]). A connection
//! that does not get that far is dropped, so an idle TLS connection that never speaks HTTP/2 is
//! held for at most the timeout.
//!
//! HTTP/2 starts as soon as the TLS handshake is done, and [`TlsConn`] checks the preface as
//! HTTP/2 reads it (against the same deadline), so the server's SETTINGS go out at once. A node
//! with a client certificate reads before it writes (a refusal alert comes after its handshake,
//! `bcd::client::connector`): the server's first bytes are what it waits for.
//!
//! The connection then carries the [`VerifiedNode`] it proved, if any, into every request's
//! extensions as a [`PeerInfo`].

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use domain::pki::TrustDomain;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use crate::edge::limits::EdgeCounters;
use crate::edge::tls::VerifiedNode;

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

/// Why a connection did not finish its TLS handshake.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeFailure {
    #[error("TLS handshake failed: {0}")]
    Tls(io::Error),
}

/// A TLS connection whose handshake completed. Until the client's HTTP/2 preface has been read
/// through it, a read fails when the bytes are not the preface, when the stream ends first, or
/// once the deadline has passed; each failure is counted once in the endpoint's
/// [`EdgeCounters`].
pub struct TlsConn {
    inner: TlsStream<TcpStream>,
    preface: Preface,
}

/// Where the connection is with the client's preface.
enum Preface {
    Checking(PrefaceCheck),
    Read,
    /// It failed (bad, missing or late); every later read fails too.
    Failed,
}

/// The preface not yet read in full: how much of it has been, and by when the rest must come.
struct PrefaceCheck {
    seen: usize,
    deadline: Pin<Box<Sleep>>,
    counters: Arc<EdgeCounters>,
}

impl TlsConn {
    /// Whether the client chose the session wire by ALPN ([`crate::session::session_wire`]).
    pub fn is_session_wire(&self) -> bool {
        chose_session_wire(self.tls())
    }

    /// The TLS session (for tests: the handshake kind, the peer's certificates).
    pub fn tls(&self) -> &rustls::ServerConnection {
        self.inner.get_ref().1
    }
}

/// Whether the handshake negotiated the session wire's ALPN protocol.
fn chose_session_wire(tls: &rustls::ServerConnection) -> bool {
    tls.alpn_protocol() == Some(proto::session_wire::ALPN)
}

/// The TLS handshake; the connection it returns checks the HTTP/2 preface against
/// `preface_by`. The caller bounds the time the handshake takes.
pub async fn handshake(
    acceptor: &TlsAcceptor,
    trust_domain: &TrustDomain,
    tcp: TcpStream,
    remote: SocketAddr,
    preface_by: Instant,
    counters: Arc<EdgeCounters>,
) -> Result<(TlsConn, PeerInfo), HandshakeFailure> {
    let stream = acceptor.accept(tcp).await.map_err(HandshakeFailure::Tls)?;
    let (node, client_leaf) = {
        let (_, conn) = stream.get_ref();
        let leaf = conn
            .peer_certificates()
            .and_then(|c| c.first())
            .map(|c| Arc::from(c.as_ref()));
        (VerifiedNode::from_connection(conn, trust_domain), leaf)
    };
    // The session wire has no preface: the gateway speaks first (crate::session::session_wire).
    let preface = if chose_session_wire(stream.get_ref().1) {
        Preface::Read
    } else {
        Preface::Checking(PrefaceCheck {
            seen: 0,
            deadline: Box::pin(tokio::time::sleep_until(preface_by)),
            counters,
        })
    };
    Ok((
        TlsConn {
            inner: stream,
            preface,
        },
        PeerInfo {
            remote,
            node,
            client_leaf,
        },
    ))
}

impl PrefaceCheck {
    /// Checks the bytes a read into a buffer with room returned (none: the stream ended);
    /// `Ok(true)` once the preface is complete.
    fn check(&mut self, read: &[u8]) -> io::Result<bool> {
        if read.is_empty() {
            EdgeCounters::inc(&self.counters.handshake_failures);
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the connection closed before the HTTP/2 preface",
            ));
        }
        let want = &H2_PREFACE[self.seen..];
        let n = read.len().min(want.len());
        if read[..n] != want[..n] {
            EdgeCounters::inc(&self.counters.bad_prefaces);
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the first bytes after the TLS handshake are not the HTTP/2 preface",
            ));
        }
        self.seen += n;
        Ok(self.seen == H2_PREFACE.len())
    }
}

impl AsyncRead for TlsConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match &mut this.preface {
            Preface::Read => return Pin::new(&mut this.inner).poll_read(cx, buf),
            Preface::Failed => {
                return Poll::Ready(Err(io::Error::other(
                    "the connection failed its HTTP/2 preface",
                )))
            }
            Preface::Checking(check) => {
                if check.deadline.as_mut().poll(cx).is_ready() {
                    EdgeCounters::inc(&check.counters.handshake_timeouts);
                    this.preface = Preface::Failed;
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "no HTTP/2 preface within the handshake timeout",
                    )));
                }
            }
        }
        let before = buf.filled().len();
        let room = buf.remaining() > 0;
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        if let (Preface::Checking(check), true) = (&mut this.preface, room) {
            match check.check(&buf.filled()[before..]) {
                Ok(false) => {}
                Ok(true) => this.preface = Preface::Read,
                Err(e) => {
                    this.preface = Preface::Failed;
                    return Poll::Ready(Err(e));
                }
            }
        }
        Poll::Ready(Ok(()))
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
