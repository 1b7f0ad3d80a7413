//! The audit key: its public half, its pin, its verifier-key string, and the signer.
//!
//! The audit key is an ECDSA P-256 key used for nothing but signing audit checkpoints (DESIGN.md,
//! "No key does two jobs"). Signatures are ECDSA with SHA-256 over the note text, encoded as an
//! ASN.1 DER `ECDSA-Sig-Value`, as C2SP signed-note signature type `0x02` prescribes (ECDSA
//! "as implemented by github.com/transparency-dev/witness").
//!
//! # Key ID
//!
//! c2sp.org/signed-note, "Signature types", `0x02`: "the key ID for these signatures is the
//! truncated SHA-256 hash of the DER encoded public key in SPKI format", i.e.
//! `key ID = SHA-256(SPKI DER)[:4]`, read as a big-endian u32. (Unlike Ed25519's key ID, the key
//! name and type byte are *not* hashed in.)
//!
//! # Pin
//!
//! An auditor pins the key as `sha256/<base64 std of SHA-256(SPKI DER)>`, the same form bcd uses
//! for every other pin (44 base64 characters with padding). A pin alone cannot verify a signature,
//! so the key itself travels beside it (in the PKI bundle's public half or in an export) and is
//! checked against the pin before use ([`AuditPublicKey::check_pin`]).
//!
//! # Verifier key string
//!
//! The key itself, as text, has the shape of a Go `sumdb/note` verifier key:
//!
//! ```text
//! bc-audit+<key ID as 8 lowercase hex digits>+<base64 std of (0x02 || SPKI DER)>
//! ```
//!
//! The key ID is checked against the SPKI when parsing. The first field is a fixed tag, not a key
//! name: the key name in each checkpoint's signature line is that checkpoint's origin (see
//! [`super::checkpoint`]).
//!
//! Only the uncompressed-point P-256 SPKI (91 bytes: a fixed 26-byte header and `04 || X || Y`)
//! is accepted, so every key has exactly one SPKI encoding and therefore one pin.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use ring::rand::SecureRandom;
use ring::signature::{self, EcdsaKeyPair, KeyPair as _};
use sha2::{Digest, Sha256};

/// C2SP signed-note signature type of ECDSA signatures.
pub const SIGNATURE_TYPE_ECDSA: u8 = 0x02;

/// DER header of a P-256 SubjectPublicKeyInfo with an uncompressed point (id-ecPublicKey,
/// prime256v1, BIT STRING of 66 bytes with no unused bits).
const P256_SPKI_HEADER: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];
const P256_SPKI_LEN: usize = 26 + 65;
const PIN_PREFIX: &str = "sha256/";
const VKEY_TAG: &str = "bc-audit";

/// Why a key, a pin or a verifier key string was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("audit key is not a P-256 SubjectPublicKeyInfo with an uncompressed point (expected 91 DER bytes)")]
    NotP256Spki,
    #[error("audit key pin must look like sha256/<base64 of 32 bytes>: {0}")]
    BadPin(&'static str),
    #[error(
        "audit verifier key must look like bc-audit+<8 hex digits>+<base64 of 0x02 || SPKI>: {0}"
    )]
    BadVerifierKey(&'static str),
    #[error("audit verifier key names key ID {stated} but its SPKI has key ID {actual}")]
    VerifierKeyIdMismatch { stated: String, actual: String },
    #[error(
        "audit key does not match the pin: the key's pin is {actual}, the pinned one is {pinned}"
    )]
    PinMismatch { pinned: String, actual: String },
    #[error("audit signing key is not a valid P-256 PKCS#8 key")]
    BadPrivateKey,
    #[error("signing with the audit key failed")]
    SigningFailed,
}

/// The audit key's public half.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct AuditPublicKey {
    spki: [u8; P256_SPKI_LEN],
}

impl std::fmt::Debug for AuditPublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AuditPublicKey({})", self.pin())
    }
}

impl AuditPublicKey {
    /// From the DER SubjectPublicKeyInfo (uncompressed P-256 only).
    pub fn from_spki_der(der: &[u8]) -> Result<Self, KeyError> {
        if der.len() != P256_SPKI_LEN || der[..26] != P256_SPKI_HEADER || der[26] != 0x04 {
            return Err(KeyError::NotP256Spki);
        }
        let mut spki = [0u8; P256_SPKI_LEN];
        spki.copy_from_slice(der);
        Ok(AuditPublicKey { spki })
    }

    /// From the 65-byte uncompressed point `04 || X || Y` (what ring reports for a key pair).
    pub fn from_uncompressed_point(point: &[u8]) -> Result<Self, KeyError> {
        if point.len() != 65 || point[0] != 0x04 {
            return Err(KeyError::NotP256Spki);
        }
        let mut spki = [0u8; P256_SPKI_LEN];
        spki[..26].copy_from_slice(&P256_SPKI_HEADER);
        spki[26..].copy_from_slice(point);
        Ok(AuditPublicKey { spki })
    }

    /// The DER SubjectPublicKeyInfo.
    pub fn spki_der(&self) -> &[u8] {
        &self.spki
    }

