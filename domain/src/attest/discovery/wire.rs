//! The discovery evidence on the wire (spec 000 "discovery", "Both halves in bcd"): the site
//! agent's `DiscoveryAssertion`, signed by its node key under purpose `discovery-assertion`, and
//! how both travel on the ramdisk's kernel command line (`bc.token=`, `bc.assertion=`).
//!
//! The messages are protobuf (package `bc.site.v1`, declared here with prost rather than from a
//! `.proto` file, so the pure domain needs no build step):
//!
//! ```text
//! message DiscoveryAssertion {
//!   string site_id = 1;  string signer_node_id = 2;  uint64 lease_epoch = 3;
//!   string mac = 4;      string ip = 5;               string product_uuid = 6;
//!   string workflow_id = 7;  int64 issued_at_ms = 8;  int64 not_after_ms = 9;
//! }
//! message SignedDiscoveryAssertion {
//!   bytes assertion = 1;           // an encoded DiscoveryAssertion, exactly as signed
//!   bytes signer_certificate = 2;  // the site agent's leaf certificate, DER
//!   bytes signature = 3;           // ES256 r || s
//! }
//! ```
//!
//! The signature is over `lp("discovery-assertion") || lp(assertion)` (the framing of
//! [`crate::pki::statement`]): the exact bytes signed are the bytes carried, so a verifier never
//! re-encodes. `JoinRequest.attestation` is the encoded `SignedDiscoveryAssertion`; on the kernel
//! command line it is base64url without padding. The MAC is lower-case and colon-separated,
//! `workflow_id` the boot entry id (`boot_…`), and empty strings mean absent.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use prost::Message as _;

use crate::pki::statement::{signed_input, Purpose, Statement};
use crate::pki::{NodeSigner, Signature, SignerError};

/// The attestor id.
pub const DISCOVERY_ATTESTOR: &str = events::schema::attestor_ids::DISCOVERY;

/// An assertion is valid at most this long after its `issued_at` (spec: 15 minutes, `maxAgeMs`).
pub const MAX_ASSERTION_AGE_MS: i64 = 15 * 60 * 1000;

/// The kernel command-line parameter carrying the discovery token.
pub const CMDLINE_TOKEN: &str = "bc.token";

/// The kernel command-line parameter carrying the signed assertion (base64url, no padding).
pub const CMDLINE_ASSERTION: &str = "bc.assertion";

/// What a site agent asserts about a machine its boot server just served.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct DiscoveryAssertion {
    /// The site.
    #[prost(string, tag = "1")]
    pub site_id: String,
    /// The vouching site agent's node id.
    #[prost(string, tag = "2")]
    pub signer_node_id: String,
    /// The boot lease epoch it held when it signed.
    #[prost(uint64, tag = "3")]
    pub lease_epoch: u64,
    /// The MAC it served, lower-case and colon-separated.
    #[prost(string, tag = "4")]
    pub mac: String,
    /// The IP it served (empty: unknown).
    #[prost(string, tag = "5")]
    pub ip: String,
    /// The machine's product UUID (empty: not asserted).
    #[prost(string, tag = "6")]
    pub product_uuid: String,
    /// The boot entry it rendered (`boot_…`; empty: none).
    #[prost(string, tag = "7")]
    pub workflow_id: String,
    /// When it signed, server time (unix ms).
    #[prost(int64, tag = "8")]
    pub issued_at_ms: i64,
    /// It vouches until then at most (unix ms); the attestor also caps it at
    /// `issued_at_ms + MAX_ASSERTION_AGE_MS`.
    #[prost(int64, tag = "9")]
    pub not_after_ms: i64,
}

/// A [`DiscoveryAssertion`] as signed, with the signer's certificate.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct SignedDiscoveryAssertion {
    /// An encoded [`DiscoveryAssertion`], exactly as signed.
    #[prost(bytes = "vec", tag = "1")]
    pub assertion: Vec<u8>,
    /// The site agent's leaf certificate, DER.
    #[prost(bytes = "vec", tag = "2")]
    pub signer_certificate: Vec<u8>,
    /// ES256 `r || s` over [`assertion_signed_input`].
    #[prost(bytes = "vec", tag = "3")]
    pub signature: Vec<u8>,
}

/// The statement a site agent signs: purpose `discovery-assertion` over the assertion's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AssertionStatement<'a> {
    /// An encoded [`DiscoveryAssertion`].
    pub assertion: &'a [u8],
}

impl Statement for AssertionStatement<'_> {
    fn purpose(&self) -> Purpose {
        Purpose::DiscoveryAssertion
    }

    fn signed_input(&self) -> Vec<u8> {
        assertion_signed_input(self.assertion)
    }
}

/// `lp("discovery-assertion") || lp(assertion)`.
pub fn assertion_signed_input(assertion: &[u8]) -> Vec<u8> {
    signed_input(Purpose::DiscoveryAssertion, &[assertion])
}

