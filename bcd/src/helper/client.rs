//! The node's side of the helper's socket (spec 002 "Through bcd helper"): one connection kept
//! behind a mutex, opened at the first request and again after it broke, every write and read
//! bounded by [`ANSWER_TIMEOUT`]. Its errors name the socket and what to do; the checks of what
//! the answers mean are in `checks` and `keys`.

use std::io::{BufRead as _, BufReader, ErrorKind, Read as _, Write as _};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::protocol::{to_line, Answer, Request, ANSWER_TIMEOUT, MAX_LINE};

/// Why a helper operation failed. Every message says it was `bcd helper`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HelperError {
    /// The socket does not accept a connection (no helper running, or not allowed).
    #[error(
        "bcd helper is unreachable at {socket}: {reason} (start it: systemctl start bcd-helper)"
    )]
    Unreachable {
        /// The socket.
        socket: String,
        /// The system's answer.
        reason: String,
    },
    /// The helper answered `refused`.
    #[error("bcd helper refused {op}: {error}")]
    Refused {
        /// The op (`tpm.sign`).
        op: &'static str,
        /// The helper's error.
        error: String,
    },
    /// The answer is not the protocol's, or not the answer to this op.
    #[error("bcd helper's answer to {op} is malformed: {reason}")]
    Malformed {
        /// The op.
        op: &'static str,
        /// What was wrong.
        reason: String,
    },
    /// No answer in time.
    #[error("bcd helper at {socket} did not answer {op} within {} s", ANSWER_TIMEOUT.as_secs())]
    Timeout {
        /// The socket.
        socket: String,
        /// The op.
        op: &'static str,
    },
    /// The derived key is not a node key.
    #[error("the helper's key lacks the node-key attributes: {0}")]
    NotNodeKey(String),
    /// A signature that does not verify under the key's public half.
    #[error("the helper's signature is not the node key's")]
    AnotherSigner,
    /// The AK the helper announced is not an AK.
    #[error("the helper's AK is not an attestation key: {0}")]
    BadAk(String),
    /// A certification that does not verify under the announced AK.
    #[error("the helper certified with another AK")]
    AnotherAk,
    /// A certification by the AK that is not of this key or for this qualifying data.
    #[error("the helper's certification of the node key does not hold: {0}")]
    Certification(String),
}

/// One connection to `bcd helper`, shared by the whole process.
#[derive(Debug)]
pub struct HelperClient {
    socket: PathBuf,
    conn: Mutex<Option<BufReader<UnixStream>>>,
}

impl HelperClient {
    /// A client of the helper at `socket` (nothing is opened yet).
    pub fn new(socket: &Path) -> HelperClient {
        HelperClient {
            socket: socket.to_path_buf(),
            conn: Mutex::new(None),
        }
    }

    /// The socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    fn shown(&self) -> String {
        self.socket.display().to_string()
    }

    fn connect(&self) -> Result<BufReader<UnixStream>, HelperError> {
        let stream = UnixStream::connect(&self.socket).map_err(|e| HelperError::Unreachable {
            socket: self.shown(),
            reason: e.to_string(),
        })?;
        for set in [
            stream.set_read_timeout(Some(ANSWER_TIMEOUT)),
            stream.set_write_timeout(Some(ANSWER_TIMEOUT)),
        ] {
            set.map_err(|e| HelperError::Unreachable {
                socket: self.shown(),
                reason: format!("setting its timeouts: {e}"),
            })?;
        }
        Ok(BufReader::new(stream))
    }

    /// Sends `request` and reads its answer; `refused` is [`HelperError::Refused`]. A connection
    /// that broke since the last request is opened again once.
    pub fn call(&self, request: &Request) -> Result<Answer, HelperError> {
        let op = request.op();
        let mut guard = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let reused = guard.is_some();
        let mut conn = match guard.take() {
            Some(conn) => conn,
            None => self.connect()?,
        };
        let line = match exchange(&mut conn, request) {
            Ok(line) => line,
            // The helper restarted or dropped an idle connection: once more on a fresh one.
            Err(Exchange::Closed(_)) if reused => {
                conn = self.connect()?;
                exchange(&mut conn, request).map_err(|e| e.into_error(self, op))?
            }
            Err(e) => return Err(e.into_error(self, op)),
        };
        let answer: Answer = serde_json::from_slice(&line).map_err(|e| HelperError::Malformed {
            op,
            reason: e.to_string(),
        })?;
        *guard = Some(conn);
        match answer {
            Answer::Refused { error } => Err(HelperError::Refused { op, error }),
            answer => Ok(answer),
        }
    }
}

/// How one exchange failed.
enum Exchange {
    /// The connection is gone (EOF, broken pipe, reset).
    Closed(String),
    /// No answer in time.
    Timeout,
    /// A line longer than [`MAX_LINE`] or another read error.
    Bad(String),
}

impl Exchange {
    fn into_error(self, client: &HelperClient, op: &'static str) -> HelperError {
        match self {
            Exchange::Closed(reason) => HelperError::Unreachable {
                socket: client.shown(),
                reason,
            },
            Exchange::Timeout => HelperError::Timeout {
                socket: client.shown(),
                op,
            },
            Exchange::Bad(reason) => HelperError::Malformed { op, reason },
        }
    }
}

fn io_failure(e: std::io::Error) -> Exchange {
    match e.kind() {
        ErrorKind::WouldBlock | ErrorKind::TimedOut => Exchange::Timeout,
        _ => Exchange::Closed(e.to_string()),
    }
}

/// Writes the request's line and reads one answer line (without its `\n`).
fn exchange(conn: &mut BufReader<UnixStream>, request: &Request) -> Result<Vec<u8>, Exchange> {
    conn.get_mut()
        .write_all(&to_line(request))
        .map_err(io_failure)?;
    let mut line = Vec::new();
    let limit = u64::try_from(MAX_LINE).unwrap_or(u64::MAX) + 1;
    let read = conn
        .by_ref()
        .take(limit)
        .read_until(b'\n', &mut line)
        .map_err(io_failure)?;
    if read == 0 {
        return Err(Exchange::Closed("the helper closed the connection".into()));
    }
    if line.last() != Some(&b'\n') {
        return Err(if line.len() > MAX_LINE {
            Exchange::Bad(format!("an answer longer than {MAX_LINE} bytes"))
        } else {
            Exchange::Closed("the helper closed the connection mid-answer".into())
        });
    }
    line.pop();
    Ok(line)
}
