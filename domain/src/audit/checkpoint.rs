//! C2SP tlog checkpoints (c2sp.org/tlog-checkpoint) of a tenant's audit log.
//!
//! The checkpoint body is the note text:
//!
//! ```text
//! <trust-domain>/audit/<tenant>\n      origin
//! <tree size, ASCII decimal, no leading zeros>\n
//! <root hash, standard base64 of 32 bytes>\n
//! ```
//!
//! It is signed as a C2SP signed note ([`super::note`]) with the audit key, whose key name in the
//! signature line is the origin itself (tlog-checkpoint: "The log's key name in its signature line
//! SHOULD match the origin line"). A signed checkpoint therefore looks like:
//!
//! ```text
//! example.org/audit/tenant-1
//! 42
//! qmN1JLzGi6Fc2Yj0rvrnU4fFuv5Wd3XJ5j+2SlgQn5Y=
//!
//! — example.org/audit/tenant-1 <base64(key ID || DER ECDSA signature)>
//! ```
//!
//! Parsing is strict: exactly three lines (this log writes no extension lines, so any are
//! refused), a non-empty origin without spaces or `+`, a canonical decimal size, and a canonical
//! base64 root of exactly 32 bytes.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use ring::rand::SecureRandom;

use super::key::{AuditPublicKey, AuditSigner};
use super::note::{check_key_name, open_note, sign_note, NoteError};
use crate::merkle::Hash;

/// Why a checkpoint was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CheckpointError {
    #[error("checkpoint origin {0:?} is not allowed (non-empty, no spaces, no '+', no control characters)")]
    BadOrigin(String),
    #[error("checkpoint origin is {found:?}, expected {expected:?}")]
    WrongOrigin { expected: String, found: String },
    #[error("checkpoint body must be exactly three lines (origin, size, root), each ending in a newline")]
    BadShape,
    #[error("checkpoint tree size {0:?} is not a canonical decimal number")]
    BadSize(String),
    #[error("checkpoint root hash {0:?} is not the canonical base64 of 32 bytes")]
    BadRoot(String),
    #[error("checkpoint note: {0}")]
    Note(#[from] NoteError),
}

/// A tree head of a tenant's log, as a checkpoint states it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    pub origin: String,
    pub size: u64,
    pub root: Hash,
}

/// The origin of a tenant's audit log: `<trust-domain>/audit/<tenant>`.
pub fn audit_origin(trust_domain: &str, tenant_id: &str) -> Result<String, CheckpointError> {
    let origin = format!("{trust_domain}/audit/{tenant_id}");
    if trust_domain.is_empty() || tenant_id.is_empty() || check_key_name(&origin).is_err() {
        return Err(CheckpointError::BadOrigin(origin));
    }
    Ok(origin)
}

impl Checkpoint {
    /// The note text: origin, size and root, each line ending in a newline.
    pub fn body(&self) -> String {
        format!(
            "{}\n{}\n{}\n",
            self.origin,
            self.size,
            B64.encode(self.root)
        )
    }

    /// Parses a checkpoint body (the note text), strictly.
    pub fn parse(body: &str) -> Result<Self, CheckpointError> {
        let Some(body) = body.strip_suffix('\n') else {
            return Err(CheckpointError::BadShape);
        };
        let mut lines = body.split('\n');
        let (Some(origin), Some(size), Some(root), None) =
            (lines.next(), lines.next(), lines.next(), lines.next())
        else {
            return Err(CheckpointError::BadShape);
        };
        if check_key_name(origin).is_err() {
            return Err(CheckpointError::BadOrigin(origin.to_string()));
        }
        let canonical_size = !size.is_empty()
            && size.bytes().all(|b| b.is_ascii_digit())
            && (size == "0" || !size.starts_with('0'));
        let size_value = if canonical_size {
            size.parse::<u64>().ok()
        } else {
            None
        };
        let Some(size_value) = size_value else {
            return Err(CheckpointError::BadSize(size.to_string()));
        };
        let root_value: Hash = B64
            .decode(root)
            .ok()
            .and_then(|r| r.try_into().ok())
            .ok_or_else(|| CheckpointError::BadRoot(root.to_string()))?;
        Ok(Checkpoint {
            origin: origin.to_string(),
            size: size_value,
            root: root_value,
        })
    }

    /// Signs the checkpoint with the audit key (key name = origin), returning the signed note.
    pub fn sign(
        &self,
        signer: &AuditSigner,
        rng: &dyn SecureRandom,
    ) -> Result<String, CheckpointError> {
        if check_key_name(&self.origin).is_err() {
            return Err(CheckpointError::BadOrigin(self.origin.clone()));
        }
        Ok(sign_note(&self.body(), &self.origin, signer, rng)?)
    }

    /// Opens a signed checkpoint of the log `origin`: the note must carry a valid signature by
    /// `key` under the name `origin`, and its body must be a well-formed checkpoint of `origin`.
    pub fn open(note: &str, origin: &str, key: &AuditPublicKey) -> Result<Self, CheckpointError> {
        let text = open_note(note, origin, key)?;
        let cp = Checkpoint::parse(text)?;
        if cp.origin != origin {
            return Err(CheckpointError::WrongOrigin {
                expected: origin.to_string(),
                found: cp.origin,
            });
        }
        Ok(cp)
    }
}
