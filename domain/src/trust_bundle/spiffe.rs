//! The trust domain's X.509 authorities as a SPIFFE bundle: the JWK Set of the SPIFFE Trust
//! Domain and Bundle specification (section 4), one `x509-svid` entry per CA certificate as the
//! X509-SVID specification (section 6) publishes them. What `bcctl bundle show --format spiffe`
//! prints and the gateway's bundle endpoint serves (`docs/DECISIONS.md` "Issue 41: the SPIFFE
//! bundle endpoint").
//!
//! Pure: the caller passes the authorities, the sequence (the published trust bundle's version)
//! and the refresh hint; the same inputs give the same bytes. Which certificates are authorities
//! is the caller's choice, made once in [`x509_authorities`].

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use serde_json::json;
use x509_parser::oid_registry::{OID_EC_P256, OID_KEY_TYPE_EC_PUBLIC_KEY};

/// The refresh hint when none is configured: five minutes, the poll interval the SPIFFE
/// Federation specification (section 4.1) recommends when a bundle sets none.
pub const DEFAULT_REFRESH_HINT_SECS: u64 = 300;

/// Why a bundle could not be rendered: a certificate that cannot stand as an X509-SVID
/// authority (a bug or a corrupt PKI bundle, never a client's doing), or a zero refresh hint.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpiffeBundleError {
    /// The DER is not an X.509 certificate.
    #[error("X.509 authority {index}: not a certificate ({reason}); is the PKI bundle intact?")]
    NotACertificate { index: usize, reason: String },
    /// The certificate is not a CA (basicConstraints cA absent or false).
    #[error("X.509 authority {index}: not a CA certificate (basicConstraints cA is not true)")]
    NotACa { index: usize },
    /// The certificate's key is not an EC P-256 key in uncompressed form.
    #[error("X.509 authority {index}: its key is not an uncompressed EC P-256 key")]
    NotP256 { index: usize },
    /// A refresh hint of 0 seconds would ask consumers to poll without pause.
    #[error("the SPIFFE bundle refresh hint must be at least 1 second")]
    ZeroRefreshHint,
}

/// The X.509 authorities of the trust domain's SPIFFE bundle: the root CA only.
///
/// Every X509-SVID of the trust domain (a node's certificate, whose chain in `cert.pem` is the
/// leaf then the node CA) chains to the root, and the X509-SVID specification asks for
/// self-signed authorities (section 6.1). The node, serving and operator CAs are intermediates
/// under it: as authorities they would admit nothing the root does not, and OpenSSL-based
/// relying parties (envoy) do not take a certificate that is not self-signed as a trust anchor.
/// The command-signing root certifies worker command keys, not SVIDs, so it is left out.
pub fn x509_authorities(root_ca_der: &[u8]) -> Vec<&[u8]> {
    vec![root_ca_der]
}

/// One `x509-svid` JWK for a CA certificate: its P-256 key (`kty`, `crv`, `x`, `y`, base64url
/// without padding) and the certificate in `x5c` (standard base64 of the DER). No `kid`: the
/// X509-SVID specification forbids it.
fn jwk(index: usize, der: &[u8]) -> Result<serde_json::Value, SpiffeBundleError> {
    let (rest, cert) = x509_parser::parse_x509_certificate(der).map_err(|e| {
        SpiffeBundleError::NotACertificate {
            index,
            reason: e.to_string(),
        }
    })?;
    if !rest.is_empty() {
        return Err(SpiffeBundleError::NotACertificate {
            index,
            reason: format!("{} bytes after the certificate", rest.len()),
        });
    }
    if !matches!(cert.basic_constraints(), Ok(Some(bc)) if bc.value.ca) {
        return Err(SpiffeBundleError::NotACa { index });
    }
    let spki = cert.public_key();
    let curve = spki
        .algorithm
        .parameters
        .as_ref()
        .and_then(|p| p.as_oid().ok());
    let point = &spki.subject_public_key.data;
    if spki.algorithm.algorithm != OID_KEY_TYPE_EC_PUBLIC_KEY
        || curve != Some(OID_EC_P256)
        || point.len() != 65
        || point[0] != 0x04
    {
        return Err(SpiffeBundleError::NotP256 { index });
    }
    // Keys in alphabetical order: the same bytes whether or not serde_json keeps insertion order.
    Ok(json!({
        "crv": "P-256",
        "kty": "EC",
        "use": "x509-svid",
        "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
        "x5c": [STANDARD.encode(der)],
        "y": URL_SAFE_NO_PAD.encode(&point[33..65]),
    }))
}

/// The SPIFFE bundle of `authorities` (DER, in the order given), with `spiffe_sequence` set to
/// `sequence` and `spiffe_refresh_hint` to `refresh_hint_secs`: pretty-printed JSON (UTF-8) with
/// a final newline.
pub fn render_spiffe_bundle(
    authorities: &[&[u8]],
    sequence: u64,
    refresh_hint_secs: u64,
) -> Result<String, SpiffeBundleError> {
    if refresh_hint_secs == 0 {
        return Err(SpiffeBundleError::ZeroRefreshHint);
    }
    let keys = authorities
        .iter()
        .enumerate()
        .map(|(i, der)| jwk(i, der))
        .collect::<Result<Vec<_>, _>>()?;
    let doc = json!({
        "keys": keys,
        "spiffe_refresh_hint": refresh_hint_secs,
        "spiffe_sequence": sequence,
    });
    let mut text = serde_json::to_string_pretty(&doc).unwrap_or_default();
    text.push('\n');
    Ok(text)
}

#[cfg(test)]
#[path = "spiffe_tests.rs"]
mod tests;
