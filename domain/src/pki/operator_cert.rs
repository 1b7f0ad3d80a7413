//! Operator certificates (issue 23): the client certificates people and automation present to
//! the admin API, issued by the deployment's operator CA only.
//!
//! The profile ([`issue_operator_certificate`]):
//!
//! * subject exactly `CN=<name>, OU=bc-role:<role>`, the role one of
//!   [`OperatorRole`] (`admin`, `operator`, `approver`, `auditor`);
//! * subjectAltName exactly one URI, `spiffe://<trust domain>/operator/<name>` (the name:
//!   [`OperatorName`], `[a-z0-9][a-z0-9._-]{0,62}`); no DNS, IP or other SAN;
//! * extendedKeyUsage clientAuth only (it can never serve TLS), keyUsage digitalSignature,
//!   basicConstraints CA:false, authority and subject key identifiers;
//! * a lifetime of at most [`OPERATOR_CERT_MAX_LIFETIME`] (90 days): a longer one is refused, not
//!   capped, so `--days 91` is an error the operator sees; backdated like every leaf and never
//!   past the operator CA's notAfter.
//!
//! [`OperatorIdentity::from_leaf_der`] reads the identity back (the admin server does, once the
//! chain to the operator CA is verified; this module checks the profile, not signatures) and
//! refuses anything that is not this profile with a reason naming what is wrong.

use rcgen::{
    CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, KeyUsagePurpose,
};
use time::{Duration, OffsetDateTime};
use x509_parser::extensions::GeneralName;

use super::ca::{parse_cert, CaError, OperatorCa};
use super::encoding::sha256;
use super::keys::PublicKey;
use super::leaf::{uri_san, validity, IssueError, IssuedCertificate, Serial};
use super::spiffe::{TrustDomain, ROLE_OU_PREFIX, SPIFFE_SCHEME};
use crate::operator::{BadOperatorName, OperatorName, OperatorRole, UnknownRole};

/// The longest an operator certificate lives.
pub const OPERATOR_CERT_MAX_LIFETIME: Duration = Duration::days(90);

/// Why an operator certificate was not issued.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OperatorCertError {
    /// The lifetime asked for is zero, negative or over 90 days.
    #[error("an operator certificate lives 1 second to 90 days; {asked_days} days were asked for")]
    Lifetime {
        /// The lifetime asked for, in whole days (rounded down).
        asked_days: i64,
    },
    /// The operator CA could not sign (expired, build failure, randomness).
    #[error(transparent)]
    Issue(#[from] IssueError),
}

impl From<CaError> for OperatorCertError {
    fn from(e: CaError) -> Self {
        OperatorCertError::Issue(IssueError::Ca(e))
    }
}

/// Issues an operator certificate from `ca` for `public_key` (the operator's own key): `name`
/// with `role`, valid from `now` for `lifetime` (at most 90 days, never past the CA), with a
/// fresh random serial.
pub fn issue_operator_certificate(
    ca: &OperatorCa,
    name: &OperatorName,
    role: OperatorRole,
    public_key: &PublicKey,
    lifetime: Duration,
    now: OffsetDateTime,
) -> Result<IssuedCertificate, OperatorCertError> {
    if lifetime <= Duration::ZERO || lifetime > OPERATOR_CERT_MAX_LIFETIME {
        return Err(OperatorCertError::Lifetime {
            asked_days: lifetime.whole_days(),
        });
    }
    let serial = Serial::generate().map_err(IssueError::Key)?;
    let (not_before, not_after) = validity(now, Some(lifetime), OPERATOR_CERT_MAX_LIFETIME, ca)?;
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, name.as_str());
    dn.push(
        DnType::OrganizationalUnitName,
        format!("{ROLE_OU_PREFIX}{}", role.as_str()),
    );
    params.distinguished_name = dn;
    params.serial_number = Some(serial.as_bytes().to_vec().into());
    params.not_before = not_before;
    params.not_after = not_after;
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    params.use_authority_key_identifier_extension = true;
    params.subject_alt_names = vec![uri_san(&name.spiffe_id(ca.trust_domain().as_str()))?];
    let der = ca.sign(&params, public_key, now)?;
    Ok(IssuedCertificate {
        sha256: sha256(&der),
        der,
        serial,
        not_before,
        not_after,
    })
}

