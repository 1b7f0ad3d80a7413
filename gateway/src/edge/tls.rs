//! mTLS for node connections: the serving side's rustls configuration and the client-certificate
//! verifier that admits only live node identities.
//!
//! No server configuration of this crate resumes a TLS session ([`without_resumption`]: no
//! session cache, no tickets), so every connection runs its client verifier: a certificate
//! revoked or expired since an earlier handshake cannot come back on that handshake's session.
//!
//! tonic's own TLS options can check a chain but not a SPIFFE profile or a revocation list, so
//! TLS is terminated here, in front of the gRPC server. [`NodeClientVerifier`] (the project's
//! one verifier, [`proto::peer_tls`], with [`NodeChecks`] on top) first lets webpki check the
//! chain to the node CA (signature, validity, client-auth usage when the leaf names usages), then
//! requires the leaf to name clientAuth (webpki accepts a leaf with no extended key usage at all;
//! every node certificate we issue names it), then checks the profile with
//! `domain::pki::NodeIdentity` (exactly one SPIFFE ID, in our trust domain, exactly one agent
//! role, nothing but `urn:bc:` statements beside it), then the serial against the revocation
//! feed's [`RevokedSerials`]. Every refusal is counted by reason; a revoked or expired node
//! certificate is also handed to the recorder of renewal refusals
//! ([`crate::renew::edge_refusals`]: such a node cannot renew, and the refusal is a
//! `security.renew.refused` event).
//!
//! Past a handshake, code sees a [`VerifiedNode`], which only [`VerifiedNode::from_connection`]
//! builds, from a connection this verifier accepted.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use domain::pki::{IdentityError, NodeIdentity, TrustDomain};
use proto::peer_tls::{ClientVerifier, PeerChecks, SetupError};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{CertificateError, OtherError, ServerConfig};

use crate::renew::edge_refusals::EdgeRefusalSink;
use crate::revocation::revoked::RevokedSerials;
use domain::identity::EdgeRenewRefusal;

/// Why a node's certificate was refused at the handshake.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeRefusal {
    #[error("certificate chain: {0}")]
    Chain(String),
    #[error("certificate names another trust domain ({found}); this gateway serves {expected}")]
    ForeignTrustDomain { found: String, expected: String },
    #[error("certificate carries {0} SPIFFE IDs; a node has exactly one")]
    NotOneSpiffeId(usize),
    #[error("certificate subject names no OU=bc-role:<role>")]
    NoRole,
    #[error("certificate subject names {0} roles; a node has exactly one")]
    SeveralRoles(usize),
    #[error("certificate is not a node identity: {0}")]
    Profile(String),
    #[error("certificate serial {0} is revoked")]
    Revoked(String),
    #[error("certificate has no extended key usage naming clientAuth; a node certificate must")]
    NoClientAuthUsage,
}

impl HandshakeRefusal {
    /// The short reason used in metrics and logs.
    pub fn reason(&self) -> &'static str {
        match self {
            HandshakeRefusal::Chain(_) => "chain",
            HandshakeRefusal::ForeignTrustDomain { .. } => "foreign-trust-domain",
            HandshakeRefusal::NotOneSpiffeId(_) => "not-one-spiffe-id",
            HandshakeRefusal::NoRole => "no-role",
            HandshakeRefusal::SeveralRoles(_) => "several-roles",
            HandshakeRefusal::Profile(_) => "profile",
            HandshakeRefusal::Revoked(_) => "revoked",
            HandshakeRefusal::NoClientAuthUsage => "no-client-auth-usage",
        }
    }

    fn from_identity(e: IdentityError) -> Self {
        match e {
            IdentityError::ForeignTrustDomain { found, expected } => {
                HandshakeRefusal::ForeignTrustDomain { found, expected }
            }
            IdentityError::NotOneSpiffeId(n) => HandshakeRefusal::NotOneSpiffeId(n),
            IdentityError::MissingRole => HandshakeRefusal::NoRole,
            IdentityError::MultipleRoles(n) => HandshakeRefusal::SeveralRoles(n),
            other => HandshakeRefusal::Profile(other.to_string()),
        }
    }
}

