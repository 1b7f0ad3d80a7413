//! The signed command body (spec 003 "Signed intent"): what a worker key signs and a node
//! verifies before anything else.
//!
//! ```text
//! message CommandBody {            // package bc.command.v1
//!   string command_id = 1;  string node_id = 2;  string tenant_id = 3;  string kind = 4;
//!   string payload_type_url = 5;  bytes payload = 6;
//!   bytes batch_id = 7;             // 32 bytes, or empty: not batched
//!   int64 issued_at_ms = 8;  int64 not_after_ms = 9;
//! }
//! ```
//!
//! The signature (ES256 `r || s`, purpose `command`) is over `lp("command") || lp(body) ||
//! lp(trust_domain)`, the body exactly as carried and the trust domain the verifier's own, so a
//! command signed for staging never verifies in production. `CommandBody.batch_id` is inside the
//! signature; the batch approval and the proof travel outside it (approvers sign those).
//!
//! [`verify_command`] is the node's check, in this order: the body decodes; the signer is a
//! worker certificate of a held root, valid when the body says it was issued
//! ([`super::worker::verify_worker`]); the signature verifies under that worker key; the body
//! names this node; it was not issued in the future (beyond [`ISSUE_SKEW_MS`]) and has not
//! expired, both at the node's time; it lives at most [`MAX_COMMAND_LIFETIME_MS`]; a built-in kind's
//! payload carries its registry type URL. Checking the worker certificate at the body's issue
//! time lets a command held for its batch's approval outlive the worker key that signed it, and
//! the lifetime cap bounds how long a stolen, expired worker key could still sign for
//! (docs/DECISIONS.md "Issue 21: a command's signer is checked at its issue time").
//!
//! The node's time is the caller's: bcd passes its trusted time, the later of its own clock and
//! the highest signed time it has seen, never a Welcome's unsigned server time, so a gateway
//! cannot move a command's life (docs/DECISIONS.md "Issue 40: the time a node judges signed
//! things at").

use prost::Message as _;
use time::OffsetDateTime;

use super::kinds::kind_spec;
use super::worker::{verify_worker, VerifiedWorker, WorkerError};
use crate::pki::statement::{signed_input, Purpose, Statement};
use crate::pki::{PrivateKey, PublicKey, Signature, TrustDomain};
use crate::quorum::BatchId;

/// The longest a command may live, issue to expiry: 72 hours (a batch's longest window).
pub const MAX_COMMAND_LIFETIME_MS: i64 = 72 * 3_600_000;

/// How far ahead of the node's time a body's issue time may be.
pub const ISSUE_SKEW_MS: i64 = 5 * 60_000;

/// The largest payload a command carries: 64 KiB, as a scope leaf's.
pub const MAX_PAYLOAD_BYTES: usize = 64 * 1024;

/// The signed body of a command.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct CommandBody {
    /// The command's id (`cmd_…`): a redelivery carries the same one.
    #[prost(string, tag = "1")]
    pub command_id: String,
    /// The node it is for.
    #[prost(string, tag = "2")]
    pub node_id: String,
    /// The node's tenant.
    #[prost(string, tag = "3")]
    pub tenant_id: String,
    /// Its kind (`node.reboot`).
    #[prost(string, tag = "4")]
    pub kind: String,
    /// `type.googleapis.com/` plus the kind's payload type.
    #[prost(string, tag = "5")]
    pub payload_type_url: String,
    /// The encoded payload.
    #[prost(bytes = "vec", tag = "6")]
    pub payload: Vec<u8>,
    /// The batch (32 bytes), or empty.
    #[prost(bytes = "vec", tag = "7")]
    pub batch_id: Vec<u8>,
    /// When the worker signed it, Unix ms.
    #[prost(int64, tag = "8")]
    pub issued_at_ms: i64,
    /// Its end, Unix ms (judged at the node's time).
    #[prost(int64, tag = "9")]
    pub not_after_ms: i64,
}

impl CommandBody {
    /// The batch the body names, if any (a malformed one is an error).
    pub fn batch(&self) -> Result<Option<BatchId>, CommandError> {
        if self.batch_id.is_empty() {
            return Ok(None);
        }
        BatchId::from_slice(&self.batch_id)
            .map(Some)
            .map_err(|_| CommandError::Malformed("batch_id is not 32 bytes".into()))
    }
}

/// The `command` statement: a worker key over the encoded body and the trust domain.
#[derive(Debug, Clone, Copy)]
pub struct CommandStatement<'a> {
    /// The encoded [`CommandBody`], exactly as carried.
    pub body: &'a [u8],
    /// The verifier's (or signer's) trust domain.
    pub trust_domain: &'a str,
}

impl Statement for CommandStatement<'_> {
    fn purpose(&self) -> Purpose {
        Purpose::Command
    }
    fn signed_input(&self) -> Vec<u8> {
        signed_input(Purpose::Command, &[self.body, self.trust_domain.as_bytes()])
    }
}

/// A command as it travels: the body bytes, the worker's signature and its certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedCommand {
    /// The encoded [`CommandBody`].
    pub body: Vec<u8>,
    /// ES256 `r || s`.
    pub signature: Vec<u8>,
    /// The worker certificate (DER) first; nothing else is needed (roots are in the bundle).
    pub worker_chain: Vec<Vec<u8>>,
}

