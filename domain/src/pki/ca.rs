//! Certificate authorities: the root, the node CA, the serving CA, the operator CA and the
//! command-signing root.
//!
//! A [`CertificateAuthority`] pairs a CA certificate with its private key and can only be made
//! from a key whose [`KeyRole`] is that CA's, and a certificate that is a CA certificate for that
//! very key. The typed wrappers ([`RootCa`](super::root::RootCa), [`NodeCa`], [`ServingCa`],
//! [`OperatorCa`], [`CommandSigningRoot`]) keep each CA to its one job: only a `NodeCa` issues
//! agent certificates ([`super::leaf::issue_node_certificate`]), only a `ServingCa` issues
//! serving certificates, only an `OperatorCa` issues operator certificates
//! ([`super::operator_cert::issue_operator_certificate`]), only the `RootCa` certifies the node,
//! serving and operator CAs.
//!
//! Subordinate CAs never outlive the root: a subordinate's notAfter is capped at the root's,
//! whatever lifetime is asked for. CA subjects are fixed by kind and trust domain
//! (`O=<trust domain>, CN=bc <kind>`), so a renewed CA keeps its subject and its key (and so its
//! pin). All times are arguments; nothing here reads a clock.

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, KeyIdMethod,
    KeyUsagePurpose,
};
use time::{Duration, OffsetDateTime};
use x509_parser::prelude::{FromDer, X509Certificate};

use super::crl_url::CrlDistributionPoint;
use super::encoding::pem_encode;
use super::keys::{KeyError, KeyRole, PrivateKey, PublicKey};
use super::spiffe::TrustDomain;

/// The certificate authorities of a deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CaKind {
    /// The self-signed root of the node and serving CAs.
    Root,
    /// Issues agent certificates.
    Node,
    /// Issues gateway serving certificates.
    Serving,
    /// The self-signed root that certifies worker keys (signed intent).
    CommandSigningRoot,
    /// Issues operator certificates (the admin API's clients).
    Operator,
}

impl CaKind {
    /// The key role a CA of this kind must hold.
    pub fn key_role(self) -> KeyRole {
        match self {
            CaKind::Root => KeyRole::RootCa,
            CaKind::Node => KeyRole::NodeCa,
            CaKind::Serving => KeyRole::ServingCa,
            CaKind::CommandSigningRoot => KeyRole::CommandSigningRoot,
            CaKind::Operator => KeyRole::OperatorCa,
        }
    }

    /// The common name of this CA's subject.
    pub fn common_name(self) -> &'static str {
        match self {
            CaKind::Root => "bc root CA",
            CaKind::Node => "bc node CA",
            CaKind::Serving => "bc serving CA",
            CaKind::CommandSigningRoot => "bc command-signing root",
            CaKind::Operator => "bc operator CA",
        }
    }

    /// Whether the CA is self-signed.
    pub fn is_self_signed(self) -> bool {
        matches!(self, CaKind::Root | CaKind::CommandSigningRoot)
    }
}

impl std::fmt::Display for CaKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.common_name())
    }
}

/// Why a CA could not be made, loaded or used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CaError {
    /// The key does not fit the job.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// The certificate does not parse as X.509 DER.
    #[error("the {kind} certificate is not a valid X.509 DER certificate")]
    MalformedCertificate {
        /// Which CA.
        kind: CaKind,
    },
    /// The certificate certifies another key than the private key given.
    #[error(
        "the {kind} certificate does not certify the {kind} private key (a mismatched bundle)"
    )]
    KeyMismatch {
        /// Which CA.
        kind: CaKind,
    },
    /// The certificate is not a CA certificate, or its subject is not this CA's.
    #[error(
        "the {kind} certificate is not a CA certificate with subject O={trust_domain}, CN={kind}"
    )]
    NotThisCa {
        /// Which CA.
        kind: CaKind,
        /// The trust domain expected in the subject.
        trust_domain: String,
    },
    /// The lifetime asked for is zero or negative.
    #[error("a certificate lifetime must be positive")]
    NonPositiveLifetime,
    /// The issuing CA has already expired at `now`.
    #[error("the {kind} expired at unix time {not_after}; renew it (pki renew-ca) first")]
    IssuerExpired {
        /// Which CA.
        kind: CaKind,
        /// Its notAfter, unix seconds.
        not_after: i64,
    },
    /// The root CA's key is not in the bundle (`pki init --offline-root`).
    #[error("the root CA key is offline (kept out of the bundle by `pki init --offline-root`): pass --root-key FILE, the key file `pki init --offline-root` wrote")]
    RootOffline,
    /// A time outside what X.509 can encode.
    #[error("time out of range for a certificate")]
    TimeOutOfRange,
    /// rcgen refused to build the certificate (a bug: inputs are validated first).
    #[error("building the certificate failed: {0}")]
    Build(String),
}

