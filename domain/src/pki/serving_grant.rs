//! Which serving certificates a split gateway may get from the api: only for the names its
//! internal client certificate lists, and for at most [`GATEWAY_SERVING_MAX_LIFETIME`].
//!
//! A split gateway holds no CA key; the api issues its agent-facing serving certificate over
//! internal mTLS, for a key the gateway made. The names are fixed by the operator when issuing
//! the gateway's internal client certificate (`bcctl pki issue-internal --name N
//! --serving-name ...`): its DNS and IP subjectAltNames, the gateway's own name first, are the
//! gateway's [`GatewayGrant`]. [`plan_gateway_serving`] refuses a request naming anything else
//! and clamps a longer lifetime to the cap (the gateway renews at two thirds of what it got, so
//! a clamped certificate is renewed in time). The caller records every issued certificate as a
//! `gateway.serving.issued` event.

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::net::IpAddr;

use events::schema::GatewayServingIssued;
use time::Duration;
use x509_parser::extensions::GeneralName;

use super::leaf::{
    split_names, IssuedCertificate, Serial, ServingCertificateRequest, ServingRole,
    GATEWAY_SERVING_MAX_LIFETIME,
};
use super::spiffe::ROLE_OU_PREFIX;
use crate::decision::Decision;

/// The role an internal client certificate carries (`OU=bc-role:gateway`).
const GATEWAY_ROLE: &str = "gateway";

/// What one gateway's internal client certificate allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayGrant {
    /// The gateway's name: the certificate's first DNS name.
    pub gateway_name: String,
    /// The internal certificate's serial (lower-case hex).
    pub certificate_serial: String,
    /// DNS names a serving certificate may carry (lower case).
    pub dns_names: BTreeSet<String>,
    /// IP addresses a serving certificate may carry.
    pub ip_addresses: BTreeSet<IpAddr>,
}

impl GatewayGrant {
    /// Every name granted, DNS names then IP addresses, as text.
    pub fn names(&self) -> Vec<String> {
        self.dns_names
            .iter()
            .cloned()
            .chain(self.ip_addresses.iter().map(IpAddr::to_string))
            .collect()
    }
}

/// Why an internal client certificate gives no grant (a bug or a tampered connection: the
/// handshake already checked chain, role and usage).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrantError {
    #[error("the gateway's internal certificate does not parse: {0}")]
    Parse(String),
    #[error("the client certificate is not a gateway's internal certificate (no OU=bc-role:gateway): issue one with `bcctl pki issue-internal`")]
    NotGateway,
    #[error("the gateway's internal certificate names no DNS name: re-issue it with `bcctl pki issue-internal --name`")]
    NoName,
}

/// Reads the grant of a gateway's internal client certificate (DER).
pub fn read_grant(internal_leaf_der: &[u8]) -> Result<GatewayGrant, GrantError> {
    let (_, cert) = x509_parser::parse_x509_certificate(internal_leaf_der)
        .map_err(|e| GrantError::Parse(e.to_string()))?;
    let is_gateway = cert
        .subject()
        .iter_organizational_unit()
        .filter_map(|ou| ou.as_str().ok())
        .any(|ou| ou.strip_prefix(ROLE_OU_PREFIX) == Some(GATEWAY_ROLE));
    if !is_gateway {
        return Err(GrantError::NotGateway);
    }
    let mut first_dns = None;
    let mut dns_names = BTreeSet::new();
    let mut ip_addresses = BTreeSet::new();
    let san = cert
        .subject_alternative_name()
        .map_err(|e| GrantError::Parse(e.to_string()))?;
    for name in san.iter().flat_map(|s| s.value.general_names.iter()) {
        match name {
            GeneralName::DNSName(dns) => {
                let dns = dns.to_ascii_lowercase();
                first_dns.get_or_insert_with(|| dns.clone());
                dns_names.insert(dns);
            }
            GeneralName::IPAddress(bytes) => {
                if let Some(ip) = ip_from_bytes(bytes) {
                    ip_addresses.insert(ip);
                }
            }
            _ => {}
        }
    }
    Ok(GatewayGrant {
        gateway_name: first_dns.ok_or(GrantError::NoName)?,
        certificate_serial: hex::encode(cert.raw_serial()),
        dns_names,
        ip_addresses,
    })
}

fn ip_from_bytes(bytes: &[u8]) -> Option<IpAddr> {
    match bytes.len() {
        4 => <[u8; 4]>::try_from(bytes).ok().map(IpAddr::from),
        16 => <[u8; 16]>::try_from(bytes).ok().map(IpAddr::from),
        _ => None,
    }
}

/// Why the api refuses a gateway's serving certificate request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServingRefusal {
    #[error("the request names no DNS name or IP address")]
    NoNames,
    #[error("the requested lifetime must be positive")]
    NonPositiveLifetime,
    #[error("gateway {gateway} may not serve as {refused:?}: its internal certificate lists only {granted:?} (re-issue it with `bcctl pki issue-internal --name {gateway} --serving-name NAME` for each name, or fix serving_names)")]
    NotGranted {
        gateway: String,
        refused: Vec<String>,
        granted: Vec<String>,
    },
}

