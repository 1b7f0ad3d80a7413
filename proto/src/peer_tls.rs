//! The one verifier of a TLS peer's certificate, for every endpoint of the project: the
//! gateway's node listener, the split api and its gateways (both ways), bcctl's admin listener
//! and bcd towards the gateway.
//!
//! [`ClientVerifier`] (a server judging its clients) and [`ServerVerifier`] (a client judging
//! the server it dialled) do what every side does alike: the chain, delegated to webpki, and
//! the handshake signatures, checked with the [`provider`]'s algorithms. A chain ends at the one
//! CA certificate the verifier was built with or, for [`ServerVerifier::presented`], at the
//! presented certificate the side's [`PickAnchor`] chooses (bcd: the pinned serving CA). What a
//! side requires on top (an extended key usage, a role, the SPIFFE profile, a serial that is not
//! revoked) is its [`PeerChecks`], run on a leaf whose chain verified; a refused chain goes
//! through [`PeerChecks::chain_refused`], where the side logs, counts or rewords it.
//!
//! It must never trust the system's roots or any anchor but the one it was given or the side
//! picked, never admit a leaf whose chain did not verify or that its side's checks refused, and
//! never word or count a refusal itself: the side's checks do.

use std::fmt::Debug;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{
    verify_tls12_signature, verify_tls13_signature, CryptoProvider, WebPkiSupportedAlgorithms,
};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{VerifierBuilderError, WebPkiClientVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};

/// The crypto provider of every TLS endpoint of the project (ring; see docs/DECISIONS.md).
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// What a side requires of its peer beyond a chain to its anchor.
pub trait PeerChecks: Debug + Send + Sync {
    /// The chain was refused with `e`: the error the handshake fails with. By default `e`.
    fn chain_refused(&self, e: rustls::Error) -> rustls::Error {
        e
    }

    /// The chain of a client's `end_entity` was refused with `e` (a side that records who was
    /// refused, not only why): by default [`PeerChecks::chain_refused`].
    fn client_chain_refused(
        &self,
        e: rustls::Error,
        end_entity: &CertificateDer<'_>,
    ) -> rustls::Error {
        let _ = end_entity;
        self.chain_refused(e)
    }

    /// The leaf of a chain that verified: `Ok` admits it.
    fn check_leaf(&self, end_entity: &CertificateDer<'_>) -> Result<(), rustls::Error>;
}

/// Nothing on top of the chain.
impl PeerChecks for () {
    fn check_leaf(&self, _: &CertificateDer<'_>) -> Result<(), rustls::Error> {
        Ok(())
    }
}

/// Chooses the anchor of a server's chain among the certificates it presented, for a side that
/// knows its CA by a pin rather than by its certificate.
pub trait PickAnchor: Debug + Send + Sync {
    /// The anchor among `presented` (the certificates after the leaf), or the refusal.
    fn pick<'a, 'b>(
        &self,
        presented: &'a [CertificateDer<'b>],
        now: UnixTime,
    ) -> Result<&'a CertificateDer<'b>, rustls::Error>;

    /// The error for webpki's refusal of the chain under the picked anchor.
    fn refused(&self, e: webpki::Error) -> rustls::Error;
}

/// Why a verifier could not be built.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The CA certificate is not usable as a trust anchor.
    #[error("{0}")]
    Anchor(rustls::Error),
    /// rustls refused the verifier's configuration.
    #[error("{0}")]
    Verifier(VerifierBuilderError),
}

fn anchored_at(ca_der: &[u8]) -> Result<Arc<RootCertStore>, SetupError> {
    let mut roots = RootCertStore::empty();
    roots
        .add(CertificateDer::from(ca_der.to_vec()))
        .map_err(SetupError::Anchor)?;
    Ok(Arc::new(roots))
}

/// Client certificates chaining to one CA, then the side's checks `C`; required at the
/// handshake unless [`ClientVerifier::optional`].
#[derive(Debug)]
pub struct ClientVerifier<C> {
    chain: Arc<dyn ClientCertVerifier>,
    algorithms: WebPkiSupportedAlgorithms,
    mandatory: bool,
    checks: C,
}

