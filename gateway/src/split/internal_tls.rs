//! TLS between a split gateway and the api process. Both certificates come from the deployment's
//! serving CA and are told apart by role and usage:
//!
//! - the api's internal endpoint presents `OU=bc-role:internal` with serverAuth, issued by the
//!   api itself at every start (it holds the serving CA key);
//! - a gateway presents `OU=bc-role:gateway` with clientAuth only, issued by
//!   `bcctl pki issue-internal` (the gateway holds no CA key, so it cannot make one).
//!
//! Both verifiers are the project's one verifier ([`proto::peer_tls`]) with [`GatewayPeer`] or
//! [`ApiPeer`] on top. [`InternalClientVerifier`] (api side) lets webpki check the chain to the
//! serving CA and the clientAuth usage, then requires the leaf to name clientAuth (webpki admits
//! a leaf naming no usage at all) and the gateway role; a node certificate (another CA), a
//! gateway's agent-facing serving certificate (serverAuth only) or no certificate at all fails
//! the handshake.
//! [`InternalServerVerifier`] (gateway side) checks the chain, serverAuth (named by the leaf),
//! the dialled name, then requires the internal role, so another gateway's serving certificate
//! cannot pose as the api. The api's server configuration resumes no TLS session.

use std::sync::Arc;

use proto::peer_tls::{ClientVerifier, PeerChecks, ServerVerifier, SetupError};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{CertificateError, ClientConfig, OtherError, ServerConfig};

use crate::edge::tls::{
    has_extended_key_usage, provider, without_resumption, TlsSetupError, Usage,
};

/// The role the api's internal certificate carries.
pub const API_ROLE: &str = "internal";
/// The role a gateway's internal client certificate carries.
pub const GATEWAY_ROLE: &str = "gateway";

/// Why an internal peer's certificate was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InternalRefusal {
    #[error("the certificate does not parse: {0}")]
    Parse(String),
    #[error("the certificate carries role {found:?}, not bc-role:{expected}")]
    WrongRole {
        found: Option<String>,
        expected: &'static str,
    },
    #[error("the certificate names no extended key usage {0:?}")]
    NoUsage(Usage),
}

/// Requires the leaf to name `usage` (webpki admits a leaf without extended key usages).
fn require_usage(der: &[u8], usage: Usage) -> Result<(), rustls::Error> {
    if has_extended_key_usage(der, usage) {
        return Ok(());
    }
    let refusal = InternalRefusal::NoUsage(usage);
    tracing::warn!(%refusal, "internal TLS peer refused");
    Err(rustls::Error::InvalidCertificate(CertificateError::Other(
        OtherError(Arc::new(refusal)),
    )))
}

/// The single `bc-role:<role>` of a certificate's subject (`None` when there is not exactly one).
pub fn certificate_role(der: &[u8]) -> Result<Option<String>, InternalRefusal> {
    let (_, cert) = x509_parser::parse_x509_certificate(der)
        .map_err(|e| InternalRefusal::Parse(e.to_string()))?;
    let roles: Vec<String> = cert
        .subject()
        .iter_organizational_unit()
        .filter_map(|ou| ou.as_str().ok())
        .filter_map(|ou| ou.strip_prefix("bc-role:").map(str::to_owned))
        .collect();
    Ok(match roles.as_slice() {
        [one] => Some(one.clone()),
        _ => None,
    })
}

fn require_role(der: &[u8], expected: &'static str) -> Result<(), rustls::Error> {
    let refusal = match certificate_role(der) {
        Ok(Some(role)) if role == expected => return Ok(()),
        Ok(found) => InternalRefusal::WrongRole { found, expected },
        Err(e) => e,
    };
    tracing::warn!(%refusal, "internal TLS peer refused");
    Err(rustls::Error::InvalidCertificate(CertificateError::Other(
        OtherError(Arc::new(refusal)),
    )))
}

/// Api side: what a gateway's internal client certificate must be beyond its chain to the
/// serving CA (clientAuth named, the gateway role).
#[derive(Debug)]
pub struct GatewayPeer;

impl PeerChecks for GatewayPeer {
    fn chain_refused(&self, e: rustls::Error) -> rustls::Error {
        tracing::warn!(error = %e, "internal client certificate refused");
        e
    }

    fn check_leaf(&self, end_entity: &CertificateDer<'_>) -> Result<(), rustls::Error> {
        require_usage(end_entity.as_ref(), Usage::ClientAuth)?;
        require_role(end_entity.as_ref(), GATEWAY_ROLE)
    }
}

/// Gateway side: what the api's internal certificate must be beyond its chain to the serving CA
/// and the dialled name (serverAuth named, the internal role).
#[derive(Debug)]
pub struct ApiPeer;

impl PeerChecks for ApiPeer {
    fn check_leaf(&self, end_entity: &CertificateDer<'_>) -> Result<(), rustls::Error> {
        require_usage(end_entity.as_ref(), Usage::ServerAuth)?;
        require_role(end_entity.as_ref(), API_ROLE)
    }
}

/// Api side: admits only gateways' internal client certificates (see the module docs).
pub type InternalClientVerifier = ClientVerifier<GatewayPeer>;

/// Gateway side: admits only the api's internal certificate for the dialled name.
pub type InternalServerVerifier = ServerVerifier<ApiPeer>;

fn serving_ca_setup(e: SetupError) -> TlsSetupError {
    match e {
        SetupError::Anchor(e) => TlsSetupError::NodeCa(format!("the serving CA certificate: {e}")),
        SetupError::Verifier(e) => TlsSetupError::Verifier(e.to_string()),
    }
}

/// The api's verifier of gateways, anchored at the serving CA.
pub fn internal_client_verifier(
    serving_ca_der: &[u8],
) -> Result<InternalClientVerifier, TlsSetupError> {
    ClientVerifier::new(serving_ca_der, GatewayPeer).map_err(serving_ca_setup)
}

/// A gateway's verifier of the api, anchored at the serving CA.
pub fn internal_server_verifier(
    serving_ca_der: &[u8],
) -> Result<InternalServerVerifier, TlsSetupError> {
    ServerVerifier::new(serving_ca_der, ApiPeer).map_err(serving_ca_setup)
}

/// The api's internal endpoint: TLS 1.3, ALPN h2, gateways' client certificates required; its
/// own certificate from `resolver` ([`crate::edge::serving::ServingCert`], renewed while it runs).
pub fn api_server_config(
    resolver: Arc<dyn rustls::server::ResolvesServerCert>,
    serving_ca_der: &[u8],
) -> Result<ServerConfig, TlsSetupError> {
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_client_cert_verifier(Arc::new(internal_client_verifier(serving_ca_der)?))
        .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"h2".to_vec()];
    without_resumption(&mut config);
    Ok(config)
}

/// A gateway's client configuration towards the api: TLS 1.3, ALPN h2, presenting its internal
/// client certificate (`chain`, leaf first) and key.
pub fn relay_client_config(
    serving_ca_der: &[u8],
    chain: Vec<Vec<u8>>,
    key_pkcs8: Vec<u8>,
) -> Result<ClientConfig, TlsSetupError> {
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(internal_server_verifier(serving_ca_der)?))
        .with_client_auth_cert(
            chain.into_iter().map(CertificateDer::from).collect(),
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key_pkcs8)),
        )?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}
