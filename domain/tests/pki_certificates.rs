//! Certificate profiles, lifetimes, CSR checks, identity extraction and an `openssl verify` of
//! the issued chain.

use std::net::{IpAddr, Ipv4Addr};

use domain::pki::ca::CaError;
use domain::pki::csr::{build_csr, CsrError, VerifiedCsr};
use domain::pki::identity::{IdentityError, NodeIdentity};
use domain::pki::keys::{KeyRole, PrivateKey};
use domain::pki::keyset::{KeySet, KeySetLifetimes};
use domain::pki::leaf::{
    issue_node_certificate, issue_serving_certificate, IssueError, NodeCertificateDecision,
    NodeKeyStatement, Serial, ServingCertificateRequest, ServingRole, BACKDATE,
};
use domain::pki::spiffe::{NodeId, NodeRole, SiteId, SpiffeId, TrustDomain};
use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair, SanType};
use time::{Duration, OffsetDateTime};
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

const TD: &str = "compute.example.com";

fn t0() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_790_000_000).unwrap()
}

fn td() -> TrustDomain {
    TrustDomain::new(TD).unwrap()
}

fn key_set_at(now: OffsetDateTime, lifetimes: KeySetLifetimes) -> KeySet {
    KeySet::generate(td(), now, lifetimes).unwrap()
}

fn node_csr() -> (PrivateKey, VerifiedCsr) {
    let key = PrivateKey::generate(KeyRole::Node).unwrap();
    let csr = VerifiedCsr::verify(&build_csr(&key).unwrap()).unwrap();
    (key, csr)
}

fn decision(role: NodeRole, lifetime: Option<Duration>) -> NodeCertificateDecision {
    NodeCertificateDecision {
        spiffe_id: SpiffeId::new(
            td(),
            SiteId::new("eu-1").unwrap(),
            NodeId::new("node_01").unwrap(),
        ),
        role,
        serial: Serial::from_be_bytes(&[0x01, 0x02, 0x03]).unwrap(),
        requested_lifetime: lifetime,
        statements: vec![],
    }
}

fn parse(der: &[u8]) -> X509Certificate<'_> {
    let (rest, cert) = X509Certificate::from_der(der).unwrap();
    assert!(rest.is_empty());
    cert
}

fn uris(cert: &X509Certificate<'_>) -> Vec<String> {
    cert.subject_alternative_name()
        .unwrap()
        .unwrap()
        .value
        .general_names
        .iter()
        .map(|n| match n {
            GeneralName::URI(u) => u.to_string(),
            other => panic!("unexpected SAN {other:?}"),
        })
        .collect()
}

fn lifetime(cert: &X509Certificate<'_>) -> i64 {
    cert.validity().not_after.timestamp() - cert.validity().not_before.timestamp()
}

#[test]
fn pki_node_leaf_has_exact_profile() {
    let keys = key_set_at(t0(), KeySetLifetimes::default());
    let (key, csr) = node_csr();
    let mut d = decision(NodeRole::Node, None);
    d.statements = vec![NodeKeyStatement::new("urn:bc:tpm-ak:000b:abcd").unwrap()];
    let issued = issue_node_certificate(&keys.node_ca, &csr, &d, t0()).unwrap();
    let cert = parse(&issued.der);

    assert_eq!(
        uris(&cert),
        [
            "spiffe://compute.example.com/site/eu-1/node/node_01",
            "urn:bc:tpm-ak:000b:abcd"
        ]
    );
    let rdns: Vec<String> = cert
        .subject()
        .iter_attributes()
        .map(|a| format!("{}={}", a.attr_type(), a.as_str().unwrap()))
        .collect();
    assert_eq!(rdns, ["2.5.4.11=bc-role:node"]);
    let eku = cert.extended_key_usage().unwrap().unwrap().value;
    assert!(eku.client_auth);
    assert!(!eku.server_auth && !eku.any && eku.other.is_empty());
    assert!(!cert.basic_constraints().unwrap().unwrap().value.ca);
    assert!(cert.key_usage().unwrap().unwrap().value.digital_signature());
    assert_eq!(cert.public_key().raw, key.public_key().spki_der());
    assert_eq!(cert.raw_serial(), &[0x01, 0x02, 0x03]);
    assert_eq!(
        cert.validity().not_before.timestamp(),
        (t0() - BACKDATE).unix_timestamp()
    );
    assert_eq!(lifetime(&cert), 24 * 3600);
    assert_eq!(
        cert.issuer().as_raw(),
        parse(keys.node_ca.cert_der()).subject().as_raw()
    );
    assert_eq!(issued.not_after, t0() - BACKDATE + Duration::hours(24));
    // signed by the node CA's key
    cert.verify_signature(Some(parse(keys.node_ca.cert_der()).public_key()))
        .unwrap();

    let id = NodeIdentity::from_leaf_der(&issued.der, &td()).unwrap();
    assert_eq!(id.spiffe_id, d.spiffe_id);
    assert_eq!(id.role, NodeRole::Node);
    assert_eq!(id.statements, d.statements);
    assert_eq!(id.serial, d.serial);
    assert_eq!(&id.public_key, key.public_key());
}

