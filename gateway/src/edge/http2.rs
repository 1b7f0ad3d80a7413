//! Serving gRPC routes over HTTP/2 connections this crate owns, so that every limit of
//! [`EdgeLimits`] holds on both endpoints:
//!
//! - at accept, [`ConnectionCaps`] closes a connection over `max_connections` or
//!   `max_connections_per_peer` before any TLS work;
//! - the TLS handshake and the client's HTTP/2 preface must finish within `handshake_timeout`
//!   ([`crate::edge::conn::handshake`]; HTTP/2 starts, and sends its SETTINGS, right after the TLS
//!   handshake, and the preface is checked as it is read);
//! - HTTP/2 itself allows `max_streams_per_connection` streams (more are refused with
//!   `REFUSED_STREAM`) with windows sized to the message limit; the routes' services decode and
//!   encode at most `max_message_bytes` (set where they are built);
//! - a connection without an open stream for `idle_timeout` is sent GOAWAY; one older than
//!   `max_connection_age` (less up to a tenth, at random) is sent GOAWAY and dropped
//!   `connection_age_grace` later if streams are still open.
//!
//! A node connection that chose the session wire by ALPN is served by
//! [`crate::session::session_wire`] instead (no HTTP/2; the same caps, handshake timeout, message
//! limit and connection age).
//!
//! Every request carries its connection's [`PeerInfo`] in its extensions, as tonic's own server
//! would put it there. A stopped server stops accepting, sends every connection GOAWAY and ends
//! when they have closed (its task being aborted drops what is left).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use domain::pki::TrustDomain;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tonic::service::Routes;
use tonic::Status;
use tower::ServiceExt;

use crate::edge::conn::{handshake, PeerInfo};
use crate::edge::jitter::jitter;
use crate::edge::limits::{CapRefusal, ConnPermit, ConnectionCaps, EdgeCounters, EdgeLimits};

/// How often HTTP/2 PINGs check that a peer is still there, and how long it has to answer.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// How long an idle connection sent GOAWAY may take to close: HTTP/2's graceful close waits for
/// the client to answer a PING (in case it opened a stream meanwhile); one that does not answer
/// is dropped after this.
const IDLE_CLOSE_GRACE: Duration = Duration::from_secs(2);

/// One endpoint: its routes, its TLS and its limits.
pub struct EdgeServer {
    pub routes: Routes,
    pub acceptor: TlsAcceptor,
    pub trust_domain: TrustDomain,
    pub limits: EdgeLimits,
    pub counters: Arc<EdgeCounters>,
    /// The node sessions to serve over the session wire, on the node endpoint
    /// ([`crate::session::session_wire`]); `None` elsewhere, where a client choosing it is dropped.
    pub session_wire: Option<crate::node_service::server::NodeServer>,
}

/// Why serving stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("accepting connections failed for good: {0}")]
    Accept(std::io::Error),
}

