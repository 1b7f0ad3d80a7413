//! The node session's own framing over TLS, chosen by ALPN [`ALPN`] (`bc-session/1`) instead of
//! gRPC's `h2`: the same `NodeMessage` / `GatewayMessage` protobuf messages as the gRPC
//! `NodeService.Session` stream, without HTTP/2 under them. An idle session then holds TLS and a
//! few hundred bytes of its own, where HTTP/2 holds about 30 KiB of fixed buffers and state per
//! connection (C17 in `benchmarks/RESULTS.md`, `docs/DECISIONS.md`).
//!
//! A frame is a 5-byte header, the payload's length (`u32`, big-endian) and its [`kind`], then
//! the payload:
//!
//! | kind | name    | from    | payload                                              |
//! |------|---------|---------|------------------------------------------------------|
//! | 0    | Message | both    | one encoded `NodeMessage` (node) or `GatewayMessage` |
//! | 1    | Open    | gateway | empty: the session is accepted                       |
//! | 2    | End     | gateway | status code (`i32`, big-endian, gRPC's codes), then a UTF-8 message, then optionally a NUL and a retry hint in milliseconds (ASCII digits) |
//! | 3    | Ping    | gateway | empty: answer with a Pong                            |
//! | 4    | Pong    | node    | empty                                                |
//!
//! The gateway speaks first, right after the handshake: Open, or End with the refusal (the
//! status a gRPC Session would have been refused with). A session ends with End from the gateway
//! (code 0 after a RevocationNotice, as a gRPC stream's OK trailers), then TLS close_notify; the
//! node ends it by closing its side. The End's retry hint is what a gRPC status carries as
//! `grpc-retry-pushback-ms` ([`PUSHBACK_KEY`]): [`Frame::end`] takes it from the status, and
//! [`Frame::status`] puts it back, so the node reads one status whatever carried it; a reader
//! from before the hint shows it as part of the message. A payload over the reader's limit, an unknown kind, a
//! payload where there must be none, or a stream cut inside a frame is a [`FrameError`], and the
//! reader's owner closes the connection.

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The ALPN protocol id of this framing.
pub const ALPN: &[u8] = b"bc-session/1";

/// The gRPC metadata key of a retry hint, which an End frame carries after its message.
pub const PUSHBACK_KEY: &str = "grpc-retry-pushback-ms";

/// The header's length: the payload length (4 bytes) and the kind (1 byte).
pub const HEADER_BYTES: usize = 5;

/// The frame kinds (the header's fifth byte).
pub mod kind {
    pub const MESSAGE: u8 = 0;
    pub const OPEN: u8 = 1;
    pub const END: u8 = 2;
    pub const PING: u8 = 3;
    pub const PONG: u8 = 4;
}

/// One frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// An encoded protobuf message.
    Message(Vec<u8>),
    /// The gateway accepted the session.
    Open,
    /// The session ends, with a gRPC status code, message and retry hint (milliseconds).
    End {
        code: i32,
        message: String,
        pushback_ms: Option<u64>,
    },
    /// The gateway checks the node is still there.
    Ping,
    /// The node's answer to a Ping.
    Pong,
}

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("reading the session stream failed: {0}")]
    Io(#[from] io::Error),
    #[error("a session frame of {len} bytes is over the limit of {max} bytes")]
    TooLarge { len: usize, max: usize },
    #[error("a session frame of unknown kind {0}")]
    UnknownKind(u8),
    #[error("a session frame of kind {kind} carries {len} bytes where it must carry none")]
    UnexpectedPayload { kind: u8, len: usize },
    #[error("a session End frame is malformed (a 4-byte code, then UTF-8, then optionally a NUL and ASCII digits)")]
    BadEnd,
    #[error("the session stream ended inside a frame")]
    Truncated,
}

impl Frame {
    /// A Message frame holding `message` encoded.
    pub fn message<M: prost::Message>(message: &M) -> Frame {
        Frame::Message(message.encode_to_vec())
    }

    /// The End frame carrying `status`, and its retry hint when it has one (a NUL in the
    /// message, which would end it early, reads as a space).
    pub fn end(status: &tonic::Status) -> Frame {
        let pushback_ms = status
            .metadata()
            .get(PUSHBACK_KEY)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        Frame::End {
            code: status.code() as i32,
            message: status.message().replace('\0', " "),
            pushback_ms,
        }
    }

