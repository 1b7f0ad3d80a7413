//! Issuing leaf certificates: agent (node) certificates from the node CA and serving
//! certificates from the serving CA.
//!
//! An agent certificate is built only from the registry's decision
//! ([`NodeCertificateDecision`]) and the public key of a [`VerifiedCsr`]; nothing else of the CSR
//! reaches it. Its profile:
//!
//! * subject exactly `OU=bc-role:<role>`;
//! * subjectAltName: exactly one URI SAN `spiffe://<td>/site/<site>/node/<node>`, first, then
//!   only `urn:bc:` statements ([`NodeKeyStatement`]), at most four URIs in all; no DNS or IP SAN;
//! * extendedKeyUsage clientAuth only; keyUsage digitalSignature; basicConstraints CA:false;
//!   authority and subject key identifiers;
//! * notBefore `now` less [`BACKDATE`] (never before the CA's own notBefore), so a peer whose
//!   clock runs a little behind does not see a certificate not yet valid; notAfter `now` plus
//!   the shorter of what the caller asked and the role's maximum ([`NODE_MAX_LIFETIME`] for
//!   node, site and node-tenant, [`RAMDISK_MAX_LIFETIME`] for ramdisk), but the span
//!   notAfter - notBefore never over the maximum (bcd and the command verifier refuse one that
//!   is), and never past the node CA's own notAfter. The CA enforces this whatever the caller
//!   asks.
//!
//! A serving certificate carries DNS and IP SANs, serverAuth, `OU=bc-role:gateway` (or
//! `internal`), at most [`GATEWAY_SERVING_MAX_LIFETIME`] for a gateway and
//! [`SERVING_MAX_LIFETIME`] for the api's internal endpoint, and never past the serving CA.

use std::net::IpAddr;

use rcgen::{
    CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, KeyUsagePurpose,
    SanType,
};
use time::{Duration, OffsetDateTime};

use super::ca::{
    random_serial, whole_seconds, CaError, CertificateAuthority, CommandSigningRoot, NodeCa,
    ServingCa,
};
use super::csr::VerifiedCsr;
use super::encoding::sha256;
use super::keys::{KeyError, PublicKey};
use super::spiffe::{NodeRole, Role, SpiffeId};

pub use super::backdate::BACKDATE;

/// Longest life of a node, site or node-tenant certificate.
pub const NODE_MAX_LIFETIME: Duration = Duration::hours(24);
/// Longest life of a ramdisk certificate.
pub const RAMDISK_MAX_LIFETIME: Duration = Duration::hours(2);
/// Longest life of an internal serving certificate (the api's endpoint) and of a gateway's
/// internal client certificate.
pub const SERVING_MAX_LIFETIME: Duration = Duration::days(90);
/// Longest life of a gateway's (agent-facing) serving certificate: gateways renew theirs while
/// they run, so a stolen one is good for a week at most.
pub const GATEWAY_SERVING_MAX_LIFETIME: Duration = Duration::days(7);
/// Most URI SANs in an agent certificate: the SPIFFE ID and up to three statements.
pub const MAX_URI_SANS: usize = 4;
/// Prefix of a statement URI.
pub const STATEMENT_PREFIX: &str = "urn:bc:";
/// Longest statement URI.
pub const MAX_STATEMENT_LEN: usize = 256;

impl NodeRole {
    /// The longest certificate the node CA issues for this role.
    pub fn max_lifetime(self) -> Duration {
        match self {
            NodeRole::Ramdisk => RAMDISK_MAX_LIFETIME,
            NodeRole::Node | NodeRole::Site | NodeRole::NodeTenant => NODE_MAX_LIFETIME,
        }
    }
}

