//! `--evidence-command CMD`: the agent half of any other attestor (an external one) as a
//! command.
//!
//! For every round bcd runs `sh -c CMD` with one JSON object on standard input:
//!
//! ```text
//! {"attestor":"acme-asset","round":1,"csrSha256":"<base64url>","challenge":null}
//! ```
//!
//! (`challenge` is the base64url payload of the `JoinChallenge` being answered from round 2 on),
//! and reads the evidence from its standard output as base64url (no padding; surrounding
//! whitespace ignored; at most [`MAX_OUTPUT`] bytes). Its standard error goes to bcd's. A
//! non-zero exit, a command that cannot start, or output that is not base64url is a clear error
//! and the join stops: nothing was stored.

use std::io::{Read as _, Write as _};
use std::process::{Command, Stdio};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde::Serialize;

use super::{EvidenceError, EvidenceProducer};

/// The most standard output read from the command.
pub const MAX_OUTPUT: u64 = 1024 * 1024;

/// What the command reads on standard input.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EvidenceAsk<'a> {
    /// The attestor.
    pub attestor: &'a str,
    /// The round (1 first).
    pub round: u32,
    /// SHA-256 of the CSR, base64url.
    pub csr_sha256: String,
    /// The challenge's payload, base64url, from round 2 on.
    pub challenge: Option<String>,
}

/// Runs an external command for the evidence of `attestor`.
#[derive(Debug, Clone)]
pub struct CommandProducer {
    attestor: String,
    command: String,
}

impl CommandProducer {
    /// `command` (run with `sh -c`) produces `attestor`'s evidence.
    pub fn new(attestor: &str, command: &str) -> CommandProducer {
        CommandProducer {
            attestor: attestor.to_owned(),
            command: command.to_owned(),
        }
    }

    fn failed(&self, reason: String) -> EvidenceError {
        EvidenceError::Failed {
            attestor: self.attestor.clone(),
            reason: format!("the evidence command `{}` {reason}", self.command),
        }
    }
}

impl EvidenceProducer for CommandProducer {
    fn id(&self) -> &str {
        &self.attestor
    }

    fn produce(
        &self,
        round: u32,
        csr_sha256: &[u8; 32],
        challenge: Option<&[u8]>,
    ) -> Result<Vec<u8>, EvidenceError> {
        let ask = EvidenceAsk {
            attestor: &self.attestor,
            round,
            csr_sha256: URL_SAFE_NO_PAD.encode(csr_sha256),
            challenge: challenge.map(|c| URL_SAFE_NO_PAD.encode(c)),
        };
        let mut input = serde_json::to_vec(&ask).map_err(|e| self.failed(e.to_string()))?;
        input.push(b'\n');
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(&self.command)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| self.failed(format!("could not start: {e}")))?;
        // A command that exits without reading its input closes the pipe: not an error here,
        // its exit status decides.
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(&input);
        }
        let mut out = Vec::new();
        if let Some(stdout) = child.stdout.take() {
            stdout
                .take(MAX_OUTPUT + 1)
                .read_to_end(&mut out)
                .map_err(|e| self.failed(format!("could not be read: {e}")))?;
        }
        let status = child
            .wait()
            .map_err(|e| self.failed(format!("could not be waited for: {e}")))?;
        if !status.success() {
            let how = match status.code() {
                Some(code) => format!("exited with status {code}"),
                None => "was killed by a signal".to_owned(),
            };
            return Err(self.failed(format!("{how} (round {round})")));
        }
        if out.len() as u64 > MAX_OUTPUT {
            return Err(self.failed(format!("printed more than {MAX_OUTPUT} bytes")));
        }
        let text = String::from_utf8(out).map_err(|_| self.failed("printed non-UTF-8".into()))?;
        let text = text.trim().trim_end_matches('=');
        if text.is_empty() {
            return Err(self.failed(format!("printed no evidence (round {round})")));
        }
        URL_SAFE_NO_PAD
            .decode(text)
            .map_err(|e| self.failed(format!("printed something that is not base64url: {e}")))
    }
}