    /// The C2SP signed-note key ID: `SHA-256(SPKI DER)[:4]`.
    pub fn key_id(&self) -> [u8; 4] {
        let d = Sha256::digest(self.spki);
        [d[0], d[1], d[2], d[3]]
    }

    /// The key's pin.
    pub fn pin(&self) -> KeyPin {
        KeyPin(Sha256::digest(self.spki).into())
    }

    /// Refuses the key unless it is the pinned one.
    pub fn check_pin(&self, pin: &KeyPin) -> Result<(), KeyError> {
        let actual = self.pin();
        if actual == *pin {
            Ok(())
        } else {
            Err(KeyError::PinMismatch {
                pinned: pin.to_string(),
                actual: actual.to_string(),
            })
        }
    }

    /// The verifier key string (see the module doc).
    pub fn to_verifier_key(&self) -> String {
        let mut raw = Vec::with_capacity(1 + P256_SPKI_LEN);
        raw.push(SIGNATURE_TYPE_ECDSA);
        raw.extend_from_slice(&self.spki);
        format!(
            "{VKEY_TAG}+{}+{}",
            hex::encode(self.key_id()),
            B64.encode(raw)
        )
    }

    /// Parses a verifier key string, checking its type byte and key ID.
    pub fn parse_verifier_key(s: &str) -> Result<Self, KeyError> {
        // The base64 part may itself hold '+', so only the first two separate fields.
        let mut parts = s.splitn(3, '+');
        let (Some(tag), Some(id), Some(key)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(KeyError::BadVerifierKey(
                "expected three fields separated by '+'",
            ));
        };
        if tag != VKEY_TAG {
            return Err(KeyError::BadVerifierKey("the first field must be bc-audit"));
        }
        if id.len() != 8 || !id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(KeyError::BadVerifierKey(
                "the key ID must be 8 lowercase hex digits",
            ));
        }
        let raw = B64
            .decode(key)
            .map_err(|_| KeyError::BadVerifierKey("the key is not standard base64"))?;
        let Some((&ty, spki)) = raw.split_first() else {
            return Err(KeyError::BadVerifierKey("the key is empty"));
        };
        if ty != SIGNATURE_TYPE_ECDSA {
            return Err(KeyError::BadVerifierKey(
                "the key's type byte must be 0x02 (ECDSA)",
            ));
        }
        let key = Self::from_spki_der(spki)?;
        let actual = hex::encode(key.key_id());
        if actual != id {
            return Err(KeyError::VerifierKeyIdMismatch {
                stated: id.to_string(),
                actual,
            });
        }
        Ok(key)
    }

    /// Verifies an ASN.1 DER ECDSA P-256 SHA-256 signature over `msg`.
    pub fn verify(&self, msg: &[u8], sig: &[u8]) -> bool {
        signature::UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_ASN1, &self.spki[26..])
            .verify(msg, sig)
            .is_ok()
    }
}

/// A pinned audit key: `SHA-256(SPKI DER)`, written `sha256/<base64>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KeyPin(pub [u8; 32]);

impl std::fmt::Display for KeyPin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{PIN_PREFIX}{}", B64.encode(self.0))
    }
}

impl std::str::FromStr for KeyPin {
    type Err = KeyError;

    fn from_str(s: &str) -> Result<Self, KeyError> {
        let Some(b64) = s.strip_prefix(PIN_PREFIX) else {
            return Err(KeyError::BadPin("it must start with sha256/"));
        };
        let raw = B64
            .decode(b64)
            .map_err(|_| KeyError::BadPin("the digest is not standard base64"))?;
        let digest: [u8; 32] = raw
            .try_into()
            .map_err(|_| KeyError::BadPin("the digest must be 32 bytes"))?;
        Ok(KeyPin(digest))
    }
}

/// The audit key's private half, for the sealer.
pub struct AuditSigner {
    pair: EcdsaKeyPair,
    public: AuditPublicKey,
}

impl std::fmt::Debug for AuditSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditSigner")
            .field("public", &self.public)
            .finish_non_exhaustive()
    }
}

impl AuditSigner {
    /// Loads a P-256 key from PKCS#8 DER (ring checks the key pair with `rng`).
    pub fn from_pkcs8(pkcs8: &[u8], rng: &dyn SecureRandom) -> Result<Self, KeyError> {
        let pair = EcdsaKeyPair::from_pkcs8(&signature::ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8, rng)
            .map_err(|_| KeyError::BadPrivateKey)?;
        let public = AuditPublicKey::from_uncompressed_point(pair.public_key().as_ref())?;
        Ok(AuditSigner { pair, public })
    }

    /// The public half.
    pub fn public_key(&self) -> &AuditPublicKey {
        &self.public
    }

    /// An ASN.1 DER ECDSA P-256 SHA-256 signature over `msg`.
    pub fn sign(&self, msg: &[u8], rng: &dyn SecureRandom) -> Result<Vec<u8>, KeyError> {
        self.pair
            .sign(rng, msg)
            .map(|s| s.as_ref().to_vec())
            .map_err(|_| KeyError::SigningFailed)
    }
}
