//! CSR checks: a PKCS#10 DER request, self-signed by a P-256 key.
//!
//! [`VerifiedCsr::verify`] is the only way to get a [`VerifiedCsr`]: the DER parses with nothing
//! after it, the signature algorithm is ecdsa-with-SHA256, the key is an uncompressed P-256 point
//! on the curve, and the self-signature verifies over the request info. Nothing else of the CSR
//! is kept: its subject, attributes and requested extensions are ignored, because a certificate
//! is built from the registry's decision and takes only the public key from the CSR.
//!
//! [`build_csr`] is the agent's side: a CSR with an empty subject and no attributes, signed by a
//! node key.

use ring::signature::{UnparsedPublicKey, ECDSA_P256_SHA256_ASN1};
use x509_parser::oid_registry::OID_SIG_ECDSA_WITH_SHA256;
use x509_parser::prelude::{FromDer, X509CertificationRequest};

use super::encoding::sha256;
use super::keys::{KeyError, KeyRole, PrivateKey, PublicKey};

/// The largest CSR accepted, in bytes.
pub const MAX_CSR_LEN: usize = 16 * 1024;

/// Why a CSR was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CsrError {
    /// Larger than [`MAX_CSR_LEN`].
    #[error("the CSR is {0} bytes, more than the 16 KiB accepted")]
    TooLarge(usize),
    /// Not PKCS#10 DER, or bytes after it.
    #[error("the CSR is not a PKCS#10 DER request")]
    Malformed,
    /// Signed with another algorithm than ecdsa-with-SHA256.
    #[error("the CSR is signed with {0}, not ecdsa-with-SHA256")]
    WrongSignatureAlgorithm(String),
    /// The key is not a P-256 key.
    #[error("the CSR's key is not a P-256 public key: {0}")]
    WrongKeyType(KeyError),
    /// The self-signature does not verify.
    #[error("the CSR's signature does not verify with its own key")]
    BadSignature,
}

/// A CSR whose self-signature verified with a P-256 key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedCsr {
    der: Vec<u8>,
    sha256: [u8; 32],
    public_key: PublicKey,
}

impl VerifiedCsr {
    /// Parses and verifies a DER CSR.
    pub fn verify(der: &[u8]) -> Result<VerifiedCsr, CsrError> {
        if der.len() > MAX_CSR_LEN {
            return Err(CsrError::TooLarge(der.len()));
        }
        let csr = match X509CertificationRequest::from_der(der) {
            Ok(([], csr)) => csr,
            _ => return Err(CsrError::Malformed),
        };
        if csr.signature_algorithm.algorithm != OID_SIG_ECDSA_WITH_SHA256
            || csr.signature_algorithm.parameters.is_some()
        {
            return Err(CsrError::WrongSignatureAlgorithm(
                csr.signature_algorithm.algorithm.to_id_string(),
            ));
        }
        let info = &csr.certification_request_info;
        let public_key =
            PublicKey::from_spki_der(info.subject_pki.raw).map_err(CsrError::WrongKeyType)?;
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_ASN1, public_key.uncompressed_point())
            .verify(info.raw, &csr.signature_value.data)
            .map_err(|_| CsrError::BadSignature)?;
        Ok(VerifiedCsr {
            der: der.to_vec(),
            sha256: sha256(der),
            public_key,
        })
    }

    /// The CSR exactly as received.
    pub fn der(&self) -> &[u8] {
        &self.der
    }

    /// SHA-256 of the DER: what sealed tokens, proofs and JoinResponse bind to.
    pub fn sha256(&self) -> &[u8; 32] {
        &self.sha256
    }

    /// The requester's public key, SubjectPublicKeyInfo DER.
    pub fn spki_der(&self) -> &[u8] {
        self.public_key.spki_der()
    }

    /// The requester's public key.
    pub fn public_key(&self) -> &PublicKey {
        &self.public_key
    }
}

/// Why the agent could not build a CSR.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildCsrError {
    /// Only node keys request node certificates.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// rcgen failed (a bug).
    #[error("building the CSR failed: {0}")]
    Build(String),
    /// The node key's holder could not sign it (a TPM, `bcd helper`): its own reason.
    #[error(transparent)]
    Signer(#[from] super::keys::SignerError),
}

/// Agent side: a CSR for `key` (role [`KeyRole::Node`]) with an empty subject and no attributes.
pub fn build_csr(key: &PrivateKey) -> Result<Vec<u8>, BuildCsrError> {
    key.require_role(KeyRole::Node)?;
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    let csr = params
        .serialize_request(&key.rcgen_key_pair()?)
        .map_err(|e| BuildCsrError::Build(e.to_string()))?;
    Ok(csr.der().to_vec())
}
