//! A node session over the session wire ([`proto::session_wire`], ALPN `bc-session/1`): one
//! task per connection, which owns the TLS stream, reads the node's frames, writes the
//! session's, and holds nothing between frames but the reader's header bytes. No HTTP/2: an
//! idle session costs TLS and the session itself (C17 in `benchmarks/RESULTS.md`).
//!
//! Right after the handshake the gateway writes Open, or End with the refusal
//! [`NodeServer::open_session`] gave (the status a gRPC Session gets). Then:
//!
//! - each Message frame is decoded as a `NodeMessage` and handed to the session; while the
//!   session has not taken the last one, no frame is read (the node's writes wait in TCP);
//! - what the session sends goes out as Message frames; its error as End with that status; its
//!   end as End with code 0 (after a RevocationNotice), then TLS close_notify;
//! - a frame that is over `max_message_bytes`, of an unknown kind, not decodable, or not one a
//!   node sends ends the session with End INVALID_ARGUMENT naming why;
//! - every [`KEEPALIVE_INTERVAL`] the gateway sends a Ping; a node that has sent no frame
//!   [`KEEPALIVE_TIMEOUT`] later is taken as gone and its connection dropped, and so is one
//!   that takes no bytes of a frame for as long;
//! - at `max_connection_age` (less up to a tenth, at random) and when the server stops, the
//!   session ends with End UNAVAILABLE, and the node reconnects.

use std::net::SocketAddr;
use std::time::Duration;

use prost::Message as _;
use proto::session_wire::{write_frame, Frame, FrameError, FrameReader};
use proto::NodeMessage;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tonic::Status;

use crate::edge::conn::PeerInfo;
use crate::edge::limits::{EdgeCounters, EdgeLimits};
use crate::node_commands::dispatch::SessionItem;
use crate::node_service::server::NodeServer;
use crate::session::session_loop::sleep_until_or_never;

/// How often the gateway pings an open session, and how long the node has to answer.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// How long the close (the last frame and close_notify) may take before the connection is
/// dropped anyway.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);

/// The message of the End sent at `max_connection_age`.
pub const AGED_OUT: &str = "the connection reached its maximum age; reconnect";

/// The message of the End for a Message frame that is not a `NodeMessage` (fixed: the
/// decoder's words tell a prober nothing it needs).
pub const NOT_A_NODE_MESSAGE: &str = "the session message is not a valid NodeMessage";

/// The message of the End sent when the server stops.
pub const SHUTTING_DOWN: &str = "the gateway is shutting down; reconnect";