    /// An End frame's status (code 0 is OK), with its retry hint as `grpc-retry-pushback-ms`.
    pub fn status(code: i32, message: &str, pushback_ms: Option<u64>) -> tonic::Status {
        let mut status = tonic::Status::new(tonic::Code::from_i32(code), message);
        if let Some(value) = pushback_ms.and_then(|ms| ms.to_string().parse().ok()) {
            status.metadata_mut().insert(PUSHBACK_KEY, value);
        }
        status
    }

    /// The name of the frame's kind, for messages ("Message", "Open", "End", "Ping", "Pong").
    pub fn kind_name(&self) -> &'static str {
        match self {
            Frame::Message(_) => "Message",
            Frame::Open => "Open",
            Frame::End { .. } => "End",
            Frame::Ping => "Ping",
            Frame::Pong => "Pong",
        }
    }

    /// The frame's bytes: header, then payload.
    pub fn encode(&self) -> Vec<u8> {
        let (kind, payload): (u8, &[u8]) = match self {
            Frame::Message(bytes) => (kind::MESSAGE, bytes),
            Frame::Open => (kind::OPEN, &[]),
            Frame::End { .. } => (kind::END, &[]),
            Frame::Ping => (kind::PING, &[]),
            Frame::Pong => (kind::PONG, &[]),
        };
        let end_payload;
        let payload = match self {
            Frame::End {
                code,
                message,
                pushback_ms,
            } => {
                let mut p = Vec::with_capacity(4 + message.len() + 21);
                p.extend_from_slice(&code.to_be_bytes());
                p.extend_from_slice(message.as_bytes());
                if let Some(ms) = pushback_ms {
                    p.push(0);
                    p.extend_from_slice(ms.to_string().as_bytes());
                }
                end_payload = p;
                &end_payload[..]
            }
            _ => payload,
        };
        let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
        let mut out = Vec::with_capacity(HEADER_BYTES + payload.len());
        out.extend_from_slice(&len.to_be_bytes());
        out.push(kind);
        out.extend_from_slice(payload);
        out
    }

    /// Decodes a frame of `kind` from its whole payload.
    fn decode(kind: u8, payload: Vec<u8>) -> Result<Frame, FrameError> {
        let empty = |frame: Frame| {
            if payload.is_empty() {
                Ok(frame)
            } else {
                Err(FrameError::UnexpectedPayload {
                    kind,
                    len: payload.len(),
                })
            }
        };
        match kind {
            kind::MESSAGE => Ok(Frame::Message(payload)),
            kind::OPEN => empty(Frame::Open),
            kind::PING => empty(Frame::Ping),
            kind::PONG => empty(Frame::Pong),
            kind::END => {
                let (code, rest) = payload.split_at_checked(4).ok_or(FrameError::BadEnd)?;
                let code = i32::from_be_bytes(code.try_into().map_err(|_| FrameError::BadEnd)?);
                let (message, pushback_ms) = match rest.iter().position(|b| *b == 0) {
                    None => (rest, None),
                    Some(nul) => {
                        let digits = &rest[nul + 1..];
                        if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
                            return Err(FrameError::BadEnd);
                        }
                        let ms = std::str::from_utf8(digits)
                            .ok()
                            .and_then(|d| d.parse::<u64>().ok())
                            .ok_or(FrameError::BadEnd)?;
                        (&rest[..nul], Some(ms))
                    }
                };
                let message = std::str::from_utf8(message).map_err(|_| FrameError::BadEnd)?;
                Ok(Frame::End {
                    code,
                    message: message.to_owned(),
                    pushback_ms,
                })
            }
            other => Err(FrameError::UnknownKind(other)),
        }
    }
}

/// Writes `frame` and flushes it.
pub async fn write_frame<W: AsyncWrite + Unpin>(io: &mut W, frame: &Frame) -> io::Result<()> {
    io.write_all(&frame.encode()).await?;
    io.flush().await
}

