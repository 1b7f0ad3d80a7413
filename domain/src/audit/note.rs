//! C2SP signed notes (c2sp.org/signed-note), signed and opened with the audit key.
//!
//! From the spec ("Format"): a signed note is a text ending in a newline, a blank line, and one
//! or more signature lines `— <key name> <base64(4-byte big-endian key ID || signature)>\n`
//! (em dash U+2014, space, key name, space, standard base64, newline). The note is UTF-8 with no
//! ASCII control characters but newline. The text (signed as is) includes its final newline but
//! not the separating blank line, and is separated from the signatures by the *last* blank line.
//! Key names are non-empty and hold neither Unicode spaces nor `+`. Signature type `0x02` is
//! ECDSA; its key ID is `SHA-256(SPKI DER)[:4]` (see [`super::key`]).
//!
//! Opening a note ([`open_note`]) is stricter than the spec requires, on purpose:
//!
//! - Every malformed line refuses the note (the spec lets a parser skip nothing either).
//! - Signature lines under *other* key names are ignored, as the spec says (witness cosignatures,
//!   an added Ed25519 cosignature).
//! - A signature line under the audit key's name with a key ID other than the pinned key's
//!   refuses the note ([`NoteError::UnknownKeyId`]). The spec would ignore it; but this log signs
//!   each checkpoint with exactly one key, so a second key under its name is a rotation nobody
//!   pinned or a forgery, and the auditor must hear of it.
//! - Every signature line of the pinned key must verify, and there must be at least one.
//! - At most [`MAX_SIGNATURES`] signature lines and [`MAX_NOTE_BYTES`] bytes (the spec asks to
//!   accept at least 16 signatures).

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use ring::rand::SecureRandom;

use super::key::{AuditPublicKey, AuditSigner, KeyError};

/// The most signature lines a note may carry.
pub const MAX_SIGNATURES: usize = 100;
/// The largest note accepted, in bytes.
pub const MAX_NOTE_BYTES: usize = 1 << 20;

const SIG_PREFIX: &str = "\u{2014} ";

/// Why a note was refused, or could not be made.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NoteError {
    #[error("note is {0} bytes long; at most 1 MiB is accepted")]
    TooLarge(usize),
    #[error("note contains the control character {0:#04x} (only newline is allowed)")]
    ControlCharacter(u8),
    #[error("note text is empty or does not end in a newline")]
    BadText,
    #[error("note has no blank line separating its text from signature lines")]
    NoSignatureBlock,
    #[error("note has no signature lines")]
    MissingSignature,
    #[error("note has {0} signature lines; at most 100 are accepted")]
    TooManySignatures(usize),
    #[error("signature line {line} is malformed: {why}")]
    MalformedSignatureLine { line: usize, why: &'static str },
    #[error("key name {0:?} is not allowed (it must be non-empty, without spaces or '+')")]
    BadKeyName(String),
    #[error("note is signed under {name:?} by key ID {found}, but the pinned audit key has ID {expected}: signed by another key")]
    UnknownKeyId {
        name: String,
        found: String,
        expected: String,
    },
    #[error("note carries no signature by the pinned audit key ({name:?}, key ID {expected})")]
    NotSignedByKey { name: String, expected: String },
    #[error("signature by the pinned audit key ({name:?}, key ID {key_id}) does not verify: the note was altered or the signature is forged")]
    BadSignature { name: String, key_id: String },
    #[error(transparent)]
    Key(#[from] KeyError),
}

/// One parsed signature line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NoteSignature {
    pub key_name: String,
    pub key_id: [u8; 4],
    pub signature: Vec<u8>,
}

/// A parsed (not yet verified) signed note.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note<'a> {
    /// The signed text, with its final newline.
    pub text: &'a str,
    pub signatures: Vec<NoteSignature>,
}

/// Checks a key name: non-empty, no Unicode whitespace, no `+`, no control characters.
pub fn check_key_name(name: &str) -> Result<(), NoteError> {
    if name.is_empty()
        || name
            .chars()
            .any(|c| c.is_whitespace() || c == '+' || c.is_control())
    {
        return Err(NoteError::BadKeyName(name.to_string()));
    }
    Ok(())
}

