//! Reading a node identity out of an agent certificate.
//!
//! [`NodeIdentity::from_leaf_der`] is what the gateway's TLS verifier, the renew path and the
//! x509pop attestor use once the chain itself has been verified (this module checks the
//! profile, not signatures): the certificate must carry exactly one SPIFFE URI SAN, in the
//! expected trust domain, every other URI must be a `urn:bc:` statement, there may be no other
//! kind of SAN, and the subject must hold exactly one `OU=bc-role:<role>` naming an agent role.
//! The node id always comes from here, never from a message field.

use time::OffsetDateTime;
use x509_parser::extensions::GeneralName;

use super::ca::parse_cert;
use super::keys::{KeyError, PublicKey};
use super::leaf::{NodeKeyStatement, Serial, STATEMENT_PREFIX};
use super::spiffe::{NodeRole, Role, SpiffeError, SpiffeId, TrustDomain, ROLE_OU_PREFIX};

/// Why a certificate carries no usable node identity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    /// Not an X.509 DER certificate.
    #[error("not an X.509 DER certificate")]
    Malformed,
    /// The subjectAltName extension does not parse, or appears twice.
    #[error("the certificate's subjectAltName is malformed")]
    MalformedSan,
    /// Zero or several SPIFFE URI SANs.
    #[error("the certificate carries {0} SPIFFE IDs; a node identity has exactly one")]
    NotOneSpiffeId(usize),
    /// The SPIFFE URI is not a node ID.
    #[error(transparent)]
    BadSpiffeId(SpiffeError),
    /// The SPIFFE ID names another trust domain.
    #[error("the certificate is for trust domain {found}, this deployment is {expected}")]
    ForeignTrustDomain {
        /// Trust domain found.
        found: String,
        /// Trust domain expected.
        expected: String,
    },
    /// A URI SAN that is neither the SPIFFE ID nor a `urn:bc:` statement.
    #[error("unexpected URI SAN {0:?}: only the SPIFFE ID and urn:bc: statements are allowed")]
    UnexpectedUri(String),
    /// A DNS, IP, e-mail or other SAN.
    #[error("an agent certificate carries only URI SANs")]
    UnexpectedSan,
    /// No `OU=bc-role:` in the subject.
    #[error("the certificate subject has no OU=bc-role:<role>")]
    MissingRole,
    /// Several `OU=bc-role:` attributes.
    #[error("the certificate subject has {0} OU=bc-role: attributes; exactly one is allowed")]
    MultipleRoles(usize),
    /// A role that is unknown or not an agent's.
    #[error(transparent)]
    BadRole(SpiffeError),
    /// The certificate's key is not P-256.
    #[error("the certificate's key: {0}")]
    Key(KeyError),
}

/// The identity an agent certificate carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeIdentity {
    /// Trust domain, site and node.
    pub spiffe_id: SpiffeId,
    /// The agent role.
    pub role: NodeRole,
    /// `urn:bc:` statements, in certificate order (copied into a renewed certificate).
    pub statements: Vec<NodeKeyStatement>,
    /// The serial.
    pub serial: Serial,
    /// notBefore.
    pub not_before: OffsetDateTime,
    /// notAfter.
    pub not_after: OffsetDateTime,
    /// The certified key.
    pub public_key: PublicKey,
}

impl NodeIdentity {
    /// Reads the identity of an agent certificate issued in `trust_domain`.
    pub fn from_leaf_der(
        der: &[u8],
        trust_domain: &TrustDomain,
    ) -> Result<NodeIdentity, IdentityError> {
        let cert = parse_cert(der).ok_or(IdentityError::Malformed)?;
        let san = cert
            .subject_alternative_name()
            .map_err(|_| IdentityError::MalformedSan)?;
        let names = san
            .map(|s| s.value.general_names.clone())
            .unwrap_or_default();

        let mut spiffe = Vec::new();
        let mut statements = Vec::new();
        for name in &names {
            match name {
                GeneralName::URI(uri) if SpiffeId::is_spiffe_uri(uri) => spiffe.push(*uri),
                GeneralName::URI(uri) if uri.starts_with(STATEMENT_PREFIX) => statements.push(
                    NodeKeyStatement::new(uri)
                        .map_err(|_| IdentityError::UnexpectedUri((*uri).to_owned()))?,
                ),
                GeneralName::URI(uri) => {
                    return Err(IdentityError::UnexpectedUri((*uri).to_owned()))
                }
                _ => return Err(IdentityError::UnexpectedSan),
            }
        }
        let [uri] = spiffe[..] else {
            return Err(IdentityError::NotOneSpiffeId(spiffe.len()));
        };
        let spiffe_id = SpiffeId::parse(uri).map_err(IdentityError::BadSpiffeId)?;
        if spiffe_id.trust_domain != *trust_domain {
            return Err(IdentityError::ForeignTrustDomain {
                found: spiffe_id.trust_domain.to_string(),
                expected: trust_domain.to_string(),
            });
        }

        let roles: Vec<&str> = cert
            .subject()
            .iter_organizational_unit()
            .filter_map(|ou| ou.as_str().ok())
            .filter_map(|ou| ou.strip_prefix(ROLE_OU_PREFIX))
            .collect();
        let role = match roles[..] {
            [] => return Err(IdentityError::MissingRole),
            [one] => one,
            _ => return Err(IdentityError::MultipleRoles(roles.len())),
        };
        let role = role
            .parse::<Role>()
            .and_then(NodeRole::try_from)
            .map_err(IdentityError::BadRole)?;

        let public_key =
            PublicKey::from_spki_der(cert.public_key().raw).map_err(IdentityError::Key)?;
        let serial =
            Serial::from_be_bytes(cert.raw_serial()).map_err(|_| IdentityError::Malformed)?;
        Ok(NodeIdentity {
            spiffe_id,
            role,
            statements,
            serial,
            not_before: cert.validity().not_before.to_datetime(),
            not_after: cert.validity().not_after.to_datetime(),
            public_key,
        })
    }
}

/// Whether the certificate `der` carries a valid signature by the key of the CA certificate
/// `issuer_der` (the agent's check that a renewed leaf chains to the node CA it already holds).
/// Either not parsing as one DER certificate is `false`.
pub fn issued_by(der: &[u8], issuer_der: &[u8]) -> bool {
    let (Some(cert), Some(issuer)) = (parse_cert(der), parse_cert(issuer_der)) else {
        return false;
    };
    cert.verify_signature(Some(issuer.public_key())).is_ok()
}

/// Whether the CA certificates `a_der` and `b_der` are one CA: the same subject and the same
/// key. `pki renew-ca` re-issues a CA certificate that way, so what the CA signed before still
/// verifies under it and a holder of the earlier certificate names the same CA. Either not
/// parsing as one DER certificate is `false`.
pub fn same_ca(a_der: &[u8], b_der: &[u8]) -> bool {
    let (Some(a), Some(b)) = (parse_cert(a_der), parse_cert(b_der)) else {
        return false;
    };
    a.subject().as_raw() == b.subject().as_raw() && a.public_key().raw == b.public_key().raw
}