/// Reads frames of at most `max_payload` bytes from a stream. Between frames it holds nothing
/// but its header bytes: a payload is allocated, at its exact size, once its header is read.
#[derive(Debug)]
pub struct FrameReader {
    max_payload: usize,
    header: [u8; HEADER_BYTES],
    /// Header bytes read so far.
    have: usize,
    /// The payload being read (its length is the payload's), and how much of it has been.
    body: Option<(Vec<u8>, usize)>,
}

impl FrameReader {
    pub fn new(max_payload: usize) -> FrameReader {
        FrameReader {
            max_payload,
            header: [0; HEADER_BYTES],
            have: 0,
            body: None,
        }
    }

    /// The next frame; `None` when the stream ends cleanly between frames. Cancel-safe: every
    /// byte read is kept in the reader, so a call dropped before it returns (a `select!` branch
    /// that lost) loses nothing, and the next call goes on where it stopped.
    pub async fn next<R: AsyncRead + Unpin>(
        &mut self,
        io: &mut R,
    ) -> Result<Option<Frame>, FrameError> {
        loop {
            if let Some((body, filled)) = &mut self.body {
                if *filled == body.len() {
                    let kind = self.header[4];
                    let (payload, _) = self.body.take().unwrap_or_default();
                    self.have = 0;
                    return Frame::decode(kind, payload).map(Some);
                }
                let n = io.read(&mut body[*filled..]).await?;
                if n == 0 {
                    return Err(FrameError::Truncated);
                }
                *filled += n;
                continue;
            }
            if self.have < HEADER_BYTES {
                let n = io.read(&mut self.header[self.have..]).await?;
                if n == 0 {
                    return if self.have == 0 {
                        Ok(None)
                    } else {
                        Err(FrameError::Truncated)
                    };
                }
                self.have += n;
                continue;
            }
            let len = u32::from_be_bytes([
                self.header[0],
                self.header[1],
                self.header[2],
                self.header[3],
            ]) as usize;
            if len > self.max_payload {
                return Err(FrameError::TooLarge {
                    len,
                    max: self.max_payload,
                });
            }
            self.body = Some((vec![0; len], 0));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn read_all(bytes: &[u8], max: usize) -> Vec<Result<Option<Frame>, String>> {
        let mut io = bytes;
        let mut reader = FrameReader::new(max);
        let mut out = Vec::new();
        loop {
            let r = reader.next(&mut io).await.map_err(|e| e.to_string());
            let done = !matches!(r, Ok(Some(_)));
            out.push(r);
            if done {
                return out;
            }
        }
    }

    #[test]
    fn frames_have_the_documented_bytes() {
        assert_eq!(Frame::Open.encode(), [0, 0, 0, 0, 1]);
        assert_eq!(Frame::Ping.encode(), [0, 0, 0, 0, 3]);
        assert_eq!(Frame::Pong.encode(), [0, 0, 0, 0, 4]);
        assert_eq!(Frame::Message(vec![7, 8]).encode(), [0, 0, 0, 2, 0, 7, 8]);
        let end = Frame::End {
            code: 16,
            message: "no".to_owned(),
            pushback_ms: None,
        };
        assert_eq!(end.encode(), [0, 0, 0, 6, 2, 0, 0, 0, 16, b'n', b'o']);
        let hinted = Frame::End {
            code: 14,
            message: "no".to_owned(),
            pushback_ms: Some(250),
        };
        assert_eq!(
            hinted.encode(),
            [0, 0, 0, 10, 2, 0, 0, 0, 14, b'n', b'o', 0, b'2', b'5', b'0']
        );
    }

    #[tokio::test]
    async fn every_kind_round_trips_and_a_clean_end_is_none() {
        let frames = [
            Frame::Open,
            Frame::Message(vec![1, 2, 3]),
            Frame::Message(Vec::new()),
            Frame::Ping,
            Frame::Pong,
            Frame::End {
                code: 14,
                message: "the gateway is shutting down; reconnect".to_owned(),
                pushback_ms: None,
            },
            Frame::End {
                code: 14,
                message: "the gateway's revocation feed has stopped".to_owned(),
                pushback_ms: Some(61_234),
            },
        ];
        let bytes: Vec<u8> = frames.iter().flat_map(Frame::encode).collect();
        let read = read_all(&bytes, 64).await;
        let mut want: Vec<Result<Option<Frame>, String>> =
            frames.iter().cloned().map(|f| Ok(Some(f))).collect();
        want.push(Ok(None));
        assert_eq!(read, want);
    }

    #[tokio::test]
    async fn a_payload_over_the_limit_is_refused_before_it_is_read() {
        let bytes = Frame::Message(vec![0; 17]).encode();
        let read = read_all(&bytes[..HEADER_BYTES], 16).await;
        assert_eq!(
            read,
            [Err(
                "a session frame of 17 bytes is over the limit of 16 bytes".to_owned()
            )]
        );
    }

    #[tokio::test]
    async fn malformed_frames_are_refused_by_reason() {
        let bad_end = "a session End frame is malformed (a 4-byte code, then UTF-8, then optionally a NUL and ASCII digits)";
        let cases: [(&[u8], &str); 7] = [
            (&[0, 0, 0, 6, 2, 0, 0, 0, 1, 0, b'x'], bad_end),
            (&[0, 0, 0, 5, 2, 0, 0, 0, 1, 0], bad_end),
            (&[0, 0, 0, 0, 9], "a session frame of unknown kind 9"),
            (
                &[0, 0, 0, 1, 3, 0],
                "a session frame of kind 3 carries 1 bytes where it must carry none",
            ),
            (&[0, 0, 0, 2, 2, 0, 0], bad_end),
            (&[0, 0, 0, 5, 2, 0, 0, 0, 1, 0xff], bad_end),
            (
                &[0, 0, 0, 4, 0, 1],
                "the session stream ended inside a frame",
            ),
        ];
        for (bytes, reason) in cases {
            assert_eq!(
                read_all(bytes, 16).await,
                [Err(reason.to_owned())],
                "{bytes:?}"
            );
        }
        assert_eq!(
            read_all(&[0, 0], 16).await,
            [Err("the session stream ended inside a frame".to_owned())]
        );
    }

    /// A reader fed one byte at a time, its call dropped after every byte, still reads every
    /// frame whole (what a `select!` that keeps losing the race does to it).
    #[tokio::test]
    async fn a_read_cut_short_at_every_byte_loses_nothing() {
        let frames = [
            Frame::Message(vec![5; 40]),
            Frame::End {
                code: 0,
                message: String::new(),
                pushback_ms: None,
            },
        ];
        let bytes: Vec<u8> = frames.iter().flat_map(Frame::encode).collect();
        let (mut client, mut server) = tokio::io::duplex(64);
        let mut reader = FrameReader::new(64);
        let mut got = Vec::new();
        for b in bytes {
            client.write_all(&[b]).await.expect("write");
            let step = tokio::time::timeout(
                std::time::Duration::from_millis(5),
                reader.next(&mut server),
            )
            .await;
            if let Ok(frame) = step {
                got.push(frame.expect("frame").expect("not the end"));
            }
        }
        assert_eq!(got, frames);
    }

    /// Issue 40, item 13: a status's retry hint crosses the session wire, so a node told to wait
    /// by the gateway is told so on either transport.
    #[test]
    fn a_status_with_a_retry_hint_crosses_an_end_frame() {
        let mut status = tonic::Status::unavailable("feed stopped");
        status
            .metadata_mut()
            .insert(PUSHBACK_KEY, "61234".parse().expect("ascii"));
        let frame = Frame::end(&status);
        assert_eq!(
            frame,
            Frame::End {
                code: 14,
                message: "feed stopped".to_owned(),
                pushback_ms: Some(61_234),
            }
        );
        let Frame::End {
            code,
            message,
            pushback_ms,
        } = frame
        else {
            unreachable!()
        };
        let back = Frame::status(code, &message, pushback_ms);
        assert_eq!(back.code(), tonic::Code::Unavailable);
        assert_eq!(back.message(), "feed stopped");
        assert_eq!(
            back.metadata()
                .get(PUSHBACK_KEY)
                .and_then(|v| v.to_str().ok()),
            Some("61234")
        );
        // A NUL in a message cannot pass for a hint.
        let odd = Frame::end(&tonic::Status::internal("a\0b"));
        assert_eq!(
            odd,
            Frame::End {
                code: 13,
                message: "a b".to_owned(),
                pushback_ms: None,
            }
        );
    }
}
