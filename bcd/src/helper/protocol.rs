//! The helper's wire (spec 002 "Through bcd helper"): on a Unix stream socket, the node writes
//! one [`Request`] per line as JSON and reads one [`Answer`] per line; a connection carries any
//! number of them in turn. A line is at most [`MAX_LINE`] bytes. Keys are named by their
//! 32-byte unique (what `node.key` keeps), binary fields are standard base64.
//!
//! | op | request | answer |
//! | --- | --- | --- |
//! | `tpm.nodekey` | `unique` | `nodeKey`: the key's TPMT_PUBLIC |
//! | `tpm.sign` | `unique`, `digest` (SHA-256, 32 bytes) | `signature`: r‖s, 64 bytes |
//! | `tpm.ak` | | `ak`: the AK's TPMT_PUBLIC |
//! | `tpm.certify` | `unique`, `qualifying` (32 bytes) | `certification`: TPMS_ATTEST and the AK's TPMT_SIGNATURE |
//! | `tpm.release` | `unique` | `released` |
//!
//! Any of them may be answered `refused` with an operator-readable `error`.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The longest the node waits for any answer.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest line either side reads.
pub const MAX_LINE: usize = 64 * 1024;

/// 32 bytes, as 64 lower-case hex digits on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bytes32(pub [u8; 32]);

impl Serialize for Bytes32 {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let hex: String = self.0.iter().map(|b| format!("{b:02x}")).collect();
        s.serialize_str(&hex)
    }
}

impl<'de> Deserialize<'de> for Bytes32 {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Bytes32, D::Error> {
        let text = String::deserialize(d)?;
        let bytes = text.as_bytes();
        if bytes.len() != 64 {
            return Err(serde::de::Error::custom("expected 64 hex digits"));
        }
        let mut out = [0u8; 32];
        for (i, pair) in bytes.chunks(2).enumerate() {
            let pair = std::str::from_utf8(pair).map_err(serde::de::Error::custom)?;
            out[i] = u8::from_str_radix(pair, 16).map_err(serde::de::Error::custom)?;
        }
        Ok(Bytes32(out))
    }
}

/// Bytes as standard base64 on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blob(pub Vec<u8>);

impl Serialize for Blob {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use base64::Engine as _;
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(&self.0))
    }
}

impl<'de> Deserialize<'de> for Blob {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Blob, D::Error> {
        use base64::Engine as _;
        let text = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .map(Blob)
            .map_err(serde::de::Error::custom)
    }
}

/// What the node asks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", deny_unknown_fields)]
pub enum Request {
    /// Derive the node key of `unique` (the helper's node-key template, owner hierarchy).
    #[serde(rename = "tpm.nodekey")]
    NodeKey {
        /// The key's unique.
        unique: Bytes32,
    },
    /// Sign `digest` (SHA-256) with the node key of `unique`.
    #[serde(rename = "tpm.sign")]
    Sign {
        /// The key's unique.
        unique: Bytes32,
        /// The digest.
        digest: Bytes32,
    },
    /// The AK's public area.
    #[serde(rename = "tpm.ak")]
    Ak {},
    /// The AK's TPM2_Certify of the node key of `unique`, qualified by `qualifying`.
    #[serde(rename = "tpm.certify")]
    Certify {
        /// The key's unique.
        unique: Bytes32,
        /// The qualifying data (`sha256(csr)`).
        qualifying: Bytes32,
    },
    /// Unload the node key of `unique` (nothing signs with it any more).
    #[serde(rename = "tpm.release")]
    Release {
        /// The key's unique.
        unique: Bytes32,
    },
}

impl Request {
    /// The op's name on the wire (`tpm.sign`).
    pub fn op(&self) -> &'static str {
        match self {
            Request::NodeKey { .. } => "tpm.nodekey",
            Request::Sign { .. } => "tpm.sign",
            Request::Ak {} => "tpm.ak",
            Request::Certify { .. } => "tpm.certify",
            Request::Release { .. } => "tpm.release",
        }
    }
}

/// What the helper answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "camelCase", deny_unknown_fields)]
pub enum Answer {
    /// To `tpm.nodekey`: the derived key's TPMT_PUBLIC, marshalled.
    #[serde(rename_all = "camelCase")]
    NodeKey {
        /// TPMT_PUBLIC.
        public_area: Blob,
    },
    /// To `tpm.sign`: the ECDSA signature, r‖s (64 bytes).
    Signature {
        /// r‖s.
        signature: Blob,
    },
    /// To `tpm.ak`: the AK's TPMT_PUBLIC, marshalled.
    #[serde(rename_all = "camelCase")]
    Ak {
        /// TPMT_PUBLIC.
        public_area: Blob,
    },
    /// To `tpm.certify`: the TPMS_ATTEST and the AK's TPMT_SIGNATURE over it.
    Certification {
        /// TPMS_ATTEST, marshalled.
        attest: Blob,
        /// TPMT_SIGNATURE, marshalled.
        signature: Blob,
    },
    /// To `tpm.release`.
    Released,
    /// Any request the helper would not or could not serve.
    Refused {
        /// Why, for the operator.
        error: String,
    },
}

/// One message as its line (JSON and `\n`).
pub fn to_line<T: Serialize>(message: &T) -> Vec<u8> {
    // Serializing these enums cannot fail: every field is a string or bytes.
    let mut line = serde_json::to_vec(message).unwrap_or_else(|_| b"{}".to_vec());
    line.push(b'\n');
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_answers_have_their_wire_names() {
        let sign = Request::Sign {
            unique: Bytes32([0xab; 32]),
            digest: Bytes32([1; 32]),
        };
        let line = String::from_utf8(to_line(&sign)).unwrap();
        assert_eq!(
            line,
            format!(
                "{{\"op\":\"tpm.sign\",\"unique\":\"{}\",\"digest\":\"{}\"}}\n",
                "ab".repeat(32),
                "01".repeat(32)
            )
        );
        assert_eq!(serde_json::from_str::<Request>(&line).unwrap(), sign);
        assert_eq!(
            String::from_utf8(to_line(&Request::Ak {})).unwrap(),
            "{\"op\":\"tpm.ak\"}\n"
        );
        let answer = Answer::NodeKey {
            public_area: Blob(vec![1, 2, 3]),
        };
        assert_eq!(
            String::from_utf8(to_line(&answer)).unwrap(),
            "{\"answer\":\"nodeKey\",\"publicArea\":\"AQID\"}\n"
        );
        assert_eq!(
            String::from_utf8(to_line(&Answer::Refused { error: "no".into() })).unwrap(),
            "{\"answer\":\"refused\",\"error\":\"no\"}\n"
        );
        for bad in [
            "{\"op\":\"tpm.clear\"}",
            "{\"op\":\"tpm.sign\",\"unique\":\"ab\",\"digest\":\"01\"}",
            "{\"op\":\"tpm.ak\",\"handle\":1}",
        ] {
            assert!(serde_json::from_str::<Request>(bad).is_err(), "{bad}");
        }
    }
}