/// Counts of handshake refusals by reason, and the last one (for logs and tests).
#[derive(Debug, Default)]
pub struct RefusalCounters {
    total: AtomicU64,
    last: Mutex<Option<HandshakeRefusal>>,
    by_reason: Mutex<std::collections::BTreeMap<&'static str, u64>>,
}

impl RefusalCounters {
    fn record(&self, refusal: &HandshakeRefusal) {
        self.total.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut m) = self.by_reason.lock() {
            *m.entry(refusal.reason()).or_default() += 1;
        }
        if let Ok(mut l) = self.last.lock() {
            *l = Some(refusal.clone());
        }
    }

    pub fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    pub fn last(&self) -> Option<HandshakeRefusal> {
        self.last.lock().ok().and_then(|l| l.clone())
    }

    pub fn by_reason(&self) -> std::collections::BTreeMap<&'static str, u64> {
        self.by_reason.lock().map(|m| m.clone()).unwrap_or_default()
    }
}

/// Errors building the TLS configuration.
#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    #[error("the node CA certificate is not usable as a trust anchor: {0}")]
    NodeCa(String),
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("client verifier: {0}")]
    Verifier(String),
}

/// The crypto provider of every TLS endpoint (ring), [`proto::peer_tls::provider`].
pub use proto::peer_tls::provider;

/// What a node's client certificate must be beyond its chain to the node CA (module docs).
#[derive(Debug)]
pub struct NodeChecks {
    trust_domain: TrustDomain,
    revoked: Arc<RevokedSerials>,
    refusals: Arc<RefusalCounters>,
    /// Where revoked and expired node certificates are recorded as renewal refusals.
    renew_refusals: Option<EdgeRefusalSink>,
}

impl NodeChecks {
    fn refuse(&self, refusal: HandshakeRefusal) -> rustls::Error {
        tracing::info!(reason = refusal.reason(), %refusal, "node handshake refused");
        self.refusals.record(&refusal);
        let cert_error = match refusal {
            HandshakeRefusal::Revoked(_) => CertificateError::Revoked,
            other => CertificateError::Other(OtherError(Arc::new(other))),
        };
        rustls::Error::InvalidCertificate(cert_error)
    }
}

/// Whether the chain was refused for the leaf's expiry.
fn is_expired(e: &rustls::Error) -> bool {
    matches!(
        e,
        rustls::Error::InvalidCertificate(
            CertificateError::Expired | CertificateError::ExpiredContext { .. }
        )
    )
}

impl PeerChecks for NodeChecks {
    fn chain_refused(&self, e: rustls::Error) -> rustls::Error {
        self.refuse(HandshakeRefusal::Chain(e.to_string()))
    }

    fn client_chain_refused(
        &self,
        e: rustls::Error,
        end_entity: &CertificateDer<'_>,
    ) -> rustls::Error {
        if let (true, Some(sink)) = (is_expired(&e), &self.renew_refusals) {
            sink.refused(EdgeRenewRefusal::Expired, end_entity.as_ref());
        }
        self.chain_refused(e)
    }

    fn check_leaf(&self, end_entity: &CertificateDer<'_>) -> Result<(), rustls::Error> {
        if !has_extended_key_usage(end_entity.as_ref(), Usage::ClientAuth) {
            return Err(self.refuse(HandshakeRefusal::NoClientAuthUsage));
        }
        let identity = NodeIdentity::from_leaf_der(end_entity.as_ref(), &self.trust_domain)
            .map_err(|e| self.refuse(HandshakeRefusal::from_identity(e)))?;
        if self.revoked.contains(identity.serial.as_bytes()) {
            if let Some(sink) = &self.renew_refusals {
                sink.refused(EdgeRenewRefusal::Revoked, end_entity.as_ref());
            }
            return Err(self.refuse(HandshakeRefusal::Revoked(identity.serial.to_hex())));
        }
        Ok(())
    }
}

/// Admits client certificates that are live node identities of one trust domain. Made
/// [`ClientVerifier::optional`] where a machine that joins (and has no certificate yet) connects:
/// a certificate that is presented is still fully checked, so a revoked or foreign one fails the
/// handshake, and handlers that need a node identity refuse a connection without one.
pub type NodeClientVerifier = ClientVerifier<NodeChecks>;

