//! The deployment's root CA, online (its key in the bundle) or offline (`pki init
//! --offline-root`: only its certificate in the bundle, the key in a file kept off the servers).
//!
//! The root certifies the node CA, the serving CA and the operator CA and nothing else.
//! Everything a running deployment does needs only its certificate (trust roots, chains, pins);
//! its key is needed only to certify a CA: at `pki init`, at `pki renew-ca` and at `pki
//! add-operator-ca`, which take the key file ([`RootCa::with_key`]). An offline root that is asked to certify says so
//! ([`CaError::RootOffline`]).

use time::{Duration, OffsetDateTime};

use super::backdate::BACKDATE;
use super::ca::{
    ca_params, check_ca_certificate, random_serial, whole_seconds, CaError, CaKind,
    CertificateAuthority, NodeCa, OperatorCa, ServingCa,
};
use super::encoding::pem_encode;
use super::keys::{PrivateKey, PublicKey};
use super::spiffe::TrustDomain;

/// The root CA: its certificate, and its key when it is online.
#[derive(Debug)]
pub struct RootCa {
    trust_domain: TrustDomain,
    cert_der: Vec<u8>,
    not_before: OffsetDateTime,
    not_after: OffsetDateTime,
    public_key: PublicKey,
    authority: Option<CertificateAuthority>,
}

impl RootCa {
    /// Generates the self-signed root for `trust_domain`, valid from `now` for `lifetime`.
    pub fn generate(
        trust_domain: &TrustDomain,
        key: PrivateKey,
        now: OffsetDateTime,
        lifetime: Duration,
    ) -> Result<RootCa, CaError> {
        CertificateAuthority::self_signed(CaKind::Root, trust_domain, key, now, lifetime)
            .map(RootCa::online)
    }

    fn online(ca: CertificateAuthority) -> RootCa {
        RootCa {
            trust_domain: ca.trust_domain().clone(),
            cert_der: ca.cert_der().to_vec(),
            not_before: ca.not_before(),
            not_after: ca.not_after(),
            public_key: ca.public_key().clone(),
            authority: Some(ca),
        }
    }

    /// Loads an online root from its certificate DER and key; see
    /// [`CertificateAuthority::from_parts`].
    pub fn from_parts(
        trust_domain: &TrustDomain,
        cert_der: Vec<u8>,
        key: PrivateKey,
    ) -> Result<RootCa, CaError> {
        CertificateAuthority::from_parts(CaKind::Root, trust_domain, cert_der, key)
            .map(RootCa::online)
    }

    /// Loads an offline root: its certificate only, checked as a root CA certificate for
    /// `trust_domain`.
    pub fn from_certificate(
        trust_domain: &TrustDomain,
        cert_der: Vec<u8>,
    ) -> Result<RootCa, CaError> {
        let checked = check_ca_certificate(CaKind::Root, trust_domain, &cert_der)?;
        Ok(RootCa {
            trust_domain: trust_domain.clone(),
            cert_der,
            not_before: checked.not_before,
            not_after: checked.not_after,
            public_key: checked.public_key,
            authority: None,
        })
    }

    /// The same root with its key (`--root-key FILE`): the key must be the one its certificate
    /// certifies ([`CaError::KeyMismatch`] otherwise).
    pub fn with_key(self, key: PrivateKey) -> Result<RootCa, CaError> {
        RootCa::from_parts(&self.trust_domain, self.cert_der, key)
    }

    /// The same root without its key (what `pki init --offline-root` keeps in the bundle).
    pub fn offline(self) -> RootCa {
        RootCa {
            authority: None,
            ..self
        }
    }

    /// Whether the key is absent.
    pub fn is_offline(&self) -> bool {
        self.authority.is_none()
    }

    /// The private key (secret; for the bundle or the offline key file), `None` when offline.
    pub fn private_key(&self) -> Option<&PrivateKey> {
        self.authority.as_ref().map(|a| a.private_key())
    }

    /// Always [`CaKind::Root`].
    pub fn kind(&self) -> CaKind {
        CaKind::Root
    }

    /// The trust domain in its subject.
    pub fn trust_domain(&self) -> &TrustDomain {
        &self.trust_domain
    }

    /// The certificate, DER.
    pub fn cert_der(&self) -> &[u8] {
        &self.cert_der
    }

