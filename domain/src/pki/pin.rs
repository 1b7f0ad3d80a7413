//! Public-key pins: `sha256/<base64 std of SHA-256(SPKI DER)>`.
//!
//! The same form as bcd's `config.toml` pins (`serving_ca_spki_pin`, `join_encryption_key_pin`,
//! `join_signing_key_pin`). A pin names a key, never a certificate, so renewing a CA for the same
//! key keeps its pin. Parsing is strict: the `sha256/` prefix, padded standard base64, exactly
//! 32 bytes; anything else is a [`PinError`] (a malformed pin must stop a process from starting,
//! not silently pin nothing).

use std::fmt;
use std::str::FromStr;

use super::encoding::{b64, b64_decode, sha256};

/// The prefix every pin starts with.
pub const PIN_PREFIX: &str = "sha256/";

/// A pin: the SHA-256 of a SubjectPublicKeyInfo DER.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Pin([u8; 32]);

/// Why a pin string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PinError {
    /// The text does not start with `sha256/`.
    #[error("malformed pin {0:?}: a pin is sha256/<base64 of SHA-256(SPKI DER)>")]
    MissingPrefix(String),
    /// The part after `sha256/` is not standard padded base64.
    #[error("malformed pin {0:?}: the digest is not standard base64")]
    NotBase64(String),
    /// The digest decodes to another length than 32 bytes.
    #[error("malformed pin {pin:?}: the digest is {len} bytes, a SHA-256 is 32")]
    WrongLength {
        /// The pin as given.
        pin: String,
        /// Decoded length.
        len: usize,
    },
}

impl Pin {
    /// The pin of any SubjectPublicKeyInfo DER (the key type is not checked).
    pub fn of_spki_der(spki_der: &[u8]) -> Pin {
        Pin(sha256(spki_der))
    }

    /// Builds a pin from a digest already computed.
    pub fn from_digest(digest: [u8; 32]) -> Pin {
        Pin(digest)
    }

    /// The 32-byte digest.
    pub fn digest(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Display for Pin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{PIN_PREFIX}{}", b64(&self.0))
    }
}

impl fmt::Debug for Pin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Pin({self})")
    }
}

impl FromStr for Pin {
    type Err = PinError;

    fn from_str(text: &str) -> Result<Pin, PinError> {
        let digest = text
            .strip_prefix(PIN_PREFIX)
            .ok_or_else(|| PinError::MissingPrefix(text.to_owned()))?;
        let bytes = b64_decode(digest).ok_or_else(|| PinError::NotBase64(text.to_owned()))?;
        let len = bytes.len();
        let digest: [u8; 32] = bytes.try_into().map_err(|_| PinError::WrongLength {
            pin: text.to_owned(),
            len,
        })?;
        Ok(Pin(digest))
    }
}

impl serde::Serialize for Pin {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Pin {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Pin, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_and_parse_round_trip() {
        let pin = Pin::of_spki_der(b"not really an spki");
        let text = pin.to_string();
        assert!(text.starts_with("sha256/"));
        assert_eq!(text.len(), "sha256/".len() + 44);
        assert_eq!(text.parse::<Pin>(), Ok(pin));
    }

    #[test]
    fn malformed_pins_are_refused() {
        assert!(matches!(
            "sha1/AAAA".parse::<Pin>(),
            Err(PinError::MissingPrefix(_))
        ));
        assert!(matches!(
            "sha256/@@@@".parse::<Pin>(),
            Err(PinError::NotBase64(_))
        ));
        assert!(matches!(
            "sha256/AAAA".parse::<Pin>(),
            Err(PinError::WrongLength { len: 3, .. })
        ));
        // base64url is not the pin alphabet
        let url = format!("sha256/{}", "_".repeat(43));
        assert!(url.parse::<Pin>().is_err());
    }
}