impl<'a> Note<'a> {
    /// Parses a signed note strictly (format only; no signature is checked).
    pub fn parse(note: &'a str) -> Result<Self, NoteError> {
        if note.len() > MAX_NOTE_BYTES {
            return Err(NoteError::TooLarge(note.len()));
        }
        if let Some(c) = note.bytes().find(|&b| b < 0x20 && b != b'\n') {
            return Err(NoteError::ControlCharacter(c));
        }
        let Some(split) = note.rfind("\n\n") else {
            return Err(NoteError::NoSignatureBlock);
        };
        let text = &note[..split + 1];
        let block = &note[split + 2..];
        if text.len() < 2 {
            return Err(NoteError::BadText);
        }
        if block.is_empty() {
            return Err(NoteError::MissingSignature);
        }
        let Some(block) = block.strip_suffix('\n') else {
            return Err(NoteError::MalformedSignatureLine {
                line: block.split('\n').count(),
                why: "the last line does not end in a newline",
            });
        };
        let mut signatures = Vec::new();
        for (i, line) in block.split('\n').enumerate() {
            let line_no = i + 1;
            if line_no > MAX_SIGNATURES {
                return Err(NoteError::TooManySignatures(block.split('\n').count()));
            }
            let malformed = |why| NoteError::MalformedSignatureLine { line: line_no, why };
            let rest = line.strip_prefix(SIG_PREFIX).ok_or(malformed(
                "it must start with an em dash (U+2014) and a space",
            ))?;
            let (name, sig) = rest
                .split_once(' ')
                .ok_or(malformed("it must be '— <key name> <base64 signature>'"))?;
            check_key_name(name)
                .map_err(|_| malformed("the key name is empty or has spaces or '+'"))?;
            let raw = B64
                .decode(sig)
                .map_err(|_| malformed("the signature is not standard base64"))?;
            if raw.len() < 5 {
                return Err(malformed(
                    "the signature is shorter than a key ID and one byte",
                ));
            }
            let mut key_id = [0u8; 4];
            key_id.copy_from_slice(&raw[..4]);
            signatures.push(NoteSignature {
                key_name: name.to_string(),
                key_id,
                signature: raw[4..].to_vec(),
            });
        }
        Ok(Note { text, signatures })
    }
}

/// Signs `text` (which must end in a newline and hold no blank separator issues) with the audit
/// key under `key_name`, returning the whole signed note.
pub fn sign_note(
    text: &str,
    key_name: &str,
    signer: &AuditSigner,
    rng: &dyn SecureRandom,
) -> Result<String, NoteError> {
    check_key_name(key_name)?;
    if text.len() < 2 || !text.ends_with('\n') {
        return Err(NoteError::BadText);
    }
    if let Some(c) = text.bytes().find(|&b| b < 0x20 && b != b'\n') {
        return Err(NoteError::ControlCharacter(c));
    }
    let sig = signer.sign(text.as_bytes(), rng)?;
    let mut raw = Vec::with_capacity(4 + sig.len());
    raw.extend_from_slice(&signer.public_key().key_id());
    raw.extend_from_slice(&sig);
    Ok(format!(
        "{text}\n{SIG_PREFIX}{key_name} {}\n",
        B64.encode(raw)
    ))
}

/// Opens a signed note: parses it and checks it carries a valid signature by `key` under
/// `key_name`, with the strict rules of the module doc. Returns the signed text.
pub fn open_note<'a>(
    note: &'a str,
    key_name: &str,
    key: &AuditPublicKey,
) -> Result<&'a str, NoteError> {
    let parsed = Note::parse(note)?;
    let expected = key.key_id();
    let mut verified = 0usize;
    for sig in parsed.signatures.iter().filter(|s| s.key_name == key_name) {
        if sig.key_id != expected {
            return Err(NoteError::UnknownKeyId {
                name: key_name.to_string(),
                found: hex::encode(sig.key_id),
                expected: hex::encode(expected),
            });
        }
        if !key.verify(parsed.text.as_bytes(), &sig.signature) {
            return Err(NoteError::BadSignature {
                name: key_name.to_string(),
                key_id: hex::encode(expected),
            });
        }
        verified += 1;
    }
    if verified == 0 {
        return Err(NoteError::NotSignedByKey {
            name: key_name.to_string(),
            expected: hex::encode(expected),
        });
    }
    Ok(parsed.text)
}
