//! Operator certificates: the profile issued, and one test per refusal of the reader.

use rcgen::{
    CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, KeyUsagePurpose,
    SanType,
};
use time::{Duration, OffsetDateTime};

use super::*;
use crate::pki::keys::{KeyRole, PrivateKey};
use crate::pki::keyset::{KeySet, KeySetLifetimes};

fn td(name: &str) -> TrustDomain {
    TrustDomain::new(name).expect("trust domain")
}

fn keys(domain: &str) -> KeySet {
    KeySet::generate(
        td(domain),
        OffsetDateTime::now_utc(),
        KeySetLifetimes::default(),
    )
    .expect("key set")
}

fn operator_key() -> PrivateKey {
    PrivateKey::generate(KeyRole::Node).expect("key")
}

fn issue(
    keys: &KeySet,
    name: &str,
    role: OperatorRole,
    days: i64,
) -> Result<IssuedCertificate, OperatorCertError> {
    let ca = keys.operator_ca.as_ref().expect("operator CA");
    issue_operator_certificate(
        ca,
        &OperatorName::new(name).expect("name"),
        role,
        operator_key().public_key(),
        Duration::days(days),
        OffsetDateTime::now_utc(),
    )
}

/// A certificate from the operator CA with a hand-made profile.
fn crafted(
    keys: &KeySet,
    subject: &[(DnType, &str)],
    uris: &[&str],
    eku: Vec<ExtendedKeyUsagePurpose>,
) -> Vec<u8> {
    let ca = keys.operator_ca.as_ref().expect("operator CA");
    let now = OffsetDateTime::now_utc();
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    for (kind, value) in subject {
        dn.push(kind.clone(), *value);
    }
    params.distinguished_name = dn;
    params.not_before = now - Duration::minutes(1);
    params.not_after = now + Duration::days(1);
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = eku;
    params.subject_alt_names = uris
        .iter()
        .map(|u| SanType::URI((*u).to_string().try_into().expect("ia5")))
        .collect();
    ca.sign(&params, operator_key().public_key(), now)
        .expect("sign")
}

#[test]
fn an_issued_certificate_reads_back_as_its_operator() {
    let keys = keys("ops.example.com");
    for role in crate::operator::ALL_ROLES {
        let issued = issue(&keys, "alice", role, 30).expect("issued");
        let id =
            OperatorIdentity::from_leaf_der(&issued.der, &keys.trust_domain).expect("identity");
        assert_eq!(id.name, "alice");
        assert_eq!(id.spiffe_id, "spiffe://ops.example.com/operator/alice");
        assert_eq!(id.role, role);
        assert_eq!(id.serial, issued.serial);
        assert_eq!(id.not_after, issued.not_after);
        assert!(issued.not_after - issued.not_before <= OPERATOR_CERT_MAX_LIFETIME);
        assert!(crate::pki::issued_by(
            &issued.der,
            keys.operator_ca.as_ref().expect("ca").cert_der()
        ));
    }
}

#[test]
fn a_lifetime_over_ninety_days_or_not_positive_is_refused() {
    let keys = keys("ops.example.com");
    assert!(issue(&keys, "bob", OperatorRole::Admin, 90).is_ok());
    for days in [91, 0, -1] {
        let err = issue(&keys, "bob", OperatorRole::Admin, days).expect_err("refused");
        assert_eq!(err, OperatorCertError::Lifetime { asked_days: days });
        assert_eq!(
            err.to_string(),
            format!(
                "an operator certificate lives 1 second to 90 days; {days} days were asked for"
            )
        );
    }
}

#[test]
fn another_trust_domain_is_refused() {
    let keys = keys("ops.example.com");
    let issued = issue(&keys, "alice", OperatorRole::Admin, 1).expect("issued");
    let err = OperatorIdentity::from_leaf_der(&issued.der, &td("other.example.com"))
        .expect_err("refused");
    assert_eq!(
        err.to_string(),
        "the operator certificate is for trust domain ops.example.com, this deployment is other.example.com"
    );
}

