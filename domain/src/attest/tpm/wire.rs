//! The `tpm` attestor's messages (spec 000 "tpm"), shared by the control plane (which parses
//! them) and bcd (which produces them). Each is UTF-8 JSON; binary fields are base64url without
//! padding. TPM structures travel as the TPM marshals them, without an outer TPM2B size:
//! `TPMT_PUBLIC` for public areas, `TPMS_ATTEST` for what the TPM signed, `TPMT_SIGNATURE` for
//! its signature.
//!
//! ```text
//! round 1, JoinRequest.attestation:  {"v":1,"evidence":{"ekPublic":…,"ekCertificate":…,"ekIntermediates":[…],"akPublic":…}}
//! JoinChallenge.payload:             {"v":1,"credentialBlob":…,"encryptedSecret":…,"pcrs":[0,…,7],"state":…}
//! round 2, JoinRequest.attestation:  {"v":1,"answer":{"state":…,"secret":…,"quote":…,"quoteSignature":…,
//!                                      "pcrValues":[{"index":0,"digest":…},…],"nodeKey":{"public":…,"certifyInfo":…,"signature":…}}}
//! ```
//!
//! `credentialBlob` is the TPM2B_ID_OBJECT's contents and `encryptedSecret` the
//! TPM2B_ENCRYPTED_SECRET's (both without their size), as TPM2_ActivateCredential takes them.
//! `state` is opaque to the agent: sealed by the control plane, echoed in the answer.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde::{Deserialize, Serialize};

/// The attestor id.
pub const TPM_ATTESTOR: &str = events::schema::attestor_ids::TPM;
/// The only message version.
pub const TPM_WIRE_VERSION: u64 = 1;
/// The PCRs (SHA-256 bank) a challenge asks to quote when no PCR policy is configured.
pub const DEFAULT_QUOTE_PCRS: [u32; 8] = [0, 1, 2, 3, 4, 5, 6, 7];

/// `JoinRequest.attestation` of either round.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TpmAttestation {
    /// [`TPM_WIRE_VERSION`].
    pub v: u64,
    /// Round 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<TpmEvidence>,
    /// Round 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<TpmAnswer>,
}

/// Round 1: who the TPM is (its EK) and the key it will prove (its AK).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TpmEvidence {
    /// The EK's TPMT_PUBLIC.
    #[serde(with = "b64")]
    pub ek_public: Vec<u8>,
    /// The EK certificate (DER), as the manufacturer wrote it to NV.
    #[serde(with = "b64")]
    pub ek_certificate: Vec<u8>,
    /// Intermediate CA certificates (DER) between the EK certificate and an EK root.
    #[serde(default, with = "b64_list")]
    pub ek_intermediates: Vec<Vec<u8>>,
    /// The AK's TPMT_PUBLIC (its name is computed from it, never sent).
    #[serde(with = "b64")]
    pub ak_public: Vec<u8>,
}

/// `JoinChallenge.payload`: a MakeCredential for (EK, AK name), and what to quote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TpmChallenge {
    /// [`TPM_WIRE_VERSION`].
    pub v: u64,
    /// TPM2B_ID_OBJECT contents.
    #[serde(with = "b64")]
    pub credential_blob: Vec<u8>,
    /// TPM2B_ENCRYPTED_SECRET contents.
    #[serde(with = "b64")]
    pub encrypted_secret: Vec<u8>,
    /// PCR indices of the SHA-256 bank to quote, ascending.
    pub pcrs: Vec<u32>,
    /// Sealed state, echoed in [`TpmAnswer::state`].
    #[serde(with = "b64")]
    pub state: Vec<u8>,
}

/// Round 2: the activated secret, a quote bound to it and the CSR, and the node key's
/// certification.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TpmAnswer {
    /// [`TpmChallenge::state`], as received.
    #[serde(with = "b64")]
    pub state: Vec<u8>,
    /// The secret TPM2_ActivateCredential returned.
    #[serde(with = "b64")]
    pub secret: Vec<u8>,
    /// The quote's TPMS_ATTEST; its extraData is `sha256(secret ‖ sha256(csr))`.
    #[serde(with = "b64")]
    pub quote: Vec<u8>,
    /// The AK's TPMT_SIGNATURE over `quote`.
    #[serde(with = "b64")]
    pub quote_signature: Vec<u8>,
    /// The quoted PCRs' values, in the quote's order.
    pub pcr_values: Vec<PcrValue>,
    /// The node key, certified by the AK (absent: no claim about the key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_key: Option<CertifiedKey>,
}

/// One PCR of the SHA-256 bank.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PcrValue {
    /// Its index.
    pub index: u32,
    /// Its value (32 bytes).
    #[serde(with = "b64")]
    pub digest: Vec<u8>,
}

/// A key's TPM2_Certify by the AK, qualified by `sha256(csr)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CertifiedKey {
    /// The key's TPMT_PUBLIC.
    #[serde(with = "b64")]
    pub public: Vec<u8>,
    /// The TPMS_ATTEST (type ATTEST_CERTIFY).
    #[serde(with = "b64")]
    pub certify_info: Vec<u8>,
    /// The AK's TPMT_SIGNATURE over `certify_info`.
    #[serde(with = "b64")]
    pub signature: Vec<u8>,
}

/// `RenewRequest.key_attestation` (spec 000 "Renewing a TPM-held key"), decoded at the edge.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TpmKeyAttestation {
    /// The AK's TPMT_PUBLIC (its name must be the leaf's `urn:bc:tpm-ak:` statement).
    pub ak_public: Vec<u8>,
    /// The new key's TPMT_PUBLIC.
    pub key_public: Vec<u8>,
    /// The AK's TPM2_Certify of it (TPMS_ATTEST), qualified by `sha256(csr)`.
    pub certify_info: Vec<u8>,
    /// The AK's TPMT_SIGNATURE over `certify_info`.
    pub signature: Vec<u8>,
}

impl TpmAttestation {
    /// Round 1's message.
    pub fn evidence(evidence: TpmEvidence) -> TpmAttestation {
        TpmAttestation {
            v: TPM_WIRE_VERSION,
            evidence: Some(evidence),
            answer: None,
        }
    }

    /// Round 2's message.
    pub fn answer(answer: TpmAnswer) -> TpmAttestation {
        TpmAttestation {
            v: TPM_WIRE_VERSION,
            evidence: None,
            answer: Some(answer),
        }
    }

    /// The JSON bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }
}

impl TpmChallenge {
    /// The JSON bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }
}

mod b64 {
    use super::*;

    pub fn serialize<S: serde::Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&URL_SAFE_NO_PAD.encode(bytes))
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        URL_SAFE_NO_PAD
            .decode(text.as_bytes())
            .map_err(serde::de::Error::custom)
    }
}

mod b64_list {
    use super::*;

    pub fn serialize<S: serde::Serializer>(list: &[Vec<u8>], s: S) -> Result<S::Ok, S::Error> {
        let texts: Vec<String> = list.iter().map(|b| URL_SAFE_NO_PAD.encode(b)).collect();
        texts.serialize(s)
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<Vec<u8>>, D::Error> {
        let texts = Vec::<String>::deserialize(d)?;
        texts
            .iter()
            .map(|t| URL_SAFE_NO_PAD.decode(t.as_bytes()))
            .collect::<Result<_, _>>()
            .map_err(serde::de::Error::custom)
    }
}