impl<C: PeerChecks> ClientVerifier<C> {
    /// Client certificates issued (directly or through the chain sent) by `ca_der`.
    pub fn new(ca_der: &[u8], checks: C) -> Result<Self, SetupError> {
        let provider = provider();
        let algorithms = provider.signature_verification_algorithms;
        let chain = WebPkiClientVerifier::builder_with_provider(anchored_at(ca_der)?, provider)
            .build()
            .map_err(SetupError::Verifier)?;
        Ok(ClientVerifier {
            chain,
            algorithms,
            mandatory: true,
            checks,
        })
    }

    /// The same checks, but a client may also connect without a certificate. A certificate that
    /// is presented is still fully checked; what needs one must refuse a connection without.
    pub fn optional(mut self) -> Self {
        self.mandatory = false;
        self
    }

    /// Whether a client certificate is required at the handshake.
    pub fn is_mandatory(&self) -> bool {
        self.mandatory
    }

    /// The side's checks.
    pub fn checks(&self) -> &C {
        &self.checks
    }
}

impl<C: PeerChecks> ClientCertVerifier for ClientVerifier<C> {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.chain.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.chain
            .verify_client_cert(end_entity, intermediates, now)
            .map_err(|e| self.checks.client_chain_refused(e, end_entity))?;
        self.checks.check_leaf(end_entity)?;
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.mandatory
    }

    fn offer_client_auth(&self) -> bool {
        true
    }
}

/// Where a server's chain must end.
#[derive(Debug)]
enum Anchor {
    /// One CA certificate, known when the verifier was built.
    Ca(Arc<WebPkiServerVerifier>),
    /// The presented certificate the side picks.
    Presented(Box<dyn PickAnchor>),
}

/// A server's certificate for the name dialled, chaining to its anchor, then the side's checks.
#[derive(Debug)]
pub struct ServerVerifier<C> {
    anchor: Anchor,
    algorithms: WebPkiSupportedAlgorithms,
    checks: C,
}

impl<C: PeerChecks> ServerVerifier<C> {
    /// Server certificates issued (directly or through the chain sent) by `ca_der`.
    pub fn new(ca_der: &[u8], checks: C) -> Result<Self, SetupError> {
        let provider = provider();
        let algorithms = provider.signature_verification_algorithms;
        let chain = WebPkiServerVerifier::builder_with_provider(anchored_at(ca_der)?, provider)
            .build()
            .map_err(SetupError::Verifier)?;
        Ok(ServerVerifier {
            anchor: Anchor::Ca(chain),
            algorithms,
            checks,
        })
    }

    /// Server certificates chaining to the certificate `anchor` picks from those the server
    /// sent: webpki checks the chain (signatures, validity, serverAuth) with it as the only
    /// anchor, then the name dialled; `anchor` words what webpki refuses.
    pub fn presented(anchor: impl PickAnchor + 'static, checks: C) -> Self {
        ServerVerifier {
            anchor: Anchor::Presented(Box::new(anchor)),
            algorithms: provider().signature_verification_algorithms,
            checks,
        }
    }

    /// The side's checks.
    pub fn checks(&self) -> &C {
        &self.checks
    }

    fn under_presented(
        &self,
        pick: &dyn PickAnchor,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        now: UnixTime,
    ) -> Result<(), rustls::Error> {
        let anchor_der = pick.pick(intermediates, now)?;
        let anchor = webpki::anchor_from_trusted_cert(anchor_der).map_err(|e| pick.refused(e))?;
        let others: Vec<CertificateDer<'_>> = intermediates
            .iter()
            .filter(|c| !std::ptr::eq(*c, anchor_der))
            .cloned()
            .collect();
        let leaf = webpki::EndEntityCert::try_from(end_entity).map_err(|e| pick.refused(e))?;
        leaf.verify_for_usage(
            self.algorithms.all,
            &[anchor],
            &others,
            now,
            webpki::KeyUsage::server_auth(),
            None,
            None,
        )
        .map_err(|e| pick.refused(e))?;
        leaf.verify_is_valid_for_subject_name(server_name)
            .map_err(|e| pick.refused(e))
    }
}

impl<C: PeerChecks> ServerCertVerifier for ServerVerifier<C> {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match &self.anchor {
            Anchor::Ca(chain) => chain
                .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
                .map(|_| ()),
            Anchor::Presented(pick) => {
                self.under_presented(pick.as_ref(), end_entity, intermediates, server_name, now)
            }
        }
        .map_err(|e| self.checks.chain_refused(e))?;
        self.checks.check_leaf(end_entity)?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}
