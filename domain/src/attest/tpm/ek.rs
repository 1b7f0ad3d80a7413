//! The endorsement key's certificate (TCG EK Credential Profile 2.5 §3): it must chain to one
//! of the operator's EK roots through the intermediates the agent sent, carry the EK
//! certificate purpose (2.23.133.8.1) when it names any, and certify exactly the key of the
//! EK's `TPMT_PUBLIC`. The chain is checked by rustls-webpki (docs/DECISIONS.md "Issue 19").

use rustls_pki_types::{CertificateDer, UnixTime};
use time::OffsetDateTime;
use x509_parser::prelude::{FromDer, X509Certificate};
use x509_parser::public_key::PublicKey;

use super::marshal::{CURVE_P256, CURVE_P384};
use super::public::{KeyDetail, TpmPublic};

/// `tcg-kp-EKCertificate` (2.23.133.8.1), its DER value bytes.
const EK_CERTIFICATE_PURPOSE: &[u8] = &[0x67, 0x81, 0x05, 0x08, 0x01];

/// Why an EK certificate was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EkCertError {
    /// Not an X.509 certificate webpki and x509-parser can read.
    #[error("the EK certificate does not parse")]
    Malformed,
    /// It chains to none of the configured roots (or is expired, or of another purpose).
    #[error("the EK certificate chains to no configured EK root")]
    Untrusted,
    /// Its public key is not the EK's.
    #[error("the EK certificate's key is not the EK's public key")]
    Mismatch,
}

/// Checks that `cert` chains to one of `roots` (DER) through `intermediates` (DER) at `now`.
pub fn verify_chain(
    cert: &[u8],
    intermediates: &[Vec<u8>],
    roots: &[Vec<u8>],
    now: OffsetDateTime,
) -> Result<(), EkCertError> {
    let cert_der = CertificateDer::from(cert);
    let leaf = webpki::EndEntityCert::try_from(&cert_der).map_err(|_| EkCertError::Malformed)?;
    let root_ders: Vec<CertificateDer<'_>> = roots
        .iter()
        .map(|r| CertificateDer::from(r.as_slice()))
        .collect();
    // A root that does not parse anchors nothing; the configuration loader reports it.
    let anchors: Vec<_> = root_ders
        .iter()
        .filter_map(|r| webpki::anchor_from_trusted_cert(r).ok())
        .collect();
    let chain: Vec<CertificateDer<'_>> = intermediates
        .iter()
        .map(|c| CertificateDer::from(c.as_slice()))
        .collect();
    let secs = u64::try_from(now.unix_timestamp()).unwrap_or(0);
    leaf.verify_for_usage(
        webpki::ALL_VERIFICATION_ALGS,
        &anchors,
        &chain,
        UnixTime::since_unix_epoch(std::time::Duration::from_secs(secs)),
        webpki::KeyUsage::required_if_present(EK_CERTIFICATE_PURPOSE),
        None,
        None,
    )
    .map(|_| ())
    .map_err(|_| EkCertError::Untrusted)
}

fn strip(v: &[u8]) -> &[u8] {
    let start = v.iter().position(|b| *b != 0).unwrap_or(v.len());
    &v[start..]
}

/// Checks that the certificate's subject public key is the EK's.
pub fn matches_public(cert: &[u8], ek: &TpmPublic) -> Result<(), EkCertError> {
    let (_, parsed) = X509Certificate::from_der(cert).map_err(|_| EkCertError::Malformed)?;
    let key = parsed
        .public_key()
        .parsed()
        .map_err(|_| EkCertError::Malformed)?;
    let same = match (&key, &ek.detail) {
        (
            PublicKey::RSA(rsa),
            KeyDetail::Rsa {
                exponent, modulus, ..
            },
        ) => {
            let e = if *exponent == 0 { 65_537 } else { *exponent };
            strip(rsa.modulus) == strip(modulus) && strip(rsa.exponent) == strip(&e.to_be_bytes())
        }
        (PublicKey::EC(point), KeyDetail::Ecc { curve, .. }) => {
            let coord = match *curve {
                CURVE_P256 => 32,
                CURVE_P384 => 48,
                _ => return Err(EkCertError::Mismatch),
            };
            ek.ecc_point(coord).as_deref() == Some(point.data())
        }
        _ => false,
    };
    if same {
        Ok(())
    } else {
        Err(EkCertError::Mismatch)
    }
}