/// Serves `listener` until `shutdown` resolves, then lets connections close (GOAWAY).
pub async fn serve(
    listener: TcpListener,
    server: EdgeServer,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let caps = ConnectionCaps::new(&server.limits);
    let shared = Arc::new(server);
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            _ = &mut shutdown => break,
            Some(_) = connections.join_next() => continue,
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
        let permit = match caps.admit(remote.ip()) {
            Ok(p) => p,
            Err(refusal) => {
                let counter = match refusal {
                    CapRefusal::Global { .. } => &shared.counters.refused_global,
                    CapRefusal::Peer { .. } => &shared.counters.refused_peer,
                };
                EdgeCounters::inc(counter);
                tracing::debug!(%remote, %refusal, "connection closed at accept");
                drop(tcp);
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        connections.spawn(connection(
            shared.clone(),
            tcp,
            remote,
            permit,
            stop_rx.clone(),
        ));
    }
    drop(listener);
    let _ = stop_tx.send(true);
    while connections.join_next().await.is_some() {}
    Ok(())
}

async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

async fn connection(
    shared: Arc<EdgeServer>,
    tcp: TcpStream,
    remote: std::net::SocketAddr,
    permit: ConnPermit,
    mut stop: watch::Receiver<bool>,
) {
    let _permit = permit;
    let limits = &shared.limits;
    let counters = &shared.counters;
    let preface_by = Instant::now() + limits.handshake_timeout;
    // Each stage is boxed, so that the connection's task is sized for none of them: the
    // handshake's state is freed when it is done, and a session-wire connection does not carry
    // room for HTTP/2's (C17).
    let accepted = tokio::select! {
        r = tokio::time::timeout_at(
            preface_by,
            Box::pin(handshake(&shared.acceptor, &shared.trust_domain, tcp, remote, preface_by, counters.clone())),
        ) => r,
        _ = stop.changed() => return,
    };
    let (io, peer) = match accepted {
        Ok(Ok(pair)) => pair,
        Ok(Err(e)) => {
            EdgeCounters::inc(&counters.handshake_failures);
            tracing::debug!(%remote, error = %e, "connection dropped before HTTP/2");
            return;
        }
        Err(_) => {
            EdgeCounters::inc(&counters.handshake_timeouts);
            tracing::debug!(%remote, timeout_ms = limits.handshake_timeout.as_millis() as u64, "no TLS handshake within the handshake timeout");
            return;
        }
    };

    let age = limits.max_connection_age.mul_f64(1.0 - jitter() / 10.0);
    if io.is_session_wire() {
        if let Some(server) = &shared.session_wire {
            let counters = &shared.counters;
            Box::pin(crate::session::session_wire::serve(
                server, io, peer, limits, counters, age, stop,
            ))
            .await;
        }
        return;
    }
    Box::pin(serve_http2(&shared, io, peer, age, stop)).await;
}

/// HTTP/2 on a connection past its handshake, until it closes: the stream, idle and age limits.
async fn serve_http2(
    shared: &EdgeServer,
    io: crate::edge::conn::TlsConn,
    peer: PeerInfo,
    age: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let limits = &shared.limits;
    let counters = &shared.counters;
    let remote = peer.remote;
    let (open_tx, mut open_rx) = watch::channel(0usize);
    let service = ConnService {
        routes: shared.routes.clone(),
        peer,
        open: Arc::new(open_tx),
    };
    let window = u32::try_from(limits.max_message_bytes)
        .unwrap_or(u32::MAX)
        .max(65_535);
    let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.max_streams_per_connection)
        .initial_stream_window_size(window)
        .initial_connection_window_size(window.saturating_mul(4))
        .adaptive_window(false)
        .max_header_list_size(16 * 1024)
        .max_pending_accept_reset_streams(20)
        .max_local_error_reset_streams(1024)
        .keep_alive_interval(KEEPALIVE_INTERVAL)
        .keep_alive_timeout(KEEPALIVE_TIMEOUT);
    let conn = builder.serve_connection(TokioIo::new(io), service);
    let mut conn = std::pin::pin!(conn);

    let mut age_at = Some(Instant::now() + age);
    let mut idle_at = Some(Instant::now() + limits.idle_timeout);
    let mut drop_at: Option<Instant> = None;
    let mut closing = false;
    loop {
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(%remote, error = %e, "connection ended with an error");
                }
                break;
            }
            r = open_rx.changed() => {
                if r.is_err() {
                    break;
                }
                let open = *open_rx.borrow_and_update();
                idle_at = (open == 0).then(|| Instant::now() + limits.idle_timeout);
            }
            _ = until(if closing { None } else { idle_at }) => {
                EdgeCounters::inc(&counters.idle_closed);
                tracing::debug!(%remote, "idle connection closed");
                conn.as_mut().graceful_shutdown();
                closing = true;
                drop_at = Some(Instant::now() + IDLE_CLOSE_GRACE.min(limits.connection_age_grace));
            }
            _ = until(age_at) => {
                EdgeCounters::inc(&counters.aged_out);
                tracing::debug!(%remote, "connection reached its maximum age");
                age_at = None;
                if !closing {
                    conn.as_mut().graceful_shutdown();
                    closing = true;
                }
                drop_at = Some(Instant::now() + limits.connection_age_grace);
            }
            _ = until(drop_at) => {
                tracing::debug!(%remote, "connection dropped: streams still open after the grace");
                break;
            }
            _ = stop.changed(), if !closing => {
                // The server stops (or is gone): GOAWAY, and a grace for what is in flight.
                conn.as_mut().graceful_shutdown();
                closing = true;
                drop_at = Some(Instant::now() + limits.connection_age_grace);
            }
        }
    }
}

/// The routes of one connection: each request gets the connection's [`PeerInfo`] and is
/// counted as an open stream until its response body is dropped.
#[derive(Clone)]
struct ConnService {
    routes: Routes,
    peer: PeerInfo,
    open: Arc<watch::Sender<usize>>,
}

impl hyper::service::Service<Request<Incoming>> for ConnService {
    type Response = Response<CountedBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, mut request: Request<Incoming>) -> Self::Future {
        let stream = OpenStream::new(self.open.clone());
        request.extensions_mut().insert(self.peer.clone());
        let routes = self.routes.clone();
        Box::pin(async move {
            let response = routes.oneshot(request).await?;
            Ok(response.map(|inner| CountedBody {
                inner,
                _stream: stream,
            }))
        })
    }
}

/// One open stream of a connection, counted until dropped.
struct OpenStream(Arc<watch::Sender<usize>>);

impl OpenStream {
    fn new(open: Arc<watch::Sender<usize>>) -> Self {
        open.send_modify(|n| *n += 1);
        OpenStream(open)
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// A response body that keeps its stream counted as open.
struct CountedBody {
    inner: tonic::body::Body,
    _stream: OpenStream,
}

impl Body for CountedBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