/// Why a certificate was not issued.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IssueError {
    /// A CA problem (expired, build failure).
    #[error(transparent)]
    Ca(#[from] CaError),
    /// The decision names another trust domain than the node CA's.
    #[error("the decision names trust domain {decision}, the node CA serves {ca}")]
    TrustDomainMismatch {
        /// Trust domain in the decision.
        decision: String,
        /// The CA's trust domain.
        ca: String,
    },
    /// More statements than fit beside the SPIFFE ID.
    #[error("at most {max} URI SANs: the SPIFFE ID and {} statements", max - 1)]
    TooManyStatements {
        /// [`MAX_URI_SANS`].
        max: usize,
    },
    /// A serving certificate with no name.
    #[error("a serving certificate needs at least one DNS name or IP address")]
    NoServingNames,
    /// A DNS name that is not a valid host name.
    #[error("{0:?} is not a valid DNS name")]
    BadDnsName(String),
    /// The requested lifetime is zero or negative.
    #[error("the requested certificate lifetime must be positive")]
    NonPositiveLifetime,
    /// A serial out of range.
    #[error("a serial must be 1 to 20 bytes, positive and non-zero")]
    BadSerial,
    /// Randomness failed.
    #[error(transparent)]
    Key(#[from] KeyError),
}

/// A certificate serial: positive, non-zero, at most 20 bytes in DER (minimal big-endian bytes).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Serial(Vec<u8>);

impl Serial {
    /// A fresh random 16-byte serial.
    pub fn generate() -> Result<Serial, KeyError> {
        Ok(Serial(random_serial()?))
    }

    /// A random 16-byte serial drawn from `rng` (the entropy the shell passes a decision), in
    /// the same range as [`Serial::generate`]'s.
    pub fn from_rng(rng: &mut dyn rand_core::CryptoRngCore) -> Serial {
        let mut serial = [0u8; 16];
        rng.fill_bytes(&mut serial);
        serial[0] = (serial[0] & 0x7f) | 0x40;
        Serial(serial.to_vec())
    }

    /// From big-endian bytes; leading zero bytes are dropped. Refuses zero and anything that
    /// would not fit RFC 5280's 20 octets.
    pub fn from_be_bytes(bytes: &[u8]) -> Result<Serial, IssueError> {
        let start = bytes
            .iter()
            .position(|b| *b != 0)
            .ok_or(IssueError::BadSerial)?;
        let minimal = &bytes[start..];
        let der_len = minimal.len() + usize::from(minimal[0] & 0x80 != 0);
        if der_len > 20 {
            return Err(IssueError::BadSerial);
        }
        Ok(Serial(minimal.to_vec()))
    }

    /// Minimal big-endian bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// Lower-case hex, as stored in `node_certs.serial`.
    pub fn to_hex(&self) -> String {
        hex::encode(&self.0)
    }
}

/// A `urn:bc:<kind>:<value>` statement about the node's key (for example
/// `urn:bc:tpm-ak:<nameAlg>:<digest>`): printable ASCII without spaces, never an identity.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NodeKeyStatement(String);

/// Why a statement URI was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not a urn:bc:<kind>:<value> statement of printable ASCII (at most 256 characters)"
)]
pub struct StatementUriError(pub String);

impl NodeKeyStatement {
    /// Validates a statement URI.
    pub fn new(uri: &str) -> Result<NodeKeyStatement, StatementUriError> {
        let err = || StatementUriError(uri.to_owned());
        let rest = uri.strip_prefix(STATEMENT_PREFIX).ok_or_else(err)?;
        let (kind, value) = rest.split_once(':').ok_or_else(err)?;
        let printable = uri.bytes().all(|b| (0x21..=0x7e).contains(&b));
        if kind.is_empty() || value.is_empty() || !printable || uri.len() > MAX_STATEMENT_LEN {
            return Err(err());
        }
        Ok(NodeKeyStatement(uri.to_owned()))
    }

    /// The URI.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// What the registry decided to certify.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeCertificateDecision {
    /// Trust domain, site and node.
    pub spiffe_id: SpiffeId,
    /// The agent's role.
    pub role: NodeRole,
    /// Serial chosen by the decision (recorded in the event).
    pub serial: Serial,
    /// The lifetime asked for; `None` asks for the role's maximum. Capped either way.
    pub requested_lifetime: Option<Duration>,
    /// `urn:bc:` statements to carry after the SPIFFE ID (at most three).
    pub statements: Vec<NodeKeyStatement>,
}

/// An issued certificate and the facts the event records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedCertificate {
    /// The certificate, DER.
    pub der: Vec<u8>,
    /// SHA-256 of the DER.
    pub sha256: [u8; 32],
    /// Its serial.
    pub serial: Serial,
    /// notBefore.
    pub not_before: OffsetDateTime,
    /// notAfter, after every cap.
    pub not_after: OffsetDateTime,
}

pub(crate) fn validity(
    now: OffsetDateTime,
    requested: Option<Duration>,
    max: Duration,
    ca: &CertificateAuthority,
) -> Result<(OffsetDateTime, OffsetDateTime), IssueError> {
    let lifetime = requested.unwrap_or(max);
    if lifetime <= Duration::ZERO {
        return Err(IssueError::NonPositiveLifetime);
    }
    let now = whole_seconds(now);
    // Backdated, never before the CA; the lifetime counts from now, except that the span never
    // exceeds the role's maximum (verifiers on deployed nodes refuse a longer one), so a leaf
    // asked for within BACKDATE of the maximum ends that much earlier.
    // A short leaf is backdated a tenth of its lifetime at most: bcd renews at 60% of the span
    // from notBefore, which must stay ahead of now.
    let lifetime = lifetime.min(max);
    let backdate = BACKDATE.min(lifetime / 10);
    let not_before = (now - backdate).max(ca.not_before()).min(now);
    let not_after = (now + lifetime).min(not_before + max).min(ca.not_after());
    Ok((not_before, not_after))
}

