//! The node session over the gateway's own framing (`proto::session_wire`, ALPN
//! `bc-session/1`) instead of the gRPC `NodeService.Session` stream over HTTP/2.
//!
//! [`connect_session`] dials as [`super::connect`] does (TCP, pinned TLS 1.3, the node
//! certificate), offering ALPN `bc-session/1` only, and reads the gateway's first frame: the
//! gateway speaks first, so bcd reads first and a refusal alert right after the handshake maps
//! to the same [`ClientError`] as on the gRPC path (`CertificateRevoked`, else `Handshake`).
//! [`SessionClient::open_session`] then starts the session over that connection (the
//! connection task of `session_task`) and returns its [`SessionStream`], or the status the
//! gateway refused it with (its End frame), as the gRPC `Session` call would.
//!
//! A gateway that does not speak `bc-session/1` (older than this bcd: it refuses the ALPN with
//! the alert `no_application_protocol`, or negotiates something else) gets the gRPC session
//! instead: [`SessionClient::wire`] says which one a connection carries.

use std::sync::Arc;
use std::time::Duration as StdDuration;

use domain::pki::Pin;
use proto::session_wire::{Frame, FrameError, FrameReader, ALPN};
use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use super::connect::{connect, NodeClient};
use super::connector::{
    closed_after_handshake, handshake_failed, handshake_timed_out, refused, tcp_connect,
    GatewayAddress, CONNECT_TIMEOUT,
};
use super::diagnose::received_alert;
use super::error::ClientError;
use super::session_task::{self, end_status, INBOUND_BUFFER, SHUTDOWN_TIMEOUT};
use super::tls::{session_client_config, ClientIdentity};

/// The largest session frame bcd reads: tonic's default limit on a decoded message (4 MiB),
/// which the gRPC session had.
pub const SESSION_MAX_FRAME: usize = 4 * 1024 * 1024;

/// How long the gateway may take, after the handshake, to send its first frame (Open or End).
pub const OPEN_TIMEOUT: StdDuration = CONNECT_TIMEOUT;

/// Which wire a session runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionWire {
    /// The gateway's own framing, ALPN `bc-session/1`.
    Framed,
    /// gRPC `NodeService.Session` over HTTP/2 (a gateway without `bc-session/1`).
    Grpc,
}

/// A connection to the gateway ready to carry one node session ([`connect_session`]).
pub struct SessionClient {
    conn: Conn,
}

enum Conn {
    /// The gateway sent Open: the stream, and the reader holding any bytes read past it.
    Framed {
        stream: Box<TlsStream<TcpStream>>,
        reader: FrameReader,
    },
    /// The gateway sent End as its first frame: the session's end, already known.
    Ended(Result<(), Status>),
    /// A gateway without `bc-session/1`: the gRPC client.
    Grpc(NodeClient),
}

impl std::fmt::Debug for SessionClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionClient")
            .field("wire", &self.wire())
            .finish_non_exhaustive()
    }
}

/// Connects to the gateway at `server` for a node session, presenting `identity`: over
/// `bc-session/1` when the gateway speaks it (its first frame read), else the gRPC client.
pub async fn connect_session(
    server: &str,
    serving_ca: Pin,
    identity: &ClientIdentity,
) -> Result<SessionClient, ClientError> {
    let address = GatewayAddress::parse(server)?;
    let tls = TlsConnector::from(Arc::new(session_client_config(serving_ca, identity)?));
    let tcp = tcp_connect(&address).await?;
    let stream =
        match tokio::time::timeout(CONNECT_TIMEOUT, tls.connect(address.name.clone(), tcp)).await {
            Err(_) => return Err(handshake_timed_out(&address)),
            Ok(Err(e))
                if received_alert(&e) == Some(rustls::AlertDescription::NoApplicationProtocol) =>
            {
                return grpc(server, serving_ca, identity).await
            }
            Ok(Err(e)) => return Err(handshake_failed(&address, &e)),
            Ok(Ok(stream)) => stream,
        };
    if stream.get_ref().1.alpn_protocol() != Some(ALPN) {
        drop(stream);
        return grpc(server, serving_ca, identity).await;
    }
    first_frame(&address, stream).await
}

async fn grpc(
    server: &str,
    serving_ca: Pin,
    identity: &ClientIdentity,
) -> Result<SessionClient, ClientError> {
    let client = connect(server, serving_ca, Some(identity)).await?;
    Ok(SessionClient {
        conn: Conn::Grpc(client),
    })
}