/// A CA certificate with its private key.
pub struct CertificateAuthority {
    kind: CaKind,
    trust_domain: TrustDomain,
    cert_der: Vec<u8>,
    not_before: OffsetDateTime,
    not_after: OffsetDateTime,
    key: PrivateKey,
    /// The subject key identifier of the CA certificate (what a CRL's authorityKeyIdentifier
    /// names); `None` for a certificate without one.
    ski: Option<Vec<u8>>,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    /// Where the certificates it issues say its revocation list is (the node CA only, when the
    /// deployment names one: [`NodeCa::set_crl_distribution_point`]).
    crl_distribution_point: Option<CrlDistributionPoint>,
}

impl std::fmt::Debug for CertificateAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertificateAuthority")
            .field("kind", &self.kind)
            .field("trust_domain", &self.trust_domain)
            .field("not_after", &self.not_after)
            .field("key", &self.key)
            .finish()
    }
}

/// Truncates to whole seconds, the precision of X.509 times.
pub(crate) fn whole_seconds(t: OffsetDateTime) -> OffsetDateTime {
    t.replace_nanosecond(0).unwrap_or(t)
}

fn ca_subject(kind: CaKind, td: &TrustDomain) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, td.as_str());
    dn.push(DnType::CommonName, kind.common_name());
    dn
}

pub(crate) fn ca_params(
    kind: CaKind,
    td: &TrustDomain,
    not_before: OffsetDateTime,
    not_after: OffsetDateTime,
) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name = ca_subject(kind, td);
    params.not_before = not_before;
    params.not_after = not_after;
    // Root -> node/serving CA -> leaf: the root may have one CA below it, the others none.
    params.is_ca = IsCa::Ca(match kind {
        CaKind::Root => BasicConstraints::Constrained(1),
        _ => BasicConstraints::Constrained(0),
    });
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params.use_authority_key_identifier_extension = !kind.is_self_signed();
    params
}

/// Parses one DER certificate, refusing trailing bytes.
pub(crate) fn parse_cert(der: &[u8]) -> Option<X509Certificate<'_>> {
    match X509Certificate::from_der(der) {
        Ok(([], cert)) => Some(cert),
        _ => None,
    }
}

/// A fresh random serial: 16 bytes, the top bit clear and the next set (so always 16 bytes,
/// positive and non-zero).
pub(crate) fn random_serial() -> Result<Vec<u8>, KeyError> {
    use ring::rand::{SecureRandom, SystemRandom};
    let mut serial = [0u8; 16];
    SystemRandom::new()
        .fill(&mut serial)
        .map_err(|_| KeyError::Random)?;
    serial[0] = (serial[0] & 0x7f) | 0x40;
    Ok(serial.to_vec())
}

/// What [`check_ca_certificate`] read from a CA certificate.
pub(crate) struct CheckedCa {
    pub(crate) not_before: OffsetDateTime,
    pub(crate) not_after: OffsetDateTime,
    pub(crate) ski: Option<Vec<u8>>,
    pub(crate) public_key: PublicKey,
}

/// Checks that `cert_der` is a CA certificate of `kind` for `trust_domain` (basicConstraints CA,
/// subject exactly `O=<trust domain>, CN=<kind>`), and reads its validity, subject key identifier
/// and key.
pub(crate) fn check_ca_certificate(
    kind: CaKind,
    trust_domain: &TrustDomain,
    cert_der: &[u8],
) -> Result<CheckedCa, CaError> {
    let cert = parse_cert(cert_der).ok_or(CaError::MalformedCertificate { kind })?;
    let public_key = PublicKey::from_spki_der(cert.public_key().raw)
        .map_err(|_| CaError::MalformedCertificate { kind })?;
    let not_this = || CaError::NotThisCa {
        kind,
        trust_domain: trust_domain.to_string(),
    };
    let is_ca = matches!(cert.basic_constraints(), Ok(Some(bc)) if bc.value.ca);
    let subject_ok = {
        let cns: Vec<_> = cert.subject().iter_common_name().collect();
        let os: Vec<_> = cert.subject().iter_organization().collect();
        cert.subject().iter().count() == 2
            && cns.len() == 1
            && os.len() == 1
            && cns[0].as_str().ok() == Some(kind.common_name())
            && os[0].as_str().ok() == Some(trust_domain.as_str())
    };
    if !is_ca || !subject_ok {
        return Err(not_this());
    }
    let ski = cert
        .iter_extensions()
        .find_map(|ext| match ext.parsed_extension() {
            x509_parser::extensions::ParsedExtension::SubjectKeyIdentifier(id) => {
                Some(id.0.to_vec())
            }
            _ => None,
        });
    Ok(CheckedCa {
        not_before: cert.validity().not_before.to_datetime(),
        not_after: cert.validity().not_after.to_datetime(),
        ski,
        public_key,
    })
}