fn role_subject(role: Role) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationalUnitName, role.ou());
    dn
}

pub(crate) fn uri_san(uri: &str) -> Result<SanType, IssueError> {
    uri.to_owned()
        .try_into()
        .map(SanType::URI)
        .map_err(|e: rcgen::Error| CaError::Build(e.to_string()).into())
}

/// Issues an agent certificate from `node_ca` for the key of `csr`, as `decision` says.
pub fn issue_node_certificate(
    node_ca: &NodeCa,
    csr: &VerifiedCsr,
    decision: &NodeCertificateDecision,
    now: OffsetDateTime,
) -> Result<IssuedCertificate, IssueError> {
    if decision.spiffe_id.trust_domain != *node_ca.trust_domain() {
        return Err(IssueError::TrustDomainMismatch {
            decision: decision.spiffe_id.trust_domain.to_string(),
            ca: node_ca.trust_domain().to_string(),
        });
    }
    if decision.statements.len() + 1 > MAX_URI_SANS {
        return Err(IssueError::TooManyStatements { max: MAX_URI_SANS });
    }
    let (not_before, not_after) = validity(
        now,
        decision.requested_lifetime,
        decision.role.max_lifetime(),
        node_ca,
    )?;
    let mut params = CertificateParams::default();
    params.distinguished_name = role_subject(decision.role.role());
    params.serial_number = Some(decision.serial.as_bytes().to_vec().into());
    params.not_before = not_before;
    params.not_after = not_after;
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    params.use_authority_key_identifier_extension = true;
    params.subject_alt_names = std::iter::once(uri_san(&decision.spiffe_id.to_string()))
        .chain(decision.statements.iter().map(|s| uri_san(s.as_str())))
        .collect::<Result<_, _>>()?;
    if let Some(point) = node_ca.crl_distribution_point() {
        params.crl_distribution_points = vec![rcgen::CrlDistributionPoint {
            uris: vec![point.as_str().to_owned()],
        }];
    }
    let der = node_ca.sign(&params, csr.public_key(), now)?;
    Ok(IssuedCertificate {
        sha256: sha256(&der),
        der,
        serial: decision.serial.clone(),
        not_before,
        not_after,
    })
}

/// The role a serving certificate carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ServingRole {
    /// The agent-facing gateway.
    Gateway,
    /// The internal control API.
    Internal,
}

/// What `pki issue-gateway` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServingCertificateRequest {
    /// DNS names (lower-case host names; a leading `*.` wildcard label is allowed).
    pub dns_names: Vec<String>,
    /// IP addresses.
    pub ip_addresses: Vec<IpAddr>,
    /// Gateway or internal.
    pub role: ServingRole,
    /// Serial.
    pub serial: Serial,
    /// Lifetime asked for; capped at [`GATEWAY_SERVING_MAX_LIFETIME`] (gateway) or
    /// [`SERVING_MAX_LIFETIME`] (internal) and the serving CA's notAfter.
    pub lifetime: Duration,
}

fn check_dns_name(name: &str) -> Result<(), IssueError> {
    let bad = || IssueError::BadDnsName(name.to_owned());
    let host = name.strip_prefix("*.").unwrap_or(name);
    if host.is_empty() || name.len() > 253 {
        return Err(bad());
    }
    for label in host.split('.') {
        let ok = !label.is_empty()
            && label.len() <= 63
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !ok {
            return Err(bad());
        }
    }
    Ok(())
}

/// Splits names into DNS names (lower case) and IP addresses, dropping repeats, in the order
/// given.
pub fn split_names(names: &[String]) -> (Vec<String>, Vec<IpAddr>) {
    let mut dns_names: Vec<String> = Vec::new();
    let mut ip_addresses: Vec<IpAddr> = Vec::new();
    for n in names {
        match n.parse::<IpAddr>() {
            Ok(ip) if !ip_addresses.contains(&ip) => ip_addresses.push(ip),
            Ok(_) => {}
            Err(_) => {
                let dns = n.to_ascii_lowercase();
                if !dns_names.contains(&dns) {
                    dns_names.push(dns);
                }
            }
        }
    }
    (dns_names, ip_addresses)
}