    /// The certificate, PEM.
    pub fn cert_pem(&self) -> String {
        pem_encode("CERTIFICATE", &self.cert_der)
    }

    /// notBefore of the certificate.
    pub fn not_before(&self) -> OffsetDateTime {
        self.not_before
    }

    /// notAfter of the certificate: no CA it certifies lives past it.
    pub fn not_after(&self) -> OffsetDateTime {
        self.not_after
    }

    /// The root's public key.
    pub fn public_key(&self) -> &PublicKey {
        &self.public_key
    }

    fn authority(&self) -> Result<&CertificateAuthority, CaError> {
        self.authority.as_ref().ok_or(CaError::RootOffline)
    }

    fn issue_subordinate(
        &self,
        kind: CaKind,
        key: PrivateKey,
        now: OffsetDateTime,
        lifetime: Duration,
    ) -> Result<CertificateAuthority, CaError> {
        let root = self.authority()?;
        key.require_role(kind.key_role())?;
        if lifetime <= Duration::ZERO {
            return Err(CaError::NonPositiveLifetime);
        }
        let now = whole_seconds(now);
        let asked = now.checked_add(lifetime).ok_or(CaError::TimeOutOfRange)?;
        // A CA certificate never outlives the root, and is backdated like a leaf
        // ([`BACKDATE`]), never before the root.
        let not_after = asked.min(self.not_after);
        let not_before = (now - BACKDATE).max(self.not_before).min(now);
        let mut params = ca_params(kind, &self.trust_domain, not_before, not_after);
        params.serial_number = Some(random_serial()?.into());
        let der = root.sign(&params, key.public_key(), now)?;
        CertificateAuthority::from_parts(kind, &self.trust_domain, der, key)
    }

    /// Certifies `key` (role [`super::KeyRole::NodeCa`]) as the node CA, capped at the root's
    /// notAfter.
    pub fn issue_node_ca(
        &self,
        key: PrivateKey,
        now: OffsetDateTime,
        lifetime: Duration,
    ) -> Result<NodeCa, CaError> {
        self.issue_subordinate(CaKind::Node, key, now, lifetime)
            .map(NodeCa::wrap)
    }

    /// Certifies `key` (role [`super::KeyRole::ServingCa`]) as the serving CA, capped at the
    /// root's notAfter.
    pub fn issue_serving_ca(
        &self,
        key: PrivateKey,
        now: OffsetDateTime,
        lifetime: Duration,
    ) -> Result<ServingCa, CaError> {
        self.issue_subordinate(CaKind::Serving, key, now, lifetime)
            .map(ServingCa::wrap)
    }

    /// Certifies `key` (role [`super::KeyRole::OperatorCa`]) as the operator CA (`pki init`,
    /// `pki add-operator-ca`), capped at the root's notAfter.
    pub fn issue_operator_ca(
        &self,
        key: PrivateKey,
        now: OffsetDateTime,
        lifetime: Duration,
    ) -> Result<OperatorCa, CaError> {
        self.issue_subordinate(CaKind::Operator, key, now, lifetime)
            .map(OperatorCa::wrap)
    }

    /// `pki renew-ca --ca node`: a new certificate for the same key and subject, so certificates
    /// it already issued stay valid and its pin does not change.
    pub fn renew_node_ca(
        &self,
        current: &NodeCa,
        now: OffsetDateTime,
        lifetime: Duration,
    ) -> Result<NodeCa, CaError> {
        self.issue_node_ca(current.authority().clone_key()?, now, lifetime)
    }

    /// `pki renew-ca --ca operator`: as [`RootCa::renew_node_ca`], for the operator CA (the
    /// operator certificates it issued keep verifying).
    pub fn renew_operator_ca(
        &self,
        current: &OperatorCa,
        now: OffsetDateTime,
        lifetime: Duration,
    ) -> Result<OperatorCa, CaError> {
        self.issue_operator_ca(current.authority().clone_key()?, now, lifetime)
    }

    /// `pki renew-ca --ca serving`: as [`RootCa::renew_node_ca`], for the serving CA.
    pub fn renew_serving_ca(
        &self,
        current: &ServingCa,
        now: OffsetDateTime,
        lifetime: Duration,
    ) -> Result<ServingCa, CaError> {
        self.issue_serving_ca(current.authority().clone_key()?, now, lifetime)
    }
}