impl CertificateAuthority {
    /// Loads a CA from its certificate DER and private key, checking that the key's role is the
    /// kind's, that the certificate certifies that key, is a CA and carries this CA's subject.
    pub fn from_parts(
        kind: CaKind,
        trust_domain: &TrustDomain,
        cert_der: Vec<u8>,
        key: PrivateKey,
    ) -> Result<CertificateAuthority, CaError> {
        key.require_role(kind.key_role())?;
        let checked = check_ca_certificate(kind, trust_domain, &cert_der)?;
        if checked.public_key != *key.public_key() {
            return Err(CaError::KeyMismatch { kind });
        }
        let CheckedCa {
            not_before,
            not_after,
            ski,
            ..
        } = checked;
        let mut params = ca_params(kind, trust_domain, not_before, not_after);
        if let Some(ski) = &ski {
            params.key_identifier_method = KeyIdMethod::PreSpecified(ski.clone());
        }
        let issuer = rcgen::Issuer::new(params, key.rcgen_key_pair()?);
        Ok(CertificateAuthority {
            kind,
            trust_domain: trust_domain.clone(),
            cert_der,
            not_before,
            not_after,
            key,
            ski,
            issuer,
            crl_distribution_point: None,
        })
    }

    /// Builds a self-signed CA (root or command-signing root).
    pub(crate) fn self_signed(
        kind: CaKind,
        td: &TrustDomain,
        key: PrivateKey,
        now: OffsetDateTime,
        lifetime: Duration,
    ) -> Result<CertificateAuthority, CaError> {
        debug_assert!(kind.is_self_signed());
        key.require_role(kind.key_role())?;
        if lifetime <= Duration::ZERO {
            return Err(CaError::NonPositiveLifetime);
        }
        let now = whole_seconds(now);
        let not_after = now.checked_add(lifetime).ok_or(CaError::TimeOutOfRange)?;
        // Backdated like every certificate issued here (a peer's clock a little behind).
        let not_before = now - super::backdate::BACKDATE;
        let mut params = ca_params(kind, td, not_before, not_after);
        params.serial_number = Some(random_serial()?.into());
        let kp = key.rcgen_key_pair()?;
        let cert = params
            .self_signed(&kp)
            .map_err(|e| CaError::Build(e.to_string()))?;
        CertificateAuthority::from_parts(kind, td, cert.der().to_vec(), key)
    }

    /// Signs `params` for `subject_key` with this CA, refusing when the CA has expired at `now`.
    pub(crate) fn sign(
        &self,
        params: &CertificateParams,
        subject_key: &PublicKey,
        now: OffsetDateTime,
    ) -> Result<Vec<u8>, CaError> {
        if now >= self.not_after {
            return Err(CaError::IssuerExpired {
                kind: self.kind,
                not_after: self.not_after.unix_timestamp(),
            });
        }
        let spki = rcgen::SubjectPublicKeyInfo::from_der(subject_key.spki_der())
            .map_err(|e| CaError::Build(e.to_string()))?;
        let cert = params
            .signed_by(&spki, &self.issuer)
            .map_err(|e| CaError::Build(e.to_string()))?;
        Ok(cert.der().to_vec())
    }

