//! The CRL distribution point node certificates name (issue 41 item 4): what the URL may be,
//! one refusal per reason, and the extension in a certificate the node CA issues once it is
//! set, and none before.

use domain::pki::csr::{build_csr, VerifiedCsr};
use domain::pki::keys::{KeyRole, PrivateKey};
use domain::pki::keyset::{KeySet, KeySetLifetimes};
use domain::pki::leaf::{issue_node_certificate, NodeCertificateDecision, Serial};
use domain::pki::spiffe::{NodeId, NodeRole, SiteId, SpiffeId, TrustDomain};
use domain::pki::{CrlDistributionPoint, CrlUrlError};
use time::OffsetDateTime;
use x509_parser::extensions::{DistributionPointName, GeneralName, ParsedExtension};
use x509_parser::prelude::{FromDer, X509Certificate};

const URL: &str = "http://crl.fleet.example.com:8080/node-ca.crl";

fn t0() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_790_000_000).expect("time")
}

/// The URIs of the certificate's CRL distribution points, `None` without the extension.
fn distribution_points(der: &[u8]) -> Option<Vec<String>> {
    let (_, cert) = X509Certificate::from_der(der).expect("certificate");
    cert.extensions()
        .iter()
        .find_map(|e| match e.parsed_extension() {
            ParsedExtension::CRLDistributionPoints(points) => Some(points),
            _ => None,
        })
        .map(|points| {
            points
                .iter()
                .flat_map(|p| match &p.distribution_point {
                    Some(DistributionPointName::FullName(names)) => names.clone(),
                    _ => vec![],
                })
                .map(|n| match n {
                    GeneralName::URI(u) => u.to_owned(),
                    other => format!("{other:?}"),
                })
                .collect()
        })
}

fn issue(keys: &KeySet) -> Vec<u8> {
    let td = TrustDomain::new("compute.example.com").expect("td");
    let key = PrivateKey::generate(KeyRole::Node).expect("key");
    let csr = VerifiedCsr::verify(&build_csr(&key).expect("csr")).expect("verified");
    let decision = NodeCertificateDecision {
        spiffe_id: SpiffeId::new(
            td,
            SiteId::new("eu-1").expect("site"),
            NodeId::new("node_01").expect("node"),
        ),
        role: NodeRole::Node,
        serial: Serial::from_be_bytes(&[0x05]).expect("serial"),
        requested_lifetime: None,
        statements: vec![],
    };
    issue_node_certificate(&keys.node_ca, &csr, &decision, t0())
        .expect("issued")
        .der
}

#[test]
fn node_certificates_name_the_distribution_point_once_it_is_set() {
    let td = TrustDomain::new("compute.example.com").expect("td");
    let mut keys = KeySet::generate(td, t0(), KeySetLifetimes::default()).expect("keys");
    assert_eq!(distribution_points(&issue(&keys)), None);
    let point = CrlDistributionPoint::parse(URL).expect("url");
    keys.node_ca.set_crl_distribution_point(Some(point.clone()));
    assert_eq!(keys.node_ca.crl_distribution_point(), Some(&point));
    assert_eq!(
        distribution_points(&issue(&keys)),
        Some(vec![URL.to_owned()])
    );
    keys.node_ca.set_crl_distribution_point(None);
    assert_eq!(distribution_points(&issue(&keys)), None);
}

#[test]
fn a_distribution_point_is_a_plain_http_url_with_a_host() {
    for ok in [
        URL,
        "http://10.0.0.7/crl",
        "http://[::1]:8080/node-ca.crl?v=1",
    ] {
        assert_eq!(
            CrlDistributionPoint::parse(ok).map(|p| p.to_string()),
            Ok(ok.to_owned())
        );
    }
    let refused = |url: &str| CrlDistributionPoint::parse(url).expect_err(url);
    assert_eq!(
        refused("https://crl.example.com/node-ca.crl"),
        CrlUrlError::NotHttp("https://crl.example.com/node-ca.crl".into())
    );
    assert_eq!(
        refused("ldap://crl.example.com"),
        CrlUrlError::NotHttp("ldap://crl.example.com".into())
    );
    assert_eq!(
        refused("http:///node-ca.crl"),
        CrlUrlError::NoHost("http:///node-ca.crl".into())
    );
    assert_eq!(
        refused("http://:80/x"),
        CrlUrlError::NoHost("http://:80/x".into())
    );
    assert_eq!(
        refused("http://crl.example.com/a b"),
        CrlUrlError::BadCharacter {
            url: "http://crl.example.com/a b".into(),
            what: "a space"
        }
    );
    assert_eq!(
        refused("http://crl.example.com/\u{e9}"),
        CrlUrlError::BadCharacter {
            url: "http://crl.example.com/\u{e9}".into(),
            what: "a non-ASCII character"
        }
    );
    assert_eq!(
        refused("http://crl.example.com/\n"),
        CrlUrlError::BadCharacter {
            url: "http://crl.example.com/\n".into(),
            what: "a control character"
        }
    );
    let long = format!("http://crl.example.com/{}", "a".repeat(600));
    assert_eq!(refused(&long), CrlUrlError::TooLong { len: long.len() });
    assert_eq!(
        refused("https://x").to_string(),
        "\"https://x\" is not an http:// URL (a CRL distribution point is plain HTTP: the list is public and signed)"
    );
}
