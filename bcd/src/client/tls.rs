//! TLS 1.3 pinned to the serving CA: the server certificate verifier and the client config.
//!
//! bcd never trusts system roots. [`PinnedServingCa`] is a rustls `ServerCertVerifier` that
//! accepts the gateway's chain only when one of the certificates the gateway sent has the SPKI
//! `serving_ca_spki_pin` names, and webpki verifies the leaf (signatures, validity, serverAuth,
//! and the name bcd dialled) with that certificate as the only trust anchor. The pinned CA must
//! itself be within its validity. [`client_config`] builds the rustls config around it, with the
//! node's certificate and key ([`ClientIdentity`]) when one is presented, for gRPC (ALPN `h2`);
//! [`session_client_config`] is the same mutual config for the framed session (ALPN
//! `bc-session/1` only).
//!
//! The client identity signs through [`NodeSigner`] ([`NodeTlsKey`]), whatever holds the node
//! key (a file or the TPM): scheme `ecdsa_secp256r1_sha256` only, the signature DER as TLS
//! carries it. The wire is the same for both.

use std::sync::Arc;

use domain::pki::{ecdsa_der, NodeSigner, Pin};
use proto::peer_tls::{PickAnchor, ServerVerifier};
use rustls::client::ResolvesClientCert;
use rustls::pki_types::{CertificateDer, SubjectPublicKeyInfoDer, UnixTime};
use rustls::sign::{CertifiedKey, Signer, SigningKey};
use rustls::{CertificateError, ClientConfig, OtherError, SignatureAlgorithm, SignatureScheme};

use crate::node_key::NodeKey;

use super::error::ClientError;

/// Why the pinned verifier refused the gateway's chain.
#[derive(Debug, thiserror::Error)]
pub enum ServingCaError {
    /// No certificate the gateway sent has the pinned SPKI.
    #[error(
        "the gateway's chain holds no certificate of the pinned serving CA {pin}: \
         serving_ca_spki_pin is from another deployment, or something else answers at this address"
    )]
    NotPinned {
        /// The configured pin.
        pin: String,
    },
    /// The pinned CA's certificate is outside its validity.
    #[error(
        "the pinned serving CA's certificate is not valid now (renew the PKI: bcctl pki show)"
    )]
    CaNotValid,
    /// The chain failed webpki's checks.
    #[error("the gateway's certificate does not verify under the pinned serving CA: {0}")]
    Chain(String),
}

fn other(e: ServingCaError) -> rustls::Error {
    rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(e))))
}

/// The SHA-256 pin of a certificate's SubjectPublicKeyInfo, `None` when it does not parse.
pub fn certificate_spki_pin(der: &[u8]) -> Option<Pin> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    Some(Pin::of_spki_der(cert.tbs_certificate.subject_pki.raw))
}

fn valid_at(der: &[u8], now: UnixTime) -> bool {
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(der) else {
        return false;
    };
    let Ok(secs) = i64::try_from(now.as_secs()) else {
        return false;
    };
    match x509_parser::time::ASN1Time::from_timestamp(secs) {
        Ok(t) => cert.validity().is_valid_at(t),
        Err(_) => false,
    }
}

fn webpki_error(e: webpki::Error) -> rustls::Error {
    let cert = match e {
        webpki::Error::CertExpired { .. } => CertificateError::Expired,
        webpki::Error::CertNotValidYet { .. } => CertificateError::NotValidYet,
        webpki::Error::UnknownIssuer => CertificateError::UnknownIssuer,
        webpki::Error::InvalidSignatureForPublicKey => CertificateError::BadSignature,
        webpki::Error::CertNotValidForName(_) => CertificateError::NotValidForName,
        other_error => return other(ServingCaError::Chain(format!("{other_error:?}"))),
    };
    rustls::Error::InvalidCertificate(cert)
}

/// The serving CA by its SPKI pin: the anchor of the gateway's chain is the certificate it sent
/// with that pin, and only while that certificate is valid.
#[derive(Debug)]
pub struct ServingCaPin(pub Pin);

impl PickAnchor for ServingCaPin {
    fn pick<'a, 'b>(
        &self,
        presented: &'a [CertificateDer<'b>],
        now: UnixTime,
    ) -> Result<&'a CertificateDer<'b>, rustls::Error> {
        let anchor = presented
            .iter()
            .find(|c| certificate_spki_pin(c) == Some(self.0))
            .ok_or_else(|| {
                other(ServingCaError::NotPinned {
                    pin: self.0.to_string(),
                })
            })?;
        if !valid_at(anchor, now) {
            return Err(other(ServingCaError::CaNotValid));
        }
        Ok(anchor)
    }

    fn refused(&self, e: webpki::Error) -> rustls::Error {
        webpki_error(e)
    }
}