    /// The rcgen issuer (subject, key usages and key) for what this CA signs besides
    /// certificates: the node CA's revocation list ([`super::crl`]).
    pub(crate) fn rcgen_issuer(&self) -> &rcgen::Issuer<'static, rcgen::KeyPair> {
        &self.issuer
    }

    /// The CA certificate's subject key identifier, when it has one.
    pub(crate) fn subject_key_id(&self) -> Option<&[u8]> {
        self.ski.as_deref()
    }

    /// Which CA this is.
    pub fn kind(&self) -> CaKind {
        self.kind
    }

    /// The trust domain in its subject.
    pub fn trust_domain(&self) -> &TrustDomain {
        &self.trust_domain
    }

    /// The CA certificate, DER.
    pub fn cert_der(&self) -> &[u8] {
        &self.cert_der
    }

    /// The CA certificate, PEM.
    pub fn cert_pem(&self) -> String {
        pem_encode("CERTIFICATE", &self.cert_der)
    }

    /// The CA certificate's serial number, big-endian bytes.
    pub fn serial(&self) -> Vec<u8> {
        parse_cert(&self.cert_der)
            .map(|c| c.raw_serial().to_vec())
            .unwrap_or_default()
    }

    /// notBefore of the CA certificate.
    pub fn not_before(&self) -> OffsetDateTime {
        self.not_before
    }

    /// notAfter of the CA certificate: no certificate it issues lives past it.
    pub fn not_after(&self) -> OffsetDateTime {
        self.not_after
    }

    /// The CA's public key.
    pub fn public_key(&self) -> &PublicKey {
        self.key.public_key()
    }

    /// The CA's private key (secret; for the bundle).
    pub fn private_key(&self) -> &PrivateKey {
        &self.key
    }

    /// A second handle on the private key (used to reissue a CA certificate for the same key).
    pub(crate) fn clone_key(&self) -> Result<PrivateKey, KeyError> {
        PrivateKey::from_pkcs8_der(self.key.role(), self.key.pkcs8_der())
    }
}

macro_rules! ca_wrapper {
    ($(#[$doc:meta])* $name:ident, $kind:expr) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub struct $name(CertificateAuthority);

        impl $name {
            /// Loads it from certificate DER and key; see [`CertificateAuthority::from_parts`].
            pub fn from_parts(
                trust_domain: &TrustDomain,
                cert_der: Vec<u8>,
                key: PrivateKey,
            ) -> Result<$name, CaError> {
                CertificateAuthority::from_parts($kind, trust_domain, cert_der, key).map($name)
            }
        }

        // The command-signing root certifies itself: only the node and serving CAs use these.
        #[allow(dead_code)]
        impl $name {
            /// The CA itself (for the root, which certifies it).
            pub(crate) fn authority(&self) -> &CertificateAuthority {
                &self.0
            }

            /// Wraps a CA of this kind (the root makes them).
            pub(crate) fn wrap(ca: CertificateAuthority) -> $name {
                debug_assert_eq!(ca.kind(), $kind);
                $name(ca)
            }
        }

        impl std::ops::Deref for $name {
            type Target = CertificateAuthority;
            fn deref(&self) -> &CertificateAuthority {
                &self.0
            }
        }
    };
}

ca_wrapper!(
    /// The node CA: issues agent certificates only.
    NodeCa,
    CaKind::Node
);
impl NodeCa {
    /// Names `point` (or none) in the CRL distribution points extension of every certificate
    /// this CA issues from now on (the deployment's `[crl] distribution_point`).
    pub fn set_crl_distribution_point(&mut self, point: Option<CrlDistributionPoint>) {
        self.0.crl_distribution_point = point;
    }

    /// The distribution point its certificates name, if any.
    pub fn crl_distribution_point(&self) -> Option<&CrlDistributionPoint> {
        self.0.crl_distribution_point.as_ref()
    }
}

ca_wrapper!(
    /// The serving CA: issues gateway serving certificates only.
    ServingCa,
    CaKind::Serving
);
ca_wrapper!(
    /// The operator CA: issues operator certificates only (`pki issue-operator`).
    OperatorCa,
    CaKind::Operator
);
ca_wrapper!(
    /// The command-signing root: a separate self-signed root that certifies worker keys.
    CommandSigningRoot,
    CaKind::CommandSigningRoot
);

impl CommandSigningRoot {
    /// Generates the self-signed command-signing root.
    pub fn generate(
        trust_domain: &TrustDomain,
        key: PrivateKey,
        now: OffsetDateTime,
        lifetime: Duration,
    ) -> Result<CommandSigningRoot, CaError> {
        CertificateAuthority::self_signed(
            CaKind::CommandSigningRoot,
            trust_domain,
            key,
            now,
            lifetime,
        )
        .map(CommandSigningRoot)
    }
}