#[test]
fn pki_leaf_lifetimes_are_capped_by_role_and_ca() {
    let keys = key_set_at(t0(), KeySetLifetimes::default());
    let (_, csr) = node_csr();
    for (role, asked, want) in [
        (NodeRole::Node, Some(Duration::hours(48)), 24 * 3600),
        (NodeRole::Site, Some(Duration::days(365)), 24 * 3600),
        (NodeRole::Node, Some(Duration::hours(1)), 3600 + 300), // backdated 5 min
        (NodeRole::Ramdisk, Some(Duration::hours(24)), 2 * 3600),
        (NodeRole::Ramdisk, None, 2 * 3600),
    ] {
        let issued =
            issue_node_certificate(&keys.node_ca, &csr, &decision(role, asked), t0()).unwrap();
        assert_eq!(
            lifetime(&parse(&issued.der)),
            want,
            "{role} asked {asked:?}"
        );
    }
    assert_eq!(
        issue_node_certificate(
            &keys.node_ca,
            &csr,
            &decision(NodeRole::Node, Some(Duration::ZERO)),
            t0()
        )
        .unwrap_err(),
        IssueError::NonPositiveLifetime
    );

    // A node CA with ten hours left caps a 24 h leaf at its own notAfter.
    let short = key_set_at(
        t0(),
        KeySetLifetimes {
            root: Duration::days(3650),
            intermediate: Duration::hours(10),
        },
    );
    let issued =
        issue_node_certificate(&short.node_ca, &csr, &decision(NodeRole::Node, None), t0())
            .unwrap();
    let cert = parse(&issued.der);
    assert_eq!(
        cert.validity().not_after.timestamp(),
        short.node_ca.not_after().unix_timestamp()
    );
    // (backdated from its issuance, as the CA was at pki init)
    assert_eq!(lifetime(&cert), 10 * 3600 + BACKDATE.whole_seconds());

    // ... and refuses once it has expired.
    let later = t0() + Duration::hours(11);
    assert!(matches!(
        issue_node_certificate(&short.node_ca, &csr, &decision(NodeRole::Node, None), later),
        Err(IssueError::Ca(CaError::IssuerExpired { .. }))
    ));
}

#[test]
fn pki_ca_never_outlives_root() {
    let keys = key_set_at(
        t0(),
        KeySetLifetimes {
            root: Duration::days(1),
            intermediate: Duration::days(30),
        },
    );
    assert_eq!(keys.node_ca.not_after(), keys.root_ca.not_after());
    assert_eq!(keys.serving_ca.not_after(), keys.root_ca.not_after());
    let node_ca = parse(keys.node_ca.cert_der());
    assert_eq!(
        node_ca.validity().not_after.timestamp(),
        t0().unix_timestamp() + 86_400
    );
    let bc = node_ca.basic_constraints().unwrap().unwrap().value;
    assert!(bc.ca);
    assert_eq!(bc.path_len_constraint, Some(0));
    // renewal keeps the key (and so the pin)
    let renewed = keys
        .root_ca
        .renew_node_ca(&keys.node_ca, t0() + Duration::hours(1), Duration::days(30))
        .unwrap();
    assert_eq!(renewed.public_key(), keys.node_ca.public_key());
    assert_ne!(renewed.cert_der(), keys.node_ca.cert_der());
}