/// Why an assertion could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AssertionWireError {
    /// Not base64url.
    #[error("bc.assertion is not base64url: {0}")]
    Base64(String),
    /// Not a `SignedDiscoveryAssertion`, or its `assertion` is not a `DiscoveryAssertion`.
    #[error("the discovery assertion does not decode: {0}")]
    Protobuf(String),
    /// The signature is not 64 bytes.
    #[error("the discovery assertion's signature is {0} bytes, not 64")]
    SignatureLength(usize),
}

impl SignedDiscoveryAssertion {
    /// Signs `assertion` with the site agent's node key.
    pub fn sign(
        assertion: &DiscoveryAssertion,
        signer_certificate: Vec<u8>,
        key: &dyn NodeSigner,
    ) -> Result<SignedDiscoveryAssertion, SignerError> {
        let bytes = assertion.encode_to_vec();
        let signature = key.sign_es256(&assertion_signed_input(&bytes))?;
        Ok(SignedDiscoveryAssertion {
            assertion: bytes,
            signer_certificate,
            signature: signature.as_bytes().to_vec(),
        })
    }

    /// The encoded message (`JoinRequest.attestation`).
    pub fn to_bytes(&self) -> Vec<u8> {
        self.encode_to_vec()
    }

    /// Decodes `JoinRequest.attestation`.
    pub fn from_bytes(bytes: &[u8]) -> Result<SignedDiscoveryAssertion, AssertionWireError> {
        SignedDiscoveryAssertion::decode(bytes)
            .map_err(|e| AssertionWireError::Protobuf(e.to_string()))
    }

    /// The `bc.assertion=` value: base64url, no padding.
    pub fn to_cmdline(&self) -> String {
        URL_SAFE_NO_PAD.encode(self.to_bytes())
    }

    /// Decodes a `bc.assertion=` value.
    pub fn from_cmdline(text: &str) -> Result<SignedDiscoveryAssertion, AssertionWireError> {
        let bytes = URL_SAFE_NO_PAD
            .decode(text.trim())
            .map_err(|e| AssertionWireError::Base64(e.to_string()))?;
        SignedDiscoveryAssertion::from_bytes(&bytes)
    }

    /// The assertion it carries.
    pub fn decode_assertion(&self) -> Result<DiscoveryAssertion, AssertionWireError> {
        DiscoveryAssertion::decode(self.assertion.as_slice())
            .map_err(|e| AssertionWireError::Protobuf(e.to_string()))
    }

    /// The signature, when it is 64 bytes.
    pub fn signature(&self) -> Result<Signature, AssertionWireError> {
        Signature::from_bytes(&self.signature)
            .ok_or(AssertionWireError::SignatureLength(self.signature.len()))
    }
}

/// A MAC address in the one form assertions and boot entries use: lower-case hex pairs joined by
/// colons. Accepts `-` or `:` separators and any case; `None` for anything else.
pub fn normalize_mac(text: &str) -> Option<String> {
    let parts: Vec<&str> = text.trim().split([':', '-']).collect();
    if parts.len() != 6
        || parts
            .iter()
            .any(|p| p.len() != 2 || !p.chars().all(|c| c.is_ascii_hexdigit()))
    {
        return None;
    }
    Some(parts.join(":").to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pki::{KeyRole, PrivateKey};

    #[test]
    fn a_signed_assertion_round_trips_through_the_command_line_and_verifies() {
        let key = PrivateKey::generate(KeyRole::Node).expect("key");
        let assertion = DiscoveryAssertion {
            site_id: "fra1".into(),
            signer_node_id: "node_1".into(),
            lease_epoch: 3,
            mac: "aa:bb:cc:dd:ee:ff".into(),
            issued_at_ms: 1_790_000_000_000,
            not_after_ms: 1_790_000_600_000,
            ..Default::default()
        };
        let signed = SignedDiscoveryAssertion::sign(&assertion, vec![1, 2, 3], &key).expect("sign");
        let back = SignedDiscoveryAssertion::from_cmdline(&signed.to_cmdline()).expect("decode");
        assert_eq!(back, signed);
        assert_eq!(back.decode_assertion().expect("assertion"), assertion);
        let sig = back.signature().expect("64 bytes");
        assert!(key
            .public_key()
            .verify_es256(&assertion_signed_input(&back.assertion), &sig));
        let input = assertion_signed_input(&back.assertion);
        assert_eq!(&input[..4], &19u32.to_be_bytes());
        assert_eq!(&input[4..23], b"discovery-assertion");
    }

    #[test]
    fn macs_normalize_to_lower_case_colons() {
        assert_eq!(
            normalize_mac("AA-BB-cc-DD-ee-0F").as_deref(),
            Some("aa:bb:cc:dd:ee:0f")
        );
        assert_eq!(normalize_mac("aa:bb:cc:dd:ee"), None);
        assert_eq!(normalize_mac("aa:bb:cc:dd:ee:fg"), None);
        assert_eq!(normalize_mac("aabb.ccdd.eeff"), None);
    }
}