/// A verifier for certificates issued by `node_ca_der` in `trust_domain`; revoked and expired
/// node certificates are handed to `renew_refusals` when given.
pub fn node_client_verifier(
    node_ca_der: &[u8],
    trust_domain: TrustDomain,
    revoked: Arc<RevokedSerials>,
    refusals: Arc<RefusalCounters>,
    renew_refusals: Option<EdgeRefusalSink>,
) -> Result<NodeClientVerifier, TlsSetupError> {
    let checks = NodeChecks {
        trust_domain,
        revoked,
        refusals,
        renew_refusals,
    };
    ClientVerifier::new(node_ca_der, checks).map_err(|e| match e {
        SetupError::Anchor(e) => TlsSetupError::NodeCa(e.to_string()),
        SetupError::Verifier(e) => TlsSetupError::Verifier(e.to_string()),
    })
}

/// An extended key usage a leaf must name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Usage {
    ClientAuth,
    ServerAuth,
}

/// Whether the certificate `der` has an extended key usage extension naming `usage`. A
/// certificate without the extension names none (webpki would take it for any usage).
pub fn has_extended_key_usage(der: &[u8], usage: Usage) -> bool {
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(der) else {
        return false;
    };
    match cert.extended_key_usage() {
        Ok(Some(eku)) => match usage {
            Usage::ClientAuth => eku.value.client_auth,
            Usage::ServerAuth => eku.value.server_auth,
        },
        _ => false,
    }
}

/// Turns TLS session resumption off: no server-side session cache, no TLS 1.3 tickets (and
/// the default ticketer, which makes none). Every handshake is then a full one and runs the
/// client verifier.
pub fn without_resumption(config: &mut ServerConfig) {
    config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    config.send_tls13_tickets = 0;
}

/// The protocols the node endpoint offers by ALPN, in its order of preference: gRPC over HTTP/2,
/// and the session wire ([`proto::session_wire::ALPN`], [`crate::session::session_wire`]). A client
/// that offers none gets HTTP/2.
fn node_alpn() -> Vec<Vec<u8>> {
    vec![b"h2".to_vec(), proto::session_wire::ALPN.to_vec()]
}

/// The gateway's serving configuration: its certificate chain (leaf first, from the serving
/// CA), its key (PKCS#8), and client certificates checked by `verifier`. TLS 1.3 only.
pub fn server_config(
    chain: Vec<Vec<u8>>,
    key_pkcs8: Vec<u8>,
    verifier: Arc<NodeClientVerifier>,
) -> Result<ServerConfig, TlsSetupError> {
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            chain.into_iter().map(CertificateDer::from).collect(),
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key_pkcs8)),
        )?;
    config.alpn_protocols = node_alpn();
    without_resumption(&mut config);
    Ok(config)
}

/// The same with the certificate from `resolver`, which can change while the gateway runs
/// ([`crate::edge::serving::ServingCert`]).
pub fn server_config_resolving(
    resolver: Arc<dyn rustls::server::ResolvesServerCert>,
    verifier: Arc<NodeClientVerifier>,
) -> Result<ServerConfig, TlsSetupError> {
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_client_cert_verifier(verifier)
        .with_cert_resolver(resolver);
    config.alpn_protocols = node_alpn();
    without_resumption(&mut config);
    Ok(config)
}

/// A node identity that came through [`NodeClientVerifier`] on this connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifiedNode {
    identity: NodeIdentity,
    leaf_der: Vec<u8>,
}

impl VerifiedNode {
    /// Reads the identity of the peer of a server connection whose handshake completed under a
    /// [`NodeClientVerifier`] for `trust_domain`. `None` when the connection has no client
    /// certificate (allowed only by an [`ClientVerifier::optional`] verifier).
    pub fn from_connection(
        conn: &rustls::ServerConnection,
        trust_domain: &TrustDomain,
    ) -> Option<VerifiedNode> {
        let leaf = conn.peer_certificates()?.first()?;
        NodeIdentity::from_leaf_der(leaf.as_ref(), trust_domain)
            .ok()
            .map(|identity| VerifiedNode {
                identity,
                leaf_der: leaf.as_ref().to_vec(),
            })
    }

    pub fn identity(&self) -> &NodeIdentity {
        &self.identity
    }

    /// The leaf certificate (DER) the node presented at the handshake.
    pub fn leaf_der(&self) -> &[u8] {
        &self.leaf_der
    }
}