#[test]
fn pki_csr_extensions_never_reach_the_certificate() {
    let keys = key_set_at(t0(), KeySetLifetimes::default());
    let kp = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, "evil");
    params
        .distinguished_name
        .push(DnType::OrganizationalUnitName, "bc-role:site");
    params.subject_alt_names = vec![
        SanType::URI(
            "spiffe://compute.example.com/site/eu-1/node/other"
                .try_into()
                .unwrap(),
        ),
        SanType::DnsName("gateway.compute.example.com".try_into().unwrap()),
        SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)),
    ];
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    params.custom_extensions = vec![rcgen::CustomExtension::from_oid_content(
        &[1, 3, 6, 1, 4, 1, 99999, 1],
        vec![0x05, 0x00],
    )];
    let der = params.serialize_request(&kp).unwrap().der().to_vec();
    let csr = VerifiedCsr::verify(&der).unwrap();
    let issued =
        issue_node_certificate(&keys.node_ca, &csr, &decision(NodeRole::Node, None), t0()).unwrap();
    let cert = parse(&issued.der);
    assert_eq!(
        uris(&cert),
        ["spiffe://compute.example.com/site/eu-1/node/node_01"]
    );
    assert_eq!(cert.subject().to_string(), "OU=bc-role:node");
    assert!(!cert.basic_constraints().unwrap().unwrap().value.ca);
    let eku = cert.extended_key_usage().unwrap().unwrap().value;
    assert!(eku.client_auth && !eku.server_auth);
    let oids: Vec<String> = cert
        .extensions()
        .iter()
        .map(|e| e.oid.to_id_string())
        .collect();
    assert!(
        !oids.contains(&"1.3.6.1.4.1.99999.1".to_string()),
        "{oids:?}"
    );
    let mut sorted = oids.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        [
            "2.5.29.14", // subject key identifier
            "2.5.29.15", // key usage
            "2.5.29.17", // subject alt name
            "2.5.29.19", // basic constraints
            "2.5.29.35", // authority key identifier
            "2.5.29.37", // extended key usage
        ]
    );
}

#[test]
fn pki_bad_csrs_are_refused() {
    let key = PrivateKey::generate(KeyRole::Node).unwrap();
    let mut der = build_csr(&key).unwrap();
    let last = der.len() - 1;
    der[last] ^= 0x01;
    assert_eq!(
        VerifiedCsr::verify(&der).unwrap_err(),
        CsrError::BadSignature
    );

    let p384 = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P384_SHA384).unwrap();
    let der = CertificateParams::default()
        .serialize_request(&p384)
        .unwrap()
        .der()
        .to_vec();
    assert!(matches!(
        VerifiedCsr::verify(&der).unwrap_err(),
        CsrError::WrongSignatureAlgorithm(_) | CsrError::WrongKeyType(_)
    ));

    let ed = KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
    let der = CertificateParams::default()
        .serialize_request(&ed)
        .unwrap()
        .der()
        .to_vec();
    assert!(matches!(
        VerifiedCsr::verify(&der).unwrap_err(),
        CsrError::WrongSignatureAlgorithm(_)
    ));

    assert_eq!(
        VerifiedCsr::verify(b"\x30\x03garbage").unwrap_err(),
        CsrError::Malformed
    );
    let mut trailing = build_csr(&key).unwrap();
    trailing.push(0);
    assert_eq!(
        VerifiedCsr::verify(&trailing).unwrap_err(),
        CsrError::Malformed
    );

    // only node keys make CSRs through the helper
    let ca_key = PrivateKey::generate(KeyRole::NodeCa).unwrap();
    assert!(build_csr(&ca_key).is_err());
}

fn cert_with(sans: Vec<SanType>, ous: &[&str]) -> Vec<u8> {
    let kp = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    for ou in ous {
        params
            .distinguished_name
            .push(DnType::OrganizationalUnitName, *ou);
    }
    params.subject_alt_names = sans;
    params.self_signed(&kp).unwrap().der().to_vec()
}

/// rcgen keeps one value per attribute type, so write the second role as a CN and then turn
/// that CN's OID (2.5.4.3) into OU's (2.5.4.11) in the DER. The signature no longer verifies,
/// which does not matter here: identity extraction reads the profile, the chain is checked
/// elsewhere.
fn two_role_cert(id: &str) -> Vec<u8> {
    let kp = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::OrganizationalUnitName, "bc-role:node");
    params
        .distinguished_name
        .push(DnType::CommonName, "bc-role:site");
    params.subject_alt_names = vec![uri(id)];
    let mut der = params.self_signed(&kp).unwrap().der().to_vec();
    let cn = [0x06, 0x03, 0x55, 0x04, 0x03];
    let mut patched = 0;
    for i in 0..der.len() - cn.len() {
        if der[i..i + cn.len()] == cn {
            der[i + 4] = 0x0b;
            patched += 1;
        }
    }
    assert_eq!(patched, 2, "issuer and subject");
    der
}