/// The server certificate verifier pinned to the serving CA's SPKI (see the module docs): the
/// project's one verifier ([`proto::peer_tls`]) anchored by [`ServingCaPin`], nothing on top.
pub type PinnedServingCa = ServerVerifier<()>;

/// A verifier for `serving_ca_spki_pin`.
pub fn pinned_serving_ca(pin: Pin) -> PinnedServingCa {
    ServerVerifier::presented(ServingCaPin(pin), ())
}

/// The ring crypto provider (as the gateway uses), [`proto::peer_tls::provider`].
pub use proto::peer_tls::provider;

/// The certificate chain and key bcd presents for Renew and the session.
#[derive(Debug, Clone)]
pub struct ClientIdentity {
    chain: Vec<Vec<u8>>,
    key: NodeKey,
}

impl ClientIdentity {
    /// The node's chain (leaf first, DER) and its key.
    pub fn new(chain: &[Vec<u8>], key: &NodeKey) -> ClientIdentity {
        ClientIdentity {
            chain: chain.to_vec(),
            key: key.clone(),
        }
    }

    /// The rustls certified key: the chain and a [`NodeTlsKey`] over the node key.
    pub fn certified_key(&self) -> Arc<CertifiedKey> {
        let chain = self
            .chain
            .iter()
            .map(|der| CertificateDer::from(der.clone()))
            .collect();
        Arc::new(CertifiedKey::new(
            chain,
            Arc::new(NodeTlsKey(self.key.clone())),
        ))
    }
}

/// The node key as a rustls signing key: ECDSA P-256 with SHA-256, through [`NodeSigner`].
#[derive(Debug, Clone)]
pub struct NodeTlsKey(pub NodeKey);

impl SigningKey for NodeTlsKey {
    fn choose_scheme(&self, offered: &[SignatureScheme]) -> Option<Box<dyn Signer>> {
        offered
            .contains(&SignatureScheme::ECDSA_NISTP256_SHA256)
            .then(|| Box::new(self.clone()) as Box<dyn Signer>)
    }

    fn public_key(&self) -> Option<SubjectPublicKeyInfoDer<'_>> {
        Some(SubjectPublicKeyInfoDer::from(
            self.0.public_key().spki_der(),
        ))
    }

    fn algorithm(&self) -> SignatureAlgorithm {
        SignatureAlgorithm::ECDSA
    }
}

impl Signer for NodeTlsKey {
    fn sign(&self, message: &[u8]) -> Result<Vec<u8>, rustls::Error> {
        let rs = self
            .0
            .sign_es256(message)
            .map_err(|e| rustls::Error::General(e.to_string()))?;
        Ok(ecdsa_der(rs.as_bytes()))
    }

    fn scheme(&self) -> SignatureScheme {
        SignatureScheme::ECDSA_NISTP256_SHA256
    }
}

/// Always presents the one node identity.
#[derive(Debug)]
struct PresentIdentity(Arc<CertifiedKey>);

impl ResolvesClientCert for PresentIdentity {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        sigschemes
            .contains(&SignatureScheme::ECDSA_NISTP256_SHA256)
            .then(|| self.0.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// TLS 1.3 only, pinned to the serving CA, with ALPN `h2`; `identity` is presented when given.
pub fn client_config(
    serving_ca: Pin,
    identity: Option<&ClientIdentity>,
) -> Result<ClientConfig, ClientError> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| ClientError::ClientIdentity(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(pinned_serving_ca(serving_ca)));
    let mut config = match identity {
        None => builder.with_no_client_auth(),
        Some(id) => {
            builder.with_client_cert_resolver(Arc::new(PresentIdentity(id.certified_key())))
        }
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

/// [`client_config`] presenting `identity`, with ALPN `bc-session/1` only
/// ([`proto::session_wire::ALPN`]): the node session over the gateway's own framing.
pub fn session_client_config(
    serving_ca: Pin,
    identity: &ClientIdentity,
) -> Result<ClientConfig, ClientError> {
    let mut config = client_config(serving_ca, Some(identity))?;
    config.alpn_protocols = vec![proto::session_wire::ALPN.to_vec()];
    Ok(config)
}
