//! The connection task of a node session over `bc-session/1` ([`spawn`]): it owns the TLS
//! stream once the gateway's Open is read, hands each `GatewayMessage` to the session's
//! [`super::SessionStream`], answers each Ping with a Pong, and writes each `NodeMessage` the
//! session sends, until the session ends.
//!
//! Reading and writing run side by side in the one task (the stream split in halves), so a
//! session slow to take a message never holds back its own messages or a Pong. The session
//! ends, and the task with it, when:
//!
//! * the gateway sends End: code 0 ends the stream (`Ok(None)`), another code is its status;
//! * the connection fails, or breaks the framing: `UNAVAILABLE`, the reason in words (a TLS
//!   alert is kept as the status's source, so `is_revoked_alert` and `describe_status` see it);
//! * the [`super::SessionStream`] is dropped.
//!
//! When the session's sender closes (every `NodeMessage` sender dropped) or the session ends,
//! the task sends TLS close_notify on its write side (the node's way to end a session); the
//! read side goes on until the gateway ends or the stream is dropped.

use std::sync::Arc;
use std::time::Duration as StdDuration;

use prost::Message as _;
use proto::session_wire::{write_frame, Frame, FrameError, FrameReader};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tonic::Status;

use super::connect::CALL_TIMEOUT;
use super::diagnose::{describe_io, received_alert};

/// What the task hands the session: each message, or the status the session ended with.
pub(super) type Inbound = mpsc::Sender<Result<proto::GatewayMessage, Status>>;

/// How many messages the task holds for a session that has not taken them yet.
pub(super) const INBOUND_BUFFER: usize = 16;

/// How long writing one frame may take before the connection counts as dead.
pub const WRITE_TIMEOUT: StdDuration = CALL_TIMEOUT;

/// How long sending close_notify may take.
pub(super) const SHUTDOWN_TIMEOUT: StdDuration = StdDuration::from_secs(5);

/// Pongs owed at once; a Ping beyond them is answered by a Pong already owed.
const PONGS_OWED: usize = 4;

/// Starts the task for an open session on `stream` (`reader` holds whatever it has read of
/// the frames after Open).
pub(super) fn spawn<S>(
    stream: S,
    reader: FrameReader,
    outbound: mpsc::Receiver<proto::NodeMessage>,
    inbound: Inbound,
) where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    tokio::spawn(async move {
        let (read_half, write_half) = tokio::io::split(stream);
        let (pong_tx, pong_rx) = mpsc::channel::<()>(PONGS_OWED);
        // The reader's end stops the writer (dropping `stop_tx`); the writer's failure ends the
        // reader (a status on `failed`).
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let (failed_tx, failed_rx) = oneshot::channel::<Status>();
        let reading = async move {
            read_frames(read_half, reader, inbound, pong_tx, failed_rx).await;
            drop(stop_tx);
        };
        let writing = write_frames(write_half, outbound, pong_rx, stop_rx, failed_tx);
        tokio::join!(reading, writing);
    });
}

/// What one read frame does to the session.
#[derive(Debug)]
pub(super) enum Step {
    /// A message for the session.
    Deliver(Box<proto::GatewayMessage>),
    /// A Pong is owed.
    Ping,
    /// The session is over: `Ok` at End code 0, else the status it ended with.
    End(Result<(), Status>),
}

/// The session's end for an End frame: code 0 is the normal end (after a RevocationNotice);
/// another code is its status, with the gateway's retry hint as `grpc-retry-pushback-ms`.
pub(super) fn end_status(code: i32, message: &str, pushback_ms: Option<u64>) -> Result<(), Status> {
    if code == 0 {
        Ok(())
    } else {
        Err(Frame::status(code, message, pushback_ms))
    }
}

/// A failed read as the session's status: `UNAVAILABLE`, with a TLS alert kept as its source.
pub(super) fn read_failed(e: FrameError) -> Status {
    match e {
        FrameError::Io(io) => {
            let mut status = Status::unavailable(format!(
                "the session's connection to the gateway failed: {}",
                describe_io(&io)
            ));
            if received_alert(&io).is_some() {
                status.set_source(Arc::new(io));
            }
            status
        }
        other => Status::unavailable(format!(
            "the gateway broke the session framing ({other}); the connection is closed"
        )),
    }
}

/// What a frame read in an open session means.
pub(super) fn step(frame: Result<Option<Frame>, FrameError>) -> Step {
    match frame {
        Ok(Some(Frame::Message(bytes))) => match proto::GatewayMessage::decode(bytes.as_slice()) {
            Ok(message) => Step::Deliver(Box::new(message)),
            Err(e) => Step::End(Err(Status::unavailable(format!(
                "the gateway sent a session message that does not decode as a GatewayMessage \
                 ({e}); the connection is closed"
            )))),
        },
        Ok(Some(Frame::Ping)) => Step::Ping,
        Ok(Some(Frame::End {
            code,
            message,
            pushback_ms,
        })) => Step::End(end_status(code, &message, pushback_ms)),
        Ok(Some(other @ (Frame::Open | Frame::Pong))) => {
            Step::End(Err(Status::unavailable(format!(
                "the gateway sent a session frame of kind {} in an open session, which only a \
                 node's side or the first frame may carry; the connection is closed",
                other.kind_name()
            ))))
        }
        Ok(None) => Step::End(Err(Status::unavailable(
            "the gateway closed the connection without ending the session",
        ))),
        Err(e) => Step::End(Err(read_failed(e))),
    }
}