/// What to issue for a gateway asking for `names` for `lifetime`: every name must be in its
/// grant; a lifetime above [`GATEWAY_SERVING_MAX_LIFETIME`] is clamped to it. A calculation
/// (the certificate request the serving CA signs), recorded by [`decide_serving_issued`].
pub fn plan_gateway_serving(
    grant: &GatewayGrant,
    names: &[String],
    lifetime: Duration,
    serial: Serial,
) -> Result<ServingCertificateRequest, ServingRefusal> {
    let (dns_names, ip_addresses) = split_names(names);
    if dns_names.is_empty() && ip_addresses.is_empty() {
        return Err(ServingRefusal::NoNames);
    }
    if lifetime <= Duration::ZERO {
        return Err(ServingRefusal::NonPositiveLifetime);
    }
    let refused: Vec<String> = dns_names
        .iter()
        .filter(|d| !grant.dns_names.contains(*d))
        .cloned()
        .chain(
            ip_addresses
                .iter()
                .filter(|ip| !grant.ip_addresses.contains(ip))
                .map(IpAddr::to_string),
        )
        .collect();
    if !refused.is_empty() {
        return Err(ServingRefusal::NotGranted {
            gateway: grant.gateway_name.clone(),
            refused,
            granted: grant.names(),
        });
    }
    Ok(ServingCertificateRequest {
        dns_names,
        ip_addresses,
        role: ServingRole::Gateway,
        serial,
        lifetime: lifetime.min(GATEWAY_SERVING_MAX_LIFETIME),
    })
}

/// Records a gateway serving certificate the serving CA issued for `request` (signing comes
/// after [`plan_gateway_serving`]): `gateway.serving.issued` naming the gateway, the internal
/// certificate that granted it (`internal_sha256`: its DER's SHA-256), the names, the
/// certificate and the lifetime asked. The outcome is the names, DNS names then IP addresses.
pub fn decide_serving_issued(
    grant: &GatewayGrant,
    internal_sha256: [u8; 32],
    request: &ServingCertificateRequest,
    certificate: &IssuedCertificate,
    requested_lifetime: Duration,
) -> Result<Decision<GatewayServingIssued, Vec<String>>, Infallible> {
    let ip_addresses: Vec<String> = request
        .ip_addresses
        .iter()
        .map(|ip| ip.to_string())
        .collect();
    let event = GatewayServingIssued {
        gateway_name: grant.gateway_name.clone(),
        internal_certificate_serial: grant.certificate_serial.clone(),
        internal_certificate_sha256: internal_sha256.to_vec(),
        dns_names: request.dns_names.clone(),
        ip_addresses: ip_addresses.clone(),
        serial: certificate.serial.to_hex(),
        certificate_sha256: certificate.sha256.to_vec(),
        not_before: certificate.not_before.unix_timestamp(),
        not_after: certificate.not_after.unix_timestamp(),
        requested_lifetime_seconds: requested_lifetime.whole_seconds(),
    };
    let mut names = request.dns_names.clone();
    names.extend(ip_addresses);
    Ok(Decision {
        events: vec![event],
        outcome: names,
    })
}

/// How far back a serving certificate's validity starts, for clocks a little behind: five
/// minutes, or a tenth of a shorter lifetime (what [`super::leaf`] applies to every leaf it
/// issues since issue 22; callers pass `now` itself).
pub fn backdate(lifetime: Duration) -> Duration {
    std::cmp::min(lifetime / 10_i32, Duration::minutes(5))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant() -> GatewayGrant {
        GatewayGrant {
            gateway_name: "gw-1.example.com".into(),
            certificate_serial: "01".into(),
            dns_names: ["gw-1.example.com", "gateway.example.com"]
                .map(String::from)
                .into(),
            ip_addresses: ["10.0.0.5".parse().unwrap()].into(),
        }
    }

    #[test]
    fn names_outside_the_grant_are_refused_each_named() {
        let r = plan_gateway_serving(
            &grant(),
            &[
                "Gateway.example.com".into(),
                "evil.example.com".into(),
                "10.0.0.6".into(),
            ],
            Duration::days(1),
            Serial::generate().unwrap(),
        )
        .unwrap_err();
        assert_eq!(
            r,
            ServingRefusal::NotGranted {
                gateway: "gw-1.example.com".into(),
                refused: vec!["evil.example.com".into(), "10.0.0.6".into()],
                granted: vec![
                    "gateway.example.com".into(),
                    "gw-1.example.com".into(),
                    "10.0.0.5".into()
                ],
            }
        );
    }

    #[test]
    fn granted_names_pass_and_the_lifetime_is_clamped() {
        let req = plan_gateway_serving(
            &grant(),
            &[
                "GATEWAY.example.com".into(),
                "10.0.0.5".into(),
                "gateway.example.com".into(),
            ],
            Duration::days(90),
            Serial::generate().unwrap(),
        )
        .unwrap();
        assert_eq!(req.dns_names, vec!["gateway.example.com".to_string()]);
        assert_eq!(
            req.ip_addresses,
            vec!["10.0.0.5".parse::<IpAddr>().unwrap()]
        );
        assert_eq!(req.lifetime, GATEWAY_SERVING_MAX_LIFETIME);
        assert_eq!(req.role, ServingRole::Gateway);
        let short = plan_gateway_serving(
            &grant(),
            &["10.0.0.5".into()],
            Duration::hours(6),
            Serial::generate().unwrap(),
        )
        .unwrap();
        assert_eq!(short.lifetime, Duration::hours(6));
    }

    #[test]
    fn empty_names_and_non_positive_lifetimes_are_refused() {
        let s = || Serial::generate().unwrap();
        assert_eq!(
            plan_gateway_serving(&grant(), &[], Duration::days(1), s()),
            Err(ServingRefusal::NoNames)
        );
        assert_eq!(
            plan_gateway_serving(&grant(), &["10.0.0.5".into()], Duration::ZERO, s()),
            Err(ServingRefusal::NonPositiveLifetime)
        );
    }

    #[test]
    fn backdates_five_minutes_or_a_tenth() {
        assert_eq!(backdate(Duration::days(30)), Duration::minutes(5));
        assert_eq!(backdate(Duration::seconds(20)), Duration::seconds(2));
    }
}