#[test]
fn a_spiffe_id_that_is_not_an_operator_s_is_refused() {
    let keys = keys("ops.example.com");
    for uri in [
        "spiffe://ops.example.com/site/s1/node/n1",
        "spiffe://ops.example.com/operator/Alice",
        "spiffe://ops.example.com/operator/alice/x",
        "https://ops.example.com/operator/alice",
    ] {
        let der = crafted(
            &keys,
            &[
                (DnType::CommonName, "alice"),
                (DnType::OrganizationalUnitName, "bc-role:admin"),
            ],
            &[uri],
            vec![ExtendedKeyUsagePurpose::ClientAuth],
        );
        let err = OperatorIdentity::from_leaf_der(&der, &keys.trust_domain).expect_err("refused");
        assert_eq!(
            err.to_string(),
            format!(
                "{uri:?} is not an operator SPIFFE ID (spiffe://<trust domain>/operator/<name>)"
            )
        );
    }
}

#[test]
fn an_unknown_role_is_refused() {
    let keys = keys("ops.example.com");
    let der = crafted(
        &keys,
        &[
            (DnType::CommonName, "alice"),
            (DnType::OrganizationalUnitName, "bc-role:node"),
        ],
        &["spiffe://ops.example.com/operator/alice"],
        vec![ExtendedKeyUsagePurpose::ClientAuth],
    );
    let err = OperatorIdentity::from_leaf_der(&der, &keys.trust_domain).expect_err("refused");
    assert_eq!(
        err.to_string(),
        "the operator certificate's role: unknown operator role \"node\": one of admin, operator, approver, auditor"
    );
}

#[test]
fn a_missing_role_ou_is_refused() {
    let keys = keys("ops.example.com");
    let der = crafted(
        &keys,
        &[
            (DnType::CommonName, "alice"),
            (DnType::OrganizationalUnitName, "admin"),
        ],
        &["spiffe://ops.example.com/operator/alice"],
        vec![ExtendedKeyUsagePurpose::ClientAuth],
    );
    let err = OperatorIdentity::from_leaf_der(&der, &keys.trust_domain).expect_err("refused");
    assert_eq!(err, OperatorIdentityError::MissingRole);
    assert_eq!(
        err.to_string(),
        "the operator certificate's subject has no OU=bc-role:<role>"
    );
}

#[test]
fn a_wrong_cn_a_serving_eku_and_extra_sans_are_refused() {
    let keys = keys("ops.example.com");
    let id = "spiffe://ops.example.com/operator/alice";
    let admin = (DnType::OrganizationalUnitName, "bc-role:admin");
    let client = || vec![ExtendedKeyUsagePurpose::ClientAuth];
    // (rcgen keeps one attribute per type, so two OUs cannot be made here; the reader counts
    // them like the agent reader does.)
    let cases: Vec<(Vec<u8>, OperatorIdentityError)> = vec![
        (
            crafted(
                &keys,
                &[(DnType::CommonName, "bob"), admin.clone()],
                &[id],
                client(),
            ),
            OperatorIdentityError::CommonNameMismatch {
                expected: "alice".into(),
            },
        ),
        (
            crafted(
                &keys,
                &[(DnType::CommonName, "alice"), admin.clone()],
                &[id],
                vec![
                    ExtendedKeyUsagePurpose::ClientAuth,
                    ExtendedKeyUsagePurpose::ServerAuth,
                ],
            ),
            OperatorIdentityError::NotClientAuth,
        ),
        (
            crafted(
                &keys,
                &[(DnType::CommonName, "alice"), admin.clone()],
                &[id],
                vec![],
            ),
            OperatorIdentityError::NotClientAuth,
        ),
        (
            crafted(
                &keys,
                &[(DnType::CommonName, "alice"), admin.clone()],
                &[id, id],
                client(),
            ),
            OperatorIdentityError::NotOneUri,
        ),
        (
            crafted(
                &keys,
                &[(DnType::CommonName, "alice"), admin],
                &[],
                client(),
            ),
            OperatorIdentityError::NotOneUri,
        ),
    ];
    for (der, expected) in cases {
        assert_eq!(
            OperatorIdentity::from_leaf_der(&der, &keys.trust_domain),
            Err(expected)
        );
    }
    assert_eq!(
        OperatorIdentity::from_leaf_der(b"junk", &keys.trust_domain),
        Err(OperatorIdentityError::Malformed)
    );
    let ca_der = keys.operator_ca.as_ref().expect("ca").cert_der().to_vec();
    assert_eq!(
        OperatorIdentity::from_leaf_der(&ca_der, &keys.trust_domain),
        Err(OperatorIdentityError::IsCa)
    );
}