/// Issues a serving certificate from `serving_ca` for `public_key` (the gateway's own key).
pub fn issue_serving_certificate(
    serving_ca: &ServingCa,
    public_key: &PublicKey,
    request: &ServingCertificateRequest,
    now: OffsetDateTime,
) -> Result<IssuedCertificate, IssueError> {
    if request.dns_names.is_empty() && request.ip_addresses.is_empty() {
        return Err(IssueError::NoServingNames);
    }
    let mut sans = Vec::new();
    for name in &request.dns_names {
        check_dns_name(name)?;
        let ia5 = name
            .clone()
            .try_into()
            .map_err(|_| IssueError::BadDnsName(name.clone()))?;
        sans.push(SanType::DnsName(ia5));
    }
    sans.extend(request.ip_addresses.iter().copied().map(SanType::IpAddress));
    let max = match request.role {
        ServingRole::Gateway => GATEWAY_SERVING_MAX_LIFETIME,
        ServingRole::Internal => SERVING_MAX_LIFETIME,
    };
    let (not_before, not_after) = validity(now, Some(request.lifetime), max, serving_ca)?;
    let role = match request.role {
        ServingRole::Gateway => Role::Gateway,
        ServingRole::Internal => Role::Internal,
    };
    let mut params = CertificateParams::default();
    params.distinguished_name = role_subject(role);
    params.serial_number = Some(request.serial.as_bytes().to_vec().into());
    params.not_before = not_before;
    params.not_after = not_after;
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    params.subject_alt_names = sans;
    let der = serving_ca.sign(&params, public_key, now)?;
    Ok(IssuedCertificate {
        sha256: sha256(&der),
        der,
        serial: request.serial.clone(),
        not_before,
        not_after,
    })
}

/// Issues an internal *client* certificate from `serving_ca` for `public_key`: the credential a
/// split gateway presents to the api's internal endpoint (`OU=bc-role:gateway`, extended key
/// usage clientAuth only, so it can never serve TLS, and a gateway's serving certificate,
/// serverAuth only, can never act as it). Its subjectAltNames are `name` (a DNS name, first),
/// then `serving_names` (DNS names or IP addresses): together the only names the api issues
/// this gateway serving certificates for (`serving_grant`). Lifetime capped at
/// [`SERVING_MAX_LIFETIME`].
pub fn issue_internal_client_certificate(
    serving_ca: &ServingCa,
    public_key: &PublicKey,
    name: &str,
    serving_names: &[String],
    serial: &Serial,
    lifetime: Duration,
    now: OffsetDateTime,
) -> Result<IssuedCertificate, IssueError> {
    let mut all = vec![name.to_owned()];
    all.extend(serving_names.iter().cloned());
    let (dns_names, ip_addresses) = split_names(&all);
    if dns_names.first().map(String::as_str) != Some(&name.to_ascii_lowercase()) {
        return Err(IssueError::BadDnsName(name.to_owned()));
    }
    let mut sans = Vec::new();
    for dns in &dns_names {
        check_dns_name(dns)?;
        let ia5 = dns
            .clone()
            .try_into()
            .map_err(|_| IssueError::BadDnsName(dns.clone()))?;
        sans.push(SanType::DnsName(ia5));
    }
    sans.extend(ip_addresses.into_iter().map(SanType::IpAddress));
    let (not_before, not_after) = validity(now, Some(lifetime), SERVING_MAX_LIFETIME, serving_ca)?;
    let mut params = CertificateParams::default();
    params.distinguished_name = role_subject(Role::Gateway);
    params.serial_number = Some(serial.as_bytes().to_vec().into());
    params.not_before = not_before;
    params.not_after = not_after;
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    params.use_authority_key_identifier_extension = true;
    params.subject_alt_names = sans;
    let der = serving_ca.sign(&params, public_key, now)?;
    Ok(IssuedCertificate {
        sha256: sha256(&der),
        der,
        serial: serial.clone(),
        not_before,
        not_after,
    })
}

/// The longest a worker certificate lives (spec 003 "Signed intent": at most 24 hours).
pub const WORKER_CERT_MAX_LIFETIME: Duration = Duration::hours(24);

/// Issues a worker certificate from the command-signing `root` for `public_key`: the key a
/// control-plane process signs commands with (`OU=bc-role:worker`, `CN=<name>`, digital
/// signature only, no extended key usage: there is no command-signing EKU, the role is the
/// OU), living at most [`WORKER_CERT_MAX_LIFETIME`] and never past the root.
pub fn issue_worker_certificate(
    root: &CommandSigningRoot,
    public_key: &PublicKey,
    name: &str,
    serial: &Serial,
    lifetime: Duration,
    now: OffsetDateTime,
) -> Result<IssuedCertificate, IssueError> {
    let (not_before, not_after) = validity(now, Some(lifetime), WORKER_CERT_MAX_LIFETIME, root)?;
    let mut params = CertificateParams::default();
    let mut dn = role_subject(Role::Worker);
    dn.push(DnType::CommonName, name);
    params.distinguished_name = dn;
    params.serial_number = Some(serial.as_bytes().to_vec().into());
    params.not_before = not_before;
    params.not_after = not_after;
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.use_authority_key_identifier_extension = true;
    let der = root.sign(&params, public_key, now)?;
    Ok(IssuedCertificate {
        sha256: sha256(&der),
        der,
        serial: serial.clone(),
        not_before,
        not_after,
    })
}