/// Why a command does not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    /// The body does not decode or a field is malformed.
    #[error("malformed command: {0}")]
    Malformed(String),
    /// The signer is not a worker certificate of a held root.
    #[error("untrusted signer: {0}")]
    Signer(#[from] WorkerError),
    /// The signature does not verify under the worker key.
    #[error("bad-signature: the command's signature does not verify under its worker key for trust domain {0}")]
    BadSignature(String),
    /// The body names another node.
    #[error("wrong-node: the command is for node {found}, this is {expected}")]
    WrongNode {
        /// The node the body names.
        found: String,
        /// This node.
        expected: String,
    },
    /// Issued in the future.
    #[error("not-yet-valid: the command was issued at {issued_at_ms} ms, this node's time is {now_ms} ms")]
    NotYetValid {
        /// The body's issue time.
        issued_at_ms: i64,
        /// The node's time.
        now_ms: i64,
    },
    /// Expired at the node's time.
    #[error("expired: the command ended at {not_after_ms} ms, this node's time is {now_ms} ms")]
    Expired {
        /// The body's end.
        not_after_ms: i64,
        /// The node's time.
        now_ms: i64,
    },
    /// Lives longer than [`MAX_COMMAND_LIFETIME_MS`] or ends before it starts.
    #[error("bad-lifetime: the command lives from {issued_at_ms} to {not_after_ms} ms; at most 72 hours")]
    BadLifetime {
        /// Issue time.
        issued_at_ms: i64,
        /// End.
        not_after_ms: i64,
    },
    /// A built-in kind's payload labelled with another type.
    #[error("payload-type: kind {kind} carries {found:?}, its payload type is {expected:?}")]
    PayloadType {
        /// The kind.
        kind: String,
        /// The body's type URL.
        found: String,
        /// The registry's.
        expected: String,
    },
    /// Signing failed.
    #[error("signing the command: {0}")]
    Sign(String),
}

/// Signs `body` with the worker `key` for `trust_domain`; `worker_certificate` is its DER.
pub fn sign_command(
    key: &PrivateKey,
    worker_certificate: &[u8],
    body: &CommandBody,
    trust_domain: &TrustDomain,
) -> Result<SignedCommand, CommandError> {
    let bytes = body.encode_to_vec();
    let signature = crate::pki::statement::sign(
        key,
        &CommandStatement {
            body: &bytes,
            trust_domain: trust_domain.as_str(),
        },
    )
    .map_err(|e| CommandError::Sign(e.to_string()))?;
    Ok(SignedCommand {
        body: bytes,
        signature: signature.as_bytes().to_vec(),
        worker_chain: vec![worker_certificate.to_vec()],
    })
}

/// What a node's verification yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedCommand {
    /// The decoded body.
    pub body: CommandBody,
    /// The worker that signed it.
    pub worker: VerifiedWorker,
}

/// The node's check of a command (see the module docs). `roots` are the command-signing root
/// certificates (DER) of the trust bundle the node holds; `now_ms` the node's time (Unix ms).
pub fn verify_command(
    signed: &SignedCommand,
    roots: &[Vec<u8>],
    trust_domain: &TrustDomain,
    node_id: &str,
    now_ms: i64,
) -> Result<VerifiedCommand, CommandError> {
    let body = CommandBody::decode(signed.body.as_slice())
        .map_err(|e| CommandError::Malformed(format!("the body does not decode: {e}")))?;
    let issued_at =
        OffsetDateTime::from_unix_timestamp_nanos(i128::from(body.issued_at_ms) * 1_000_000)
            .map_err(|_| CommandError::Malformed("issued_at_ms is out of range".into()))?;
    let leaf = signed
        .worker_chain
        .first()
        .ok_or(WorkerError::NoCertificate)?;
    let worker = verify_worker(leaf, roots, issued_at)?;
    let signature = Signature::from_bytes(&signed.signature)
        .ok_or_else(|| CommandError::BadSignature(trust_domain.to_string()))?;
    verify_under(&worker.public_key, &signed.body, trust_domain, &signature)?;
    if body.node_id != node_id {
        return Err(CommandError::WrongNode {
            found: body.node_id,
            expected: node_id.to_owned(),
        });
    }
    if body.not_after_ms <= body.issued_at_ms
        || body.not_after_ms - body.issued_at_ms > MAX_COMMAND_LIFETIME_MS
    {
        return Err(CommandError::BadLifetime {
            issued_at_ms: body.issued_at_ms,
            not_after_ms: body.not_after_ms,
        });
    }
    if body.issued_at_ms > now_ms.saturating_add(ISSUE_SKEW_MS) {
        return Err(CommandError::NotYetValid {
            issued_at_ms: body.issued_at_ms,
            now_ms,
        });
    }
    if now_ms >= body.not_after_ms {
        return Err(CommandError::Expired {
            not_after_ms: body.not_after_ms,
            now_ms,
        });
    }
    if let Some(spec) = kind_spec(&body.kind) {
        if body.payload_type_url != spec.type_url() {
            return Err(CommandError::PayloadType {
                kind: body.kind.clone(),
                found: body.payload_type_url.clone(),
                expected: spec.type_url(),
            });
        }
    }
    body.batch()?;
    Ok(VerifiedCommand { body, worker })
}

fn verify_under(
    key: &PublicKey,
    body: &[u8],
    trust_domain: &TrustDomain,
    signature: &Signature,
) -> Result<(), CommandError> {
    crate::pki::statement::verify(
        key,
        &CommandStatement {
            body,
            trust_domain: trust_domain.as_str(),
        },
        signature,
    )
    .map_err(|_| CommandError::BadSignature(trust_domain.to_string()))
}