fn uri(u: &str) -> SanType {
    SanType::URI(u.try_into().unwrap())
}

#[test]
fn pki_identity_refusals() {
    let id = "spiffe://compute.example.com/site/eu-1/node/n1";
    let ok = cert_with(vec![uri(id)], &["bc-role:site"]);
    assert_eq!(
        NodeIdentity::from_leaf_der(&ok, &td()).unwrap().role,
        NodeRole::Site
    );

    let cases: Vec<(Vec<u8>, IdentityError)> = vec![
        (
            cert_with(vec![], &["bc-role:node"]),
            IdentityError::NotOneSpiffeId(0),
        ),
        (
            cert_with(
                vec![
                    uri(id),
                    uri("spiffe://compute.example.com/site/eu-1/node/n2"),
                ],
                &["bc-role:node"],
            ),
            IdentityError::NotOneSpiffeId(2),
        ),
        (
            cert_with(
                vec![uri("spiffe://staging.example.com/site/eu-1/node/n1")],
                &["bc-role:node"],
            ),
            IdentityError::ForeignTrustDomain {
                found: "staging.example.com".into(),
                expected: TD.into(),
            },
        ),
        (cert_with(vec![uri(id)], &[]), IdentityError::MissingRole),
        (two_role_cert(id), IdentityError::MultipleRoles(2)),
        (
            cert_with(
                vec![
                    uri(id),
                    SanType::DnsName("x.example.com".try_into().unwrap()),
                ],
                &["bc-role:node"],
            ),
            IdentityError::UnexpectedSan,
        ),
        (
            cert_with(
                vec![uri(id), uri("https://example.com/")],
                &["bc-role:node"],
            ),
            IdentityError::UnexpectedUri("https://example.com/".into()),
        ),
    ];
    for (der, want) in cases {
        assert_eq!(NodeIdentity::from_leaf_der(&der, &td()).unwrap_err(), want);
    }
    assert!(matches!(
        NodeIdentity::from_leaf_der(&cert_with(vec![uri(id)], &["bc-role:gateway"]), &td()),
        Err(IdentityError::BadRole(_))
    ));
    assert!(matches!(
        NodeIdentity::from_leaf_der(
            &cert_with(
                vec![uri("spiffe://compute.example.com/node/n1")],
                &["bc-role:node"]
            ),
            &td()
        ),
        Err(IdentityError::BadSpiffeId(_))
    ));
    assert_eq!(
        NodeIdentity::from_leaf_der(b"junk", &td()).unwrap_err(),
        IdentityError::Malformed
    );
}

#[test]
fn pki_decision_checks() {
    let keys = key_set_at(t0(), KeySetLifetimes::default());
    let (_, csr) = node_csr();
    let mut d = decision(NodeRole::Node, None);
    d.spiffe_id.trust_domain = TrustDomain::new("staging.example.com").unwrap();
    assert!(matches!(
        issue_node_certificate(&keys.node_ca, &csr, &d, t0()),
        Err(IssueError::TrustDomainMismatch { .. })
    ));
    let mut d = decision(NodeRole::Node, None);
    d.statements = (0..4)
        .map(|i| NodeKeyStatement::new(&format!("urn:bc:x:{i}")).unwrap())
        .collect();
    assert_eq!(
        issue_node_certificate(&keys.node_ca, &csr, &d, t0()).unwrap_err(),
        IssueError::TooManyStatements { max: 4 }
    );
    assert!(NodeKeyStatement::new("urn:bc:has space:x").is_err());
    assert!(NodeKeyStatement::new("urn:other:x:y").is_err());
    assert!(Serial::from_be_bytes(&[0, 0]).is_err());
    assert!(Serial::from_be_bytes(&[0x80; 20]).is_err());
    assert!(Serial::from_be_bytes(&[0x7f; 20]).is_ok());
}

fn openssl_verify(dir: &std::path::Path, purpose: &str) -> String {
    let out = std::process::Command::new("/usr/bin/openssl")
        .current_dir(dir)
        .args([
            "verify",
            "-purpose",
            purpose,
            "-CAfile",
            "root.pem",
            "-untrusted",
            "ca.pem",
            "leaf.pem",
        ])
        .output()
        .expect("run openssl");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn pem(der: &[u8]) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let lines: Vec<&str> = b64
        .as_bytes()
        .chunks(64)
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect();
    format!(
        "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
        lines.join("\n")
    )
}