/// Why a certificate carries no usable operator identity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OperatorIdentityError {
    /// Not one X.509 DER certificate.
    #[error("not an X.509 DER certificate")]
    Malformed,
    /// A CA certificate.
    #[error("a CA certificate is not an operator certificate")]
    IsCa,
    /// The subjectAltName does not parse, or there is no URI, or several, or a non-URI SAN.
    #[error("an operator certificate carries exactly one subjectAltName, its SPIFFE ID URI")]
    NotOneUri,
    /// The SPIFFE ID names another trust domain.
    #[error("the operator certificate is for trust domain {found}, this deployment is {expected}")]
    ForeignTrustDomain {
        /// Trust domain found.
        found: String,
        /// Trust domain expected.
        expected: String,
    },
    /// The URI is not `spiffe://<td>/operator/<name>` with a valid name.
    #[error("{0:?} is not an operator SPIFFE ID (spiffe://<trust domain>/operator/<name>)")]
    NotOperatorId(String),
    /// No `OU=bc-role:` in the subject.
    #[error("the operator certificate's subject has no OU=bc-role:<role>")]
    MissingRole,
    /// Several `OU=bc-role:` attributes.
    #[error(
        "the operator certificate's subject has {0} OU=bc-role: attributes; exactly one is allowed"
    )]
    MultipleRoles(usize),
    /// A role that is not an operator role (an agent's, or unknown).
    #[error("the operator certificate's role: {0}")]
    UnknownRole(UnknownRole),
    /// The subject's CN is not the name in the SPIFFE ID.
    #[error(
        "the operator certificate's subject CN must be {expected:?}, the name in its SPIFFE ID"
    )]
    CommonNameMismatch {
        /// The name in the SPIFFE ID.
        expected: String,
    },
    /// The extended key usage is not clientAuth (or allows serving).
    #[error("an operator certificate's extended key usage is clientAuth only")]
    NotClientAuth,
}

/// The identity an operator certificate carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorIdentity {
    /// The name (`CN` and the SPIFFE ID's last segment).
    pub name: String,
    /// `spiffe://<td>/operator/<name>`: the actor events record.
    pub spiffe_id: String,
    /// What the holder may do.
    pub role: OperatorRole,
    /// The serial (revocation is by serial: [`Serial::to_hex`]).
    pub serial: Serial,
    /// notBefore.
    pub not_before: OffsetDateTime,
    /// notAfter.
    pub not_after: OffsetDateTime,
}

impl OperatorIdentity {
    /// Reads the identity of an operator certificate issued in `trust_domain`.
    pub fn from_leaf_der(
        der: &[u8],
        trust_domain: &TrustDomain,
    ) -> Result<OperatorIdentity, OperatorIdentityError> {
        use OperatorIdentityError as E;
        let cert = parse_cert(der).ok_or(E::Malformed)?;
        if matches!(cert.basic_constraints(), Ok(Some(bc)) if bc.value.ca) {
            return Err(E::IsCa);
        }
        let san = cert.subject_alternative_name().map_err(|_| E::NotOneUri)?;
        let names = san.map(|s| &s.value.general_names[..]).unwrap_or_default();
        let [GeneralName::URI(uri)] = names else {
            return Err(E::NotOneUri);
        };
        let name = operator_name_of(uri, trust_domain)?;

        let roles: Vec<&str> = cert
            .subject()
            .iter_organizational_unit()
            .filter_map(|ou| ou.as_str().ok())
            .filter_map(|ou| ou.strip_prefix(ROLE_OU_PREFIX))
            .collect();
        let role = match roles[..] {
            [] => return Err(E::MissingRole),
            [one] => OperatorRole::parse(one).map_err(E::UnknownRole)?,
            _ => return Err(E::MultipleRoles(roles.len())),
        };
        let cns: Vec<_> = cert
            .subject()
            .iter_common_name()
            .map(|cn| cn.as_str().ok())
            .collect();
        if cns[..] != [Some(name.as_str())] {
            return Err(E::CommonNameMismatch {
                expected: name.to_string(),
            });
        }
        let client_only = matches!(
            cert.extended_key_usage(),
            Ok(Some(eku)) if eku.value.client_auth
                && !eku.value.server_auth
                && !eku.value.any
                && eku.value.other.is_empty()
        );
        if !client_only {
            return Err(E::NotClientAuth);
        }
        let serial = Serial::from_be_bytes(cert.raw_serial()).map_err(|_| E::Malformed)?;
        Ok(OperatorIdentity {
            spiffe_id: name.spiffe_id(trust_domain.as_str()),
            name: name.to_string(),
            role,
            serial,
            not_before: cert.validity().not_before.to_datetime(),
            not_after: cert.validity().not_after.to_datetime(),
        })
    }
}

/// The operator name of `uri` if it is `spiffe://<trust_domain>/operator/<name>`.
fn operator_name_of(
    uri: &str,
    trust_domain: &TrustDomain,
) -> Result<OperatorName, OperatorIdentityError> {
    let not_operator = || OperatorIdentityError::NotOperatorId(uri.to_string());
    let rest = uri.strip_prefix(SPIFFE_SCHEME).ok_or_else(not_operator)?;
    let (td, path) = rest.split_once('/').ok_or_else(not_operator)?;
    if td != trust_domain.as_str() {
        return Err(OperatorIdentityError::ForeignTrustDomain {
            found: td.to_string(),
            expected: trust_domain.to_string(),
        });
    }
    let name = path.strip_prefix("operator/").ok_or_else(not_operator)?;
    OperatorName::new(name).map_err(|BadOperatorName(_)| not_operator())
}

#[cfg(test)]
#[path = "operator_cert_tests.rs"]
mod tests;