async fn read_frames<R: AsyncRead + Unpin>(
    mut io: R,
    mut reader: FrameReader,
    inbound: Inbound,
    pongs: mpsc::Sender<()>,
    mut failed: oneshot::Receiver<Status>,
) {
    let mut writer_running = true;
    loop {
        // Every branch is cancel-safe: the frame reader keeps what it has read.
        let frame = tokio::select! {
            frame = reader.next(&mut io) => frame,
            failure = &mut failed, if writer_running => match failure {
                Ok(status) => {
                    let _ = inbound.send(Err(status)).await;
                    return;
                }
                // The writer closed the node's side: read on until the gateway ends.
                Err(_) => {
                    writer_running = false;
                    continue;
                }
            },
            () = inbound.closed() => return,
        };
        match step(frame) {
            Step::Deliver(message) => {
                if inbound.send(Ok(*message)).await.is_err() {
                    return;
                }
            }
            // Full: a Pong is already owed, and it answers this Ping too.
            Step::Ping => {
                let _ = pongs.try_send(());
            }
            Step::End(end) => {
                if let Err(status) = end {
                    let _ = inbound.send(Err(status)).await;
                }
                return;
            }
        }
    }
}

async fn write_frames<W: AsyncWrite + Unpin>(
    mut io: W,
    mut outbound: mpsc::Receiver<proto::NodeMessage>,
    mut pongs: mpsc::Receiver<()>,
    mut stop: oneshot::Receiver<()>,
    failed: oneshot::Sender<Status>,
) {
    loop {
        let frame = tokio::select! {
            biased;
            _ = &mut stop => break,
            Some(()) = pongs.recv() => Frame::Pong,
            message = outbound.recv() => match message {
                Some(message) => Frame::message(&message),
                None => break,
            },
        };
        let reason = match tokio::time::timeout(WRITE_TIMEOUT, write_frame(&mut io, &frame)).await {
            Ok(Ok(())) => continue,
            Ok(Err(e)) => format!("writing to the gateway failed: {}", describe_io(&e)),
            Err(_) => format!(
                "writing to the gateway stalled for {} s (it reads nothing)",
                WRITE_TIMEOUT.as_secs()
            ),
        };
        let _ = failed.send(Status::unavailable(reason));
        return;
    }
    let _ = tokio::time::timeout(SHUTDOWN_TIMEOUT, io.shutdown()).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{describe_status, is_revoked_alert};

    #[test]
    fn end_code_zero_is_the_normal_end_and_others_are_their_status() {
        assert!(end_status(0, "", None).is_ok());
        let status = end_status(16, "this certificate is revoked", None).unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unauthenticated);
        assert_eq!(status.message(), "this certificate is revoked");
        // A code gRPC does not define is Unknown, its message kept.
        let status = end_status(99, "odd", None).unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unknown);
        assert_eq!(status.message(), "odd");
        // The gateway's retry hint reads as a gRPC status's.
        let status = end_status(14, "feed stopped", Some(61_000)).unwrap_err();
        assert_eq!(
            crate::client::pushback_of(&status),
            Some(crate::renewal::schedule::Pushback::After(
                time::Duration::milliseconds(61_000)
            ))
        );
    }

    #[test]
    fn frames_map_to_steps() {
        let welcome = proto::GatewayMessage {
            body: Some(proto::gateway_message::Body::Welcome(proto::Welcome {
                server_time_ms: 7,
                ..Default::default()
            })),
        };
        match step(Ok(Some(Frame::message(&welcome)))) {
            Step::Deliver(m) => assert_eq!(*m, welcome),
            other => panic!("{other:?}"),
        }
        assert!(matches!(step(Ok(Some(Frame::Ping))), Step::Ping));
        let end = Frame::End {
            code: 0,
            message: String::new(),
            pushback_ms: None,
        };
        assert!(matches!(step(Ok(Some(end))), Step::End(Ok(()))));
        for frame in [Frame::Open, Frame::Pong, Frame::Message(vec![0xff])] {
            match step(Ok(Some(frame.clone()))) {
                Step::End(Err(s)) => assert_eq!(s.code(), tonic::Code::Unavailable, "{frame:?}"),
                other => panic!("{frame:?}: {other:?}"),
            }
        }
        match step(Ok(None)) {
            Step::End(Err(s)) => assert_eq!(
                s.message(),
                "the gateway closed the connection without ending the session"
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_revocation_alert_mid_session_reads_as_the_grpc_path_reads_it() {
        let io = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::AlertReceived(rustls::AlertDescription::CertificateRevoked),
        );
        let status = read_failed(FrameError::Io(io));
        assert_eq!(status.code(), tonic::Code::Unavailable);
        assert!(is_revoked_alert(&status));
        assert_eq!(
            describe_status(&status),
            "the gateway refused this node's certificate at the TLS handshake (alert \
             CertificateRevoked)"
        );
        let status = read_failed(FrameError::Truncated);
        assert!(!is_revoked_alert(&status));
        assert_eq!(
            status.message(),
            "the gateway broke the session framing (the session stream ended inside a frame); \
             the connection is closed"
        );
    }
}
