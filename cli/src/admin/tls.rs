//! TLS of the admin listener: the server presents a serving-CA certificate for the listener's
//! names (issued at start and renewed like the gateway's, `gateway::edge::serving`); a client must
//! present an operator certificate, verified against the deployment's operator CA **only**.
//!
//! [`OperatorClientVerifier`] (the project's one verifier, [`proto::peer_tls`], with
//! [`OperatorChecks`] on top) lets webpki check the chain to the operator CA (a node, gateway or
//! internal certificate chains to another CA and fails), then requires the leaf to name
//! clientAuth (webpki admits a leaf naming no usage), then refuses a serial the log has revoked
//! (`operator revoke`): the revoked set is [`RevokedOperators`], refreshed from the store at
//! most a second apart by the server. A certificate the log does not know yet (just issued) is
//! fine: only revocations refuse. Sessions are never resumed, so every connection is checked
//! against the revoked set as it is then.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock};

use gateway::tls::{has_extended_key_usage, provider, without_resumption, TlsSetupError, Usage};
use proto::peer_tls::{ClientVerifier, PeerChecks, SetupError};
use rustls::pki_types::CertificateDer;
use rustls::{CertificateError, OtherError, ServerConfig};

use super::counters::AdminCounters;

/// The revoked operator serials (big-endian bytes, leading zeros ignored), as last read.
#[derive(Debug, Default)]
pub struct RevokedOperators(RwLock<BTreeSet<Vec<u8>>>);

/// A serial without its leading zero bytes (DER keeps one to stay positive; the log may not).
fn canonical(serial: &[u8]) -> Vec<u8> {
    let start = serial.iter().position(|b| *b != 0).unwrap_or(serial.len());
    serial[start..].to_vec()
}

impl RevokedOperators {
    /// Replaces the set with `serials`.
    pub fn replace(&self, serials: impl IntoIterator<Item = Vec<u8>>) {
        let next: BTreeSet<Vec<u8>> = serials.into_iter().map(|s| canonical(&s)).collect();
        match self.0.write() {
            Ok(mut g) => *g = next,
            Err(p) => *p.into_inner() = next,
        }
    }

    /// Whether `serial` is revoked.
    pub fn contains(&self, serial: &[u8]) -> bool {
        let key = canonical(serial);
        match self.0.read() {
            Ok(g) => g.contains(&key),
            Err(p) => p.into_inner().contains(&key),
        }
    }
}

/// Why an operator's client certificate was refused at the handshake (besides the chain).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OperatorRefusal {
    #[error("the certificate does not parse: {0}")]
    Parse(String),
    #[error("the certificate names no clientAuth extended key usage")]
    NoClientAuth,
    #[error("the operator certificate {serial} is revoked (`bcctl operator list` shows it)")]
    Revoked { serial: String },
}

fn refuse(refusal: OperatorRefusal) -> rustls::Error {
    tracing::warn!(%refusal, "admin client certificate refused");
    rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(refusal))))
}

/// What an operator's client certificate must be beyond its chain to the operator CA
/// (clientAuth named, its serial not revoked).
#[derive(Debug)]
pub struct OperatorChecks {
    revoked: Arc<RevokedOperators>,
    counters: Arc<AdminCounters>,
}

impl PeerChecks for OperatorChecks {
    fn chain_refused(&self, e: rustls::Error) -> rustls::Error {
        tracing::warn!(error = %e, "admin client certificate refused (not from the operator CA, or expired)");
        e
    }

    fn check_leaf(&self, end_entity: &CertificateDer<'_>) -> Result<(), rustls::Error> {
        if !has_extended_key_usage(end_entity.as_ref(), Usage::ClientAuth) {
            return Err(refuse(OperatorRefusal::NoClientAuth));
        }
        let serial = x509_parser::parse_x509_certificate(end_entity.as_ref())
            .map(|(_, c)| c.raw_serial().to_vec())
            .map_err(|e| refuse(OperatorRefusal::Parse(e.to_string())))?;
        if self.revoked.contains(&serial) {
            self.counters
                .revoked_handshakes
                .fetch_add(1, Ordering::Relaxed);
            return Err(refuse(OperatorRefusal::Revoked {
                serial: hex::encode(canonical(&serial)),
            }));
        }
        Ok(())
    }
}

/// Admits only operator certificates of this deployment that are not revoked (module docs).
pub type OperatorClientVerifier = ClientVerifier<OperatorChecks>;

/// The admin listener's verifier, anchored at the operator CA only.
pub fn operator_client_verifier(
    operator_ca_der: &[u8],
    revoked: Arc<RevokedOperators>,
    counters: Arc<AdminCounters>,
) -> Result<OperatorClientVerifier, TlsSetupError> {
    let checks = OperatorChecks { revoked, counters };
    ClientVerifier::new(operator_ca_der, checks).map_err(|e| match e {
        SetupError::Anchor(e) => {
            TlsSetupError::Verifier(format!("the operator CA certificate: {e}"))
        }
        SetupError::Verifier(e) => TlsSetupError::Verifier(e.to_string()),
    })
}

/// The admin listener's TLS: 1.3, ALPN h2, an operator certificate required, no resumption;
/// its own certificate from `resolver` (renewed while it runs).
pub fn admin_server_config(
    resolver: Arc<dyn rustls::server::ResolvesServerCert>,
    verifier: OperatorClientVerifier,
) -> Result<ServerConfig, TlsSetupError> {
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_client_cert_verifier(Arc::new(verifier))
        .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"h2".to_vec()];
    without_resumption(&mut config);
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serials_compare_without_leading_zeros() {
        let r = RevokedOperators::default();
        r.replace([vec![0x00, 0x8a, 0x01]]);
        assert!(r.contains(&[0x8a, 0x01]));
        assert!(r.contains(&[0x00, 0x8a, 0x01]));
        assert!(!r.contains(&[0x8a]));
    }
}
