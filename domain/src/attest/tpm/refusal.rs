//! Why a `tpm` join was refused: `tpm:<reason>` (the COMMON contract's list), one variant per
//! check, in the order the attestor makes them.

use super::keys::KeyCertRefusal;
use super::wire::TPM_ATTESTOR;
use crate::attest::contract::AttestorRefusal;

/// Why a `tpm` join was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum TpmRefusal {
    /// Not UTF-8 JSON of the v1 shape, or neither (or both) of evidence and answer.
    #[error("tpm:malformed")]
    Malformed,
    /// `v` is a number other than 1.
    #[error("tpm:unsupported-version")]
    UnsupportedVersion,
    /// The EK's TPMT_PUBLIC or its certificate does not parse.
    #[error("tpm:ek-malformed")]
    EkMalformed,
    /// The EK certificate's key is not the EK public area's.
    #[error("tpm:ek-mismatch")]
    EkMismatch,
    /// The EK is not an RSA-2048, P-256 or P-384 storage key with AES-CFB this control plane
    /// can make a credential for.
    #[error("tpm:ek-unsupported")]
    EkUnsupported,
    /// The EK certificate chains to no configured EK root.
    #[error("tpm:ek-untrusted")]
    EkUntrusted,
    /// The AK's TPMT_PUBLIC does not parse.
    #[error("tpm:ak-malformed")]
    AkMalformed,
    /// The AK's attributes are not a restricted signing key's the TPM made.
    #[error("tpm:ak-attributes")]
    AkAttributes,
    /// The AK is not a P-256 ECDSA-SHA256 key with a SHA-256 name.
    #[error("tpm:ak-unsupported")]
    AkUnsupported,
    /// The answer's state does not open under this deployment's key.
    #[error("tpm:state-invalid")]
    StateInvalid,
    /// The state is for another CSR.
    #[error("tpm:state-other-csr")]
    StateOtherCsr,
    /// The challenge expired.
    #[error("tpm:state-expired")]
    StateExpired,
    /// The secret is not the one the credential protected.
    #[error("tpm:activation")]
    Activation,
    /// The quote or its signature does not parse, or is no TPM-generated quote.
    #[error("tpm:quote-malformed")]
    QuoteMalformed,
    /// The quote's signature is not the AK's.
    #[error("tpm:quote-signature")]
    QuoteSignature,
    /// The quote's extraData is not `sha256(secret || sha256(csr))`.
    #[error("tpm:quote-nonce")]
    QuoteNonce,
    /// The quote covers other PCRs than the challenge asked for, or the values sent do not
    /// hash to its pcrDigest.
    #[error("tpm:pcr-mismatch")]
    PcrMismatch,
    /// A PCR's value is none the policy allows.
    #[error("tpm:pcr-policy")]
    PcrPolicy,
    /// The node key's certification does not parse.
    #[error("tpm:node-key-malformed")]
    NodeKeyMalformed,
    /// The node key's certification is not signed by the AK.
    #[error("tpm:node-key-signature")]
    NodeKeySignature,
    /// The certification is not qualified by this CSR.
    #[error("tpm:node-key-nonce")]
    NodeKeyNonce,
    /// The certified name is not the presented key's.
    #[error("tpm:node-key-name")]
    NodeKeyName,
    /// The node key's attributes are not a TPM-held unrestricted signing key's.
    #[error("tpm:node-key-attributes")]
    NodeKeyAttributes,
    /// The node key is not the CSR's key.
    #[error("tpm:node-key-not-csr")]
    NodeKeyNotCsr,
    /// `node_key = "certified"` and the answer certified no node key.
    #[error("tpm:node-key-not-certified")]
    NodeKeyNotCertified,
    /// The EK is neither bound, nor allow-listed, and no enrollment is configured.
    #[error("tpm:unknown-ek")]
    UnknownEk,
    /// The system random generator failed while making the challenge.
    #[error("tpm:challenge-failed")]
    ChallengeFailed,
}

impl TpmRefusal {
    /// Every reason.
    pub const ALL: [TpmRefusal; 27] = [
        TpmRefusal::Malformed,
        TpmRefusal::UnsupportedVersion,
        TpmRefusal::EkMalformed,
        TpmRefusal::EkMismatch,
        TpmRefusal::EkUnsupported,
        TpmRefusal::EkUntrusted,
        TpmRefusal::AkMalformed,
        TpmRefusal::AkAttributes,
        TpmRefusal::AkUnsupported,
        TpmRefusal::StateInvalid,
        TpmRefusal::StateOtherCsr,
        TpmRefusal::StateExpired,
        TpmRefusal::Activation,
        TpmRefusal::QuoteMalformed,
        TpmRefusal::QuoteSignature,
        TpmRefusal::QuoteNonce,
        TpmRefusal::PcrMismatch,
        TpmRefusal::PcrPolicy,
        TpmRefusal::NodeKeyMalformed,
        TpmRefusal::NodeKeySignature,
        TpmRefusal::NodeKeyNonce,
        TpmRefusal::NodeKeyName,
        TpmRefusal::NodeKeyAttributes,
        TpmRefusal::NodeKeyNotCsr,
        TpmRefusal::NodeKeyNotCertified,
        TpmRefusal::UnknownEk,
        TpmRefusal::ChallengeFailed,
    ];

    /// The reason without the attestor prefix (`activation`).
    pub fn reason(self) -> String {
        let text = self.to_string();
        text.strip_prefix("tpm:").unwrap_or(&text).to_owned()
    }

    /// The contract's refusal, attributed to nobody (the EK authenticated no tenant).
    pub fn refusal(self) -> AttestorRefusal {
        AttestorRefusal::new(TPM_ATTESTOR, &self.reason())
    }
}

impl From<KeyCertRefusal> for TpmRefusal {
    fn from(r: KeyCertRefusal) -> Self {
        match r {
            KeyCertRefusal::Malformed => TpmRefusal::NodeKeyMalformed,
            KeyCertRefusal::Signature => TpmRefusal::NodeKeySignature,
            KeyCertRefusal::Nonce => TpmRefusal::NodeKeyNonce,
            KeyCertRefusal::Name => TpmRefusal::NodeKeyName,
            KeyCertRefusal::Attributes => TpmRefusal::NodeKeyAttributes,
            KeyCertRefusal::NotCsr => TpmRefusal::NodeKeyNotCsr,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_key_reasons_are_the_shared_checks() {
        for r in KeyCertRefusal::ALL {
            assert_eq!(TpmRefusal::from(r).reason(), r.reason());
        }
        assert_eq!(TpmRefusal::UnknownEk.refusal().text(), "tpm:unknown-ek");
    }
}
