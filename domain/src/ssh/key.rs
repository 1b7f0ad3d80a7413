//! The public keys an SSH certificate may certify: one OpenSSH public key line
//! (`<type> <base64 blob> [comment]`) read into a [`SubjectKey`], or refused.
//!
//! Accepted: Ed25519 (`ssh-ed25519`), ECDSA on P-256, P-384 and P-521
//! (`ecdsa-sha2-nistp256|384|521`) and RSA (`ssh-rsa`) with a modulus of at least
//! [`MIN_RSA_BITS`] bits. Everything else is refused by name: DSA, shorter RSA, security-key
//! types (`sk-…`), a certificate given where a key is asked, and types this code does not know.
//! The blob is parsed whole (its type string must match the line's, the key's fields their
//! sizes, no trailing bytes), so what is certified is exactly one well-formed key.
//!
//! Its fingerprint is OpenSSH's: `SHA256:` and the unpadded base64 of SHA-256 over the blob.

use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use base64::Engine as _;
use sha2::{Digest, Sha256};

use super::wire::Reader;

/// The shortest RSA modulus accepted, in bits.
pub const MIN_RSA_BITS: usize = 3072;

/// The kind of an accepted key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    /// `ssh-ed25519`.
    Ed25519,
    /// `ecdsa-sha2-nistp256`.
    EcdsaP256,
    /// `ecdsa-sha2-nistp384`.
    EcdsaP384,
    /// `ecdsa-sha2-nistp521`.
    EcdsaP521,
    /// `ssh-rsa`, with its modulus size in bits.
    Rsa { bits: usize },
}

impl KeyKind {
    /// The key's type name (its blob's first string).
    pub fn type_name(self) -> &'static str {
        match self {
            KeyKind::Ed25519 => "ssh-ed25519",
            KeyKind::EcdsaP256 => "ecdsa-sha2-nistp256",
            KeyKind::EcdsaP384 => "ecdsa-sha2-nistp384",
            KeyKind::EcdsaP521 => "ecdsa-sha2-nistp521",
            KeyKind::Rsa { .. } => "ssh-rsa",
        }
    }

    /// The certificate type that certifies a key of this kind (PROTOCOL.certkeys).
    pub fn cert_type_name(self) -> &'static str {
        match self {
            KeyKind::Ed25519 => "ssh-ed25519-cert-v01@openssh.com",
            KeyKind::EcdsaP256 => "ecdsa-sha2-nistp256-cert-v01@openssh.com",
            KeyKind::EcdsaP384 => "ecdsa-sha2-nistp384-cert-v01@openssh.com",
            KeyKind::EcdsaP521 => "ecdsa-sha2-nistp521-cert-v01@openssh.com",
            KeyKind::Rsa { .. } => "ssh-rsa-cert-v01@openssh.com",
        }
    }
}

/// Why a public key cannot be certified.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyRefusal {
    /// Not `<type> <base64> [comment]` on one line.
    #[error("not one OpenSSH public key line (`<type> <base64> [comment]`, as in id_ed25519.pub)")]
    NotAKeyLine,
    /// The base64 blob does not decode to a key of the line's type.
    #[error("the {key_type} key's blob is malformed: {why}")]
    Malformed { key_type: String, why: &'static str },
    /// A type that is never certified (DSA, security keys, certificates, unknown types).
    #[error("key type {0} is not accepted: use Ed25519, ECDSA (P-256, P-384, P-521) or RSA of at least 3072 bits")]
    UnsupportedType(String),
    /// RSA with a short modulus.
    #[error(
        "an RSA key of {0} bits is not accepted: RSA keys need at least 3072 bits (or use Ed25519)"
    )]
    RsaTooShort(usize),
}

/// A key accepted for certification: its kind and its wire blob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubjectKey {
    kind: KeyKind,
    blob: Vec<u8>,
}

impl SubjectKey {
    /// Reads one OpenSSH public key line (surrounding whitespace ignored).
    pub fn from_openssh_line(text: &str) -> Result<SubjectKey, KeyRefusal> {
        let text = text.trim();
        if text.is_empty() || text.contains('\n') || text.contains('\r') {
            return Err(KeyRefusal::NotAKeyLine);
        }
        let mut fields = text.split_whitespace();
        let (Some(key_type), Some(b64)) = (fields.next(), fields.next()) else {
            return Err(KeyRefusal::NotAKeyLine);
        };
        let blob = STANDARD.decode(b64).map_err(|_| KeyRefusal::NotAKeyLine)?;
        SubjectKey::from_blob(key_type, blob)
    }