/// Reads the gateway's first frame after the handshake: Open, or End with the refusal.
async fn first_frame(
    address: &GatewayAddress,
    mut stream: TlsStream<TcpStream>,
) -> Result<SessionClient, ClientError> {
    let protocol_error = |reason: String| ClientError::Connection {
        addr: address.addr.clone(),
        reason,
    };
    let mut reader = FrameReader::new(SESSION_MAX_FRAME);
    let frame = match tokio::time::timeout(OPEN_TIMEOUT, reader.next(&mut stream)).await {
        Err(_) => {
            return Err(protocol_error(format!(
                "the gateway sent neither Open nor End within {} s of the TLS handshake",
                OPEN_TIMEOUT.as_secs()
            )))
        }
        Ok(Ok(Some(frame))) => frame,
        Ok(Ok(None)) => return Err(closed_after_handshake(address)),
        // The refusal alert, as the gRPC path's first read maps it.
        Ok(Err(FrameError::Io(e))) => return Err(refused(address, &e)),
        Ok(Err(e)) => {
            return Err(protocol_error(format!(
                "the gateway's first session frame is malformed: {e}"
            )))
        }
    };
    let conn = match frame {
        Frame::Open => Conn::Framed {
            stream: Box::new(stream),
            reader,
        },
        Frame::End {
            code,
            message,
            pushback_ms,
        } => {
            let _ = tokio::time::timeout(SHUTDOWN_TIMEOUT, stream.shutdown()).await;
            Conn::Ended(end_status(code, &message, pushback_ms))
        }
        other => {
            return Err(protocol_error(format!(
                "the gateway's first session frame is {} where Open or End must come first",
                other.kind_name()
            )))
        }
    };
    Ok(SessionClient { conn })
}

impl SessionClient {
    /// The wire this connection carries the session on.
    pub fn wire(&self) -> SessionWire {
        match self.conn {
            Conn::Framed { .. } | Conn::Ended(_) => SessionWire::Framed,
            Conn::Grpc(_) => SessionWire::Grpc,
        }
    }

    /// Starts the session: `outbound` carries the node's messages (Hello first), the
    /// [`SessionStream`] the gateway's. `Err` is the status the gateway refused the session
    /// with (its End frame, or the gRPC call's status).
    pub async fn open_session(
        self,
        outbound: mpsc::Receiver<proto::NodeMessage>,
    ) -> Result<SessionStream, Status> {
        match self.conn {
            Conn::Framed { stream, reader } => {
                let (tx, rx) = mpsc::channel(INBOUND_BUFFER);
                session_task::spawn(stream, reader, outbound, tx);
                Ok(SessionStream {
                    inbound: Inbound::Framed(rx),
                })
            }
            Conn::Ended(Err(status)) => Err(status),
            // Ended with OK before it began: a stream that ends at once (as a gRPC call
            // answered with OK trailers only).
            Conn::Ended(Ok(())) => {
                let (_, rx) = mpsc::channel(1);
                Ok(SessionStream {
                    inbound: Inbound::Framed(rx),
                })
            }
            Conn::Grpc(mut client) => {
                let stream = client
                    .session(ReceiverStream::new(outbound))
                    .await?
                    .into_inner();
                Ok(SessionStream {
                    inbound: Inbound::Grpc {
                        stream: Box::new(stream),
                        _client: client,
                    },
                })
            }
        }
    }
}

/// The gateway's side of one session.
pub struct SessionStream {
    inbound: Inbound,
}

enum Inbound {
    /// From the connection task.
    Framed(mpsc::Receiver<Result<proto::GatewayMessage, Status>>),
    /// The gRPC response stream, and the client whose connection carries it.
    Grpc {
        stream: Box<tonic::Streaming<proto::GatewayMessage>>,
        _client: NodeClient,
    },
}

impl std::fmt::Debug for SessionStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionStream")
            .field("wire", &self.wire())
            .finish_non_exhaustive()
    }
}

impl SessionStream {
    /// The gateway's next message; `Ok(None)` when it ended the session normally (End code 0,
    /// or OK trailers), `Err` with the status it ended with or the connection's failure.
    /// Cancel-safe (a `tokio::select!` branch that loses loses nothing).
    pub async fn message(&mut self) -> Result<Option<proto::GatewayMessage>, Status> {
        match &mut self.inbound {
            Inbound::Framed(rx) => rx.recv().await.transpose(),
            Inbound::Grpc { stream, .. } => stream.message().await,
        }
    }

    /// The wire this session runs on.
    pub fn wire(&self) -> SessionWire {
        match self.inbound {
            Inbound::Framed(_) => SessionWire::Framed,
            Inbound::Grpc { .. } => SessionWire::Grpc,
        }
    }
}