/// Serves one session on `io`, a TLS connection that chose the session wire, until it ends.
/// `age`: how long the connection may live (`max_connection_age` with its jitter).
pub(crate) async fn serve<IO>(
    server: &NodeServer,
    mut io: IO,
    peer: PeerInfo,
    limits: &EdgeLimits,
    counters: &EdgeCounters,
    age: Duration,
    mut stop: watch::Receiver<bool>,
) where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let remote = peer.remote;
    // One slot: the reader stops while the session has not taken the last message.
    let (to_session, inbound) = mpsc::channel::<Box<NodeMessage>>(1);
    // Boxed: opening reads the store, and this task should not keep room for that while the
    // session lives.
    let mut outbound = match Box::pin(server.open_session(peer.node, inbound)).await {
        Ok(rx) => rx,
        Err(refusal) => {
            close(&mut io, &Frame::end(&refusal)).await;
            return;
        }
    };
    if write_frame(&mut io, &Frame::Open).await.is_err() {
        return;
    }
    server
        .metrics
        .wire_sessions_opened
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut reader = FrameReader::new(limits.max_message_bytes);
    // A message read that the session has not taken yet.
    let mut pending: Option<Box<NodeMessage>> = None;
    let age_at = Instant::now() + age;
    let mut ping_at = Instant::now() + KEEPALIVE_INTERVAL;
    let mut answer_by: Option<Instant> = None;
    let last = loop {
        tokio::select! {
            biased;
            item = outbound.recv() => match item {
                Some(item) => match outgoing(item) {
                    Ok(frame) => {
                        if !send(&mut io, &frame, remote).await {
                            return;
                        }
                    }
                    Err(end) => break end,
                },
                None => break Frame::End { code: 0, message: String::new(), pushback_ms: None },
            },
            permit = to_session.reserve(), if pending.is_some() => {
                // An error: the session ended, and what it sends last is still to come from
                // `outbound`.
                if let (Ok(permit), Some(message)) = (permit, pending.take()) {
                    permit.send(message);
                }
            }
            frame = reader.next(&mut io), if pending.is_none() => {
                answer_by = None;
                match frame {
                    Ok(Some(Frame::Message(bytes))) => match NodeMessage::decode(bytes.as_slice()) {
                        Ok(message) => pending = Some(Box::new(message)),
                        Err(_) => break refused(counters, NOT_A_NODE_MESSAGE.to_owned()),
                    },
                    Ok(Some(Frame::Pong)) => {}
                    Ok(Some(other)) => break refused(counters, format!("a node does not send {}", other.kind_name())),
                    // The node closed its side: the session ends (dropping `to_session` tells it).
                    Ok(None) => return,
                    Err(FrameError::Io(e)) => {
                        tracing::debug!(%remote, error = %e, "session connection failed");
                        return;
                    }
                    Err(e) => break refused(counters, e.to_string()),
                }
            }
            _ = tokio::time::sleep_until(ping_at) => {
                if !send(&mut io, &Frame::Ping, remote).await {
                    return;
                }
                ping_at = Instant::now() + KEEPALIVE_INTERVAL;
                answer_by.get_or_insert(Instant::now() + KEEPALIVE_TIMEOUT);
            }
            // Not while a message waits for the session: the node's answer may be behind it.
            _ = sleep_until_or_never(answer_by), if pending.is_none() => {
                EdgeCounters::inc(&counters.keepalive_timeouts);
                tracing::debug!(%remote, "session dropped: no answer to a ping");
                return;
            }
            _ = tokio::time::sleep_until(age_at) => {
                EdgeCounters::inc(&counters.aged_out);
                break Frame::end(&Status::unavailable(AGED_OUT));
            }
            _ = stop.changed() => break Frame::end(&Status::unavailable(SHUTTING_DOWN)),
        }
    };
    close(&mut io, &last).await;
}

/// Writes `frame` within [`KEEPALIVE_TIMEOUT`]: a node that stops reading cannot hold the
/// session's task (and a revocation's notice) behind a write forever. `false`: drop the
/// connection.
async fn send<IO: AsyncWrite + Unpin>(io: &mut IO, frame: &Frame, remote: SocketAddr) -> bool {
    match tokio::time::timeout(KEEPALIVE_TIMEOUT, write_frame(io, frame)).await {
        Ok(Ok(())) => true,
        Ok(Err(e)) => {
            tracing::debug!(%remote, error = %e, "session connection failed");
            false
        }
        Err(_) => {
            tracing::debug!(%remote, "session dropped: the node took no bytes for 20 s");
            false
        }
    }
}

/// The frame for what the session sends: a message, or the End its error makes.
fn outgoing(item: SessionItem) -> Result<Frame, Frame> {
    match item {
        Ok(message) => Ok(Frame::message(&*message)),
        Err(status) => Err(Frame::end(&status)),
    }
}

/// The End for a frame a node may not send (counted).
fn refused(counters: &EdgeCounters, why: String) -> Frame {
    EdgeCounters::inc(&counters.bad_session_frames);
    Frame::end(&Status::invalid_argument(why))
}

/// Sends `last` and close_notify, within [`CLOSE_TIMEOUT`].
async fn close<IO: AsyncWrite + Unpin>(io: &mut IO, last: &Frame) {
    let _ = tokio::time::timeout(CLOSE_TIMEOUT, async {
        write_frame(io, last).await?;
        io.shutdown().await
    })
    .await;
}