    /// Reads a wire blob whose type the caller read as `key_type`.
    pub fn from_blob(key_type: &str, blob: Vec<u8>) -> Result<SubjectKey, KeyRefusal> {
        let bad = |why| KeyRefusal::Malformed {
            key_type: key_type.to_string(),
            why,
        };
        let mut r = Reader::new(&blob);
        let inner = r.string().ok_or(bad("no type string"))?;
        if inner != key_type.as_bytes() {
            return Err(bad("its type string differs from the line's type"));
        }
        let kind = match key_type {
            "ssh-ed25519" => {
                let pk = r.string().ok_or(bad("no key"))?;
                if pk.len() != 32 {
                    return Err(bad("an Ed25519 key is 32 bytes"));
                }
                KeyKind::Ed25519
            }
            "ecdsa-sha2-nistp256" | "ecdsa-sha2-nistp384" | "ecdsa-sha2-nistp521" => {
                let (curve, len, kind) = match key_type {
                    "ecdsa-sha2-nistp256" => ("nistp256", 65, KeyKind::EcdsaP256),
                    "ecdsa-sha2-nistp384" => ("nistp384", 97, KeyKind::EcdsaP384),
                    _ => ("nistp521", 133, KeyKind::EcdsaP521),
                };
                if r.string() != Some(curve.as_bytes()) {
                    return Err(bad("the curve name does not match the type"));
                }
                let q = r.string().ok_or(bad("no point"))?;
                if q.len() != len || q[0] != 4 {
                    return Err(bad("the point is not an uncompressed point of the curve"));
                }
                if kind == KeyKind::EcdsaP256 && p256::PublicKey::from_sec1_bytes(q).is_err() {
                    return Err(bad("the point is not on P-256"));
                }
                kind
            }
            "ssh-rsa" => {
                let e = r.positive_mpint().ok_or(bad("no exponent"))?;
                let n = r.positive_mpint().ok_or(bad("no modulus"))?;
                if e.is_empty() || e.last().is_some_and(|b| b & 1 == 0) {
                    return Err(bad("the exponent is not odd"));
                }
                let bits = n.first().map_or(0, |top| {
                    (n.len() - 1) * 8 + (8 - top.leading_zeros() as usize)
                });
                if bits < MIN_RSA_BITS {
                    return Err(KeyRefusal::RsaTooShort(bits));
                }
                KeyKind::Rsa { bits }
            }
            other => return Err(KeyRefusal::UnsupportedType(other.to_string())),
        };
        if !r.is_empty() {
            return Err(bad("trailing bytes after the key"));
        }
        Ok(SubjectKey { kind, blob })
    }

    /// The key's kind.
    pub fn kind(&self) -> KeyKind {
        self.kind
    }

    /// The wire blob (`string type || key fields`).
    pub fn blob(&self) -> &[u8] {
        &self.blob
    }

    /// The key's fields after its type string (what a certificate carries after the nonce).
    pub fn fields(&self) -> &[u8] {
        let type_len = 4 + self.kind.type_name().len();
        &self.blob[type_len..]
    }

    /// OpenSSH's fingerprint: `SHA256:<unpadded base64>`.
    pub fn fingerprint(&self) -> String {
        fingerprint_of(&self.blob)
    }

    /// The key as an OpenSSH public key line, without a comment.
    pub fn to_openssh_line(&self) -> String {
        format!("{} {}", self.kind.type_name(), STANDARD.encode(&self.blob))
    }
}

/// `SHA256:<unpadded base64 of SHA-256(blob)>`, as `ssh-keygen -l` prints it.
pub fn fingerprint_of(blob: &[u8]) -> String {
    format!("SHA256:{}", STANDARD_NO_PAD.encode(Sha256::digest(blob)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ssh::wire::{put_mpint, put_string};

    fn line(blob: &[u8], key_type: &str) -> String {
        format!("{key_type} {} me@host", STANDARD.encode(blob))
    }

    fn rsa(bits: usize) -> Vec<u8> {
        let mut blob = Vec::new();
        put_string(&mut blob, b"ssh-rsa");
        put_mpint(&mut blob, &[1, 0, 1]);
        let mut n = vec![0xffu8; bits / 8];
        n[bits / 8 - 1] = 0xfb;
        put_mpint(&mut blob, &n);
        blob
    }

    #[test]
    fn rsa_needs_3072_bits() {
        let k = SubjectKey::from_openssh_line(&line(&rsa(3072), "ssh-rsa")).unwrap();
        assert_eq!(k.kind(), KeyKind::Rsa { bits: 3072 });
        assert_eq!(
            SubjectKey::from_openssh_line(&line(&rsa(2048), "ssh-rsa")),
            Err(KeyRefusal::RsaTooShort(2048))
        );
    }

    #[test]
    fn dsa_and_unknown_types_are_refused_by_name() {
        let mut blob = Vec::new();
        put_string(&mut blob, b"ssh-dss");
        assert_eq!(
            SubjectKey::from_openssh_line(&line(&blob, "ssh-dss")),
            Err(KeyRefusal::UnsupportedType("ssh-dss".into()))
        );
        assert_eq!(
            SubjectKey::from_openssh_line("ssh-ed25519"),
            Err(KeyRefusal::NotAKeyLine)
        );
    }

    #[test]
    fn ed25519_reads_and_fingerprints() {
        let mut blob = Vec::new();
        put_string(&mut blob, b"ssh-ed25519");
        put_string(&mut blob, &[7u8; 32]);
        let k = SubjectKey::from_openssh_line(&line(&blob, "ssh-ed25519")).unwrap();
        assert_eq!(k.kind(), KeyKind::Ed25519);
        assert_eq!(k.fields(), &blob[15..]);
        assert!(k.fingerprint().starts_with("SHA256:"));
        assert!(!k.fingerprint().ends_with('='));
    }
}