#[test]
fn pki_openssl_verifies_node_and_serving_chains() {
    // openssl checks validity against the real clock, so the test (not the domain) reads it.
    let now = OffsetDateTime::now_utc() - Duration::minutes(1);
    let keys = key_set_at(now, KeySetLifetimes::default());
    let (_, csr) = node_csr();
    let leaf =
        issue_node_certificate(&keys.node_ca, &csr, &decision(NodeRole::Node, None), now).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("root.pem"), keys.root_ca.cert_pem()).unwrap();
    std::fs::write(dir.path().join("ca.pem"), keys.node_ca.cert_pem()).unwrap();
    std::fs::write(dir.path().join("leaf.pem"), pem(&leaf.der)).unwrap();
    // the exact command of the brief, with the node CA as the untrusted intermediate
    std::fs::copy(dir.path().join("ca.pem"), dir.path().join("nodeca.pem")).unwrap();
    let out = std::process::Command::new("/usr/bin/openssl")
        .current_dir(dir.path())
        .args([
            "verify",
            "-CAfile",
            "root.pem",
            "-untrusted",
            "nodeca.pem",
            "leaf.pem",
        ])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "leaf.pem: OK",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        openssl_verify(dir.path(), "sslclient").trim(),
        "leaf.pem: OK"
    );
    assert!(!openssl_verify(dir.path(), "sslserver").contains(": OK"));

    // the serving chain, with a key the CLI would generate
    let gw = PrivateKey::generate(KeyRole::Serving).unwrap();
    let serving = issue_serving_certificate(
        &keys.serving_ca,
        gw.public_key(),
        &ServingCertificateRequest {
            dns_names: vec!["gw.eu-1.compute.example.com".into()],
            ip_addresses: vec![IpAddr::V4(Ipv4Addr::LOCALHOST)],
            role: ServingRole::Gateway,
            serial: Serial::generate().unwrap(),
            lifetime: Duration::days(14),
        },
        now,
    )
    .unwrap();
    let cert = parse(&serving.der);
    // A gateway's serving certificate lives at most 7 days, whatever was asked.
    assert_eq!(lifetime(&cert), 7 * 86_400);
    assert_eq!(cert.subject().to_string(), "OU=bc-role:gateway");
    std::fs::write(dir.path().join("ca.pem"), keys.serving_ca.cert_pem()).unwrap();
    std::fs::write(dir.path().join("leaf.pem"), pem(&serving.der)).unwrap();
    assert_eq!(
        openssl_verify(dir.path(), "sslserver").trim(),
        "leaf.pem: OK"
    );
    // a leaf from the serving CA does not chain to the node CA
    std::fs::write(dir.path().join("ca.pem"), keys.node_ca.cert_pem()).unwrap();
    assert!(!openssl_verify(dir.path(), "sslserver").contains(": OK"));
}

#[test]
fn pki_serving_request_checks() {
    let keys = key_set_at(t0(), KeySetLifetimes::default());
    let gw = PrivateKey::generate(KeyRole::Serving).unwrap();
    let req = |dns: &str, days| ServingCertificateRequest {
        dns_names: vec![dns.into()],
        ip_addresses: vec![],
        role: ServingRole::Internal,
        serial: Serial::generate().unwrap(),
        lifetime: Duration::days(days),
    };
    let issued = issue_serving_certificate(
        &keys.serving_ca,
        gw.public_key(),
        &req("api.example.com", 400),
        t0(),
    )
    .unwrap();
    assert_eq!(lifetime(&parse(&issued.der)), 90 * 86_400);
    for bad in [
        "",
        "UPPER.example.com",
        "-a.example.com",
        "a..b",
        "spaces here",
    ] {
        assert!(
            issue_serving_certificate(&keys.serving_ca, gw.public_key(), &req(bad, 1), t0())
                .is_err(),
            "{bad:?}"
        );
    }
}

/// Found by the `node_identity` fuzz target: a certificate whose URI SAN has a multi-byte UTF-8
/// character across byte 9 (the length of `spiffe://`) panicked the SPIFFE-URI check (a string
/// slice inside a character) instead of being read or refused.
#[test]
fn a_uri_san_with_a_character_across_the_scheme_length_does_not_panic() {
    let der = include_bytes!("data/fuzz/node_identity_uri_not_char_boundary.der");
    let td = TrustDomain::new("fuzz.example.com").unwrap();
    assert!(NodeIdentity::from_leaf_der(der, &td).is_err());
}
