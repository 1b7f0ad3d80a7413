//! The RSA key of a configured certificate (AWS's regional certificates, Azure's signers):
//! parsed with x509-parser, the key read with `rsa`.

use rsa::pkcs8::DecodePublicKey as _;
use rsa::RsaPublicKey;

/// Why a configured certificate cannot verify a signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CertKeyError {
    /// Not X.509 DER.
    NotCertificate,
    /// Its key is not RSA.
    NotRsa,
}

/// The RSA key of a DER certificate.
pub fn rsa_key_of(der: &[u8]) -> Result<RsaPublicKey, CertKeyError> {
    let (_, cert) =
        x509_parser::parse_x509_certificate(der).map_err(|_| CertKeyError::NotCertificate)?;
    RsaPublicKey::from_public_key_der(cert.tbs_certificate.subject_pki.raw)
        .map_err(|_| CertKeyError::NotRsa)
}
