//! The `cloud-iid` attestor on documents the test signed with keys it made: each provider
//! (AWS, GCP, Azure, OIDC) admits with the registered account's placement and refuses each
//! reason that applies to it, by altering exactly one thing.

use std::collections::BTreeMap;
use std::time::Duration;

use domain::attest::cloud_iid::{
    cloud_iid_subject, AwsConfig, AzureConfig, CloudIidAttestor, CloudIidConfig,
    CloudIidConfigError, CloudIidEvidence, CloudIidRefusal, CloudProvider, GcpConfig,
    OidcIssuerConfig, CLOUD_IID_ATTESTOR,
};
use domain::attest::{AttestRequest, Attestor, EntryState, FactKey, Facts, SingleUse, Verdict};
use domain::identity::{claims_digests, ClaimsDigests, HardwareClaims};
use domain::pki::{build_csr, KeyRole, NodeRole, PrivateKey, VerifiedCsr};
use time::OffsetDateTime;

use crate::cloud_iid_support::{
    aws_document, azure_content, azure_document, gcp_claims, key, other_key, secs,
};

const AUDIENCE: &str = "https://bc.example.com";
const ISSUER: &str = "https://issuer.example";

fn config() -> CloudIidConfig {
    CloudIidConfig {
        max_age: Duration::from_secs(600),
        aws: Some(AwsConfig {
            certificates: vec![key().certificate("aws-us-east-1")],
        }),
        gcp: Some(GcpConfig {
            jwks: key().jwks(),
            audience: AUDIENCE.into(),
        }),
        azure: Some(AzureConfig {
            certificates: vec![key().certificate("metadata.azure.com")],
        }),
        oidc: vec![OidcIssuerConfig {
            issuer: ISSUER.into(),
            jwks: key().jwks(),
            audience: "bc".into(),
        }],
    }
}

struct Machine {
    csr: VerifiedCsr,
    claims: HardwareClaims,
    digests: ClaimsDigests,
    now: OffsetDateTime,
}

impl Machine {
    fn new() -> Machine {
        let key = PrivateKey::generate(KeyRole::Node).expect("a node key");
        let csr = VerifiedCsr::verify(&build_csr(&key).expect("a CSR")).expect("verifies");
        let claims = HardwareClaims::default();
        let digests = claims_digests(&claims);
        Machine {
            csr,
            claims,
            digests,
            now: OffsetDateTime::now_utc(),
        }
    }

    fn request<'a>(&'a self, evidence: &'a [u8], role: NodeRole) -> AttestRequest<'a> {
        AttestRequest {
            role,
            csr: &self.csr,
            claims: &self.claims,
            digests: &self.digests,
            evidence,
            token: None,
            now: self.now,
            entropy: &const { domain::attest::Entropy::from_seed([7; 32]) },
        }
    }
}

fn account(role: NodeRole) -> EntryState {
    EntryState {
        entry_id: "cloud_01".into(),
        tenant_id: "acme".into(),
        site_id: "eu-1".into(),
        pool_id: "pool_web".into(),
        role: Some(role),
    }
}

/// What a join with `evidence` ends in: the result's placement or the refusal's text, given an
/// account registered (with `role`) or not, and the instance used before or not.
fn run(evidence: &[u8], registered: Option<NodeRole>, used: bool) -> Result<Admitted, String> {
    run_with(&config(), evidence, registered, used)
}

#[derive(Debug, PartialEq, Eq)]
struct Admitted {
    placement: (String, String, String, NodeRole),
    single_use: Vec<SingleUse>,
}

fn run_with(
    config: &CloudIidConfig,
    evidence: &[u8],
    registered: Option<NodeRole>,
    used: bool,
) -> Result<Admitted, String> {
    let attestor = CloudIidAttestor::new(config.clone()).expect("a valid configuration");
    let m = Machine::new();
    let request = m.request(evidence, NodeRole::Node);
    let planned = attestor.plan(&request).map_err(|r| r.text())?;
    let keys = &planned.facts;
    let mut facts = Facts::default();
    for k in keys {
        match k {
            FactKey::Entry { list, key } => {
                if let Some(role) = registered {
                    facts
                        .entries
                        .insert((list.clone(), key.clone()), account(role));
                }
            }
            FactKey::Use { attestor, subject } if used => {
                facts.uses.insert((attestor.clone(), *subject));
            }
            _ => {}
        }
    }
    assert_eq!(
        keys.len(),
        2,
        "plan names the account and the use: {keys:?}"
    );
    match attestor.verify(&request, &planned.plan, &facts) {
        Verdict::Admit(r) => Ok(Admitted {
            placement: (r.tenant_id, r.site_id, r.pool_id, r.role),
            single_use: r.single_use,
        }),
        Verdict::Refuse(r) => Err(r.text()),
        Verdict::Challenge(_) => panic!("cloud-iid never challenges"),
    }
}

fn ev(provider: &str, document: String, signature: Option<String>) -> Vec<u8> {
    CloudIidEvidence {
        provider: provider.into(),
        document,
        signature,
    }
    .to_bytes()
}

fn now() -> OffsetDateTime {
    OffsetDateTime::now_utc()
}

fn gcp(iat: i64) -> Vec<u8> {
    ev(
        "gcp",
        key().jwt(&gcp_claims(AUDIENCE, "proj-1", "4711", iat)),
        None,
    )
}

fn aws_signed(document: String, signer: &crate::cloud_iid_support::CloudKey) -> Vec<u8> {
    use base64::Engine as _;
    let signature =
        base64::engine::general_purpose::STANDARD.encode(signer.sign(document.as_bytes()));
    ev("aws", document, Some(signature))
}

fn aws(pending: OffsetDateTime) -> Vec<u8> {
    aws_signed(aws_document("123456789012", "i-0abc", pending), key())
}

fn azure(created: OffsetDateTime) -> Vec<u8> {
    let content = azure_content("sub-1", "vm-1", created);
    ev(
        "azure",
        azure_document(&content, key(), &key().certificate("metadata.azure.com")),
        None,
    )
}

fn oidc_claims(iss: &str, aud: &str, iat: i64) -> serde_json::Value {
    serde_json::json!({"iss": iss, "aud": aud, "sub": "runner-7", "iat": iat, "exp": iat + 600})
}

fn oidc(iat: i64) -> Vec<u8> {
    ev("oidc", key().jwt(&oidc_claims(ISSUER, "bc", iat)), None)
}

fn refused(reason: CloudIidRefusal) -> Result<Admitted, String> {
    Err(reason.to_string())
}

const OLD: time::Duration = time::Duration::minutes(11);
const AHEAD: time::Duration = time::Duration::minutes(5);

#[test]
fn each_provider_admits_with_the_accounts_placement_and_one_use_forever() {
    let cases: [(Vec<u8>, CloudProvider, &str, &str); 4] = [
        (gcp(secs(now())), CloudProvider::Gcp, "proj-1", "4711"),
        (aws(now()), CloudProvider::Aws, "123456789012", "i-0abc"),
        (azure(now()), CloudProvider::Azure, "sub-1", "vm-1"),
        (oidc(secs(now())), CloudProvider::Oidc, ISSUER, "runner-7"),
    ];
    for (evidence, provider, account, instance) in cases {
        let admitted = run(&evidence, Some(NodeRole::Node), false).expect("admitted");
        assert_eq!(
            admitted.placement,
            (
                "acme".into(),
                "eu-1".into(),
                "pool_web".into(),
                NodeRole::Node
            )
        );
        assert_eq!(
            admitted.single_use,
            vec![SingleUse {
                attestor: CLOUD_IID_ATTESTOR.into(),
                subject: cloud_iid_subject(provider, account, instance),
                expires_at_us: None,
                reason_if_used: "instance-reused".into(),
            }],
            "{provider}"
        );
    }
}

#[test]
fn malformed_for_each_provider() {
    use CloudIidRefusal::Malformed;
    assert_eq!(run(b"not json", None, false), refused(Malformed));
    assert_eq!(
        run(&ev("gcp", "a.b".into(), None), None, false),
        refused(Malformed)
    );
    assert_eq!(
        run(&ev("oidc", "x".into(), None), None, false),
        refused(Malformed)
    );
    let doc = aws_document("123456789012", "i-0abc", now());
    assert_eq!(run(&ev("aws", doc, None), None, false), refused(Malformed));
    assert_eq!(
        run(&ev("azure", "!!".into(), None), None, false),
        refused(Malformed)
    );
    // Signed, but without the instance's claims.
    let mut claims = gcp_claims(AUDIENCE, "proj-1", "4711", secs(now()));
    claims["google"] = serde_json::json!({});
    assert_eq!(
        run(&ev("gcp", key().jwt(&claims), None), None, false),
        refused(Malformed)
    );
}

#[test]
fn unknown_provider_names_and_unconfigured_providers() {
    use CloudIidRefusal::UnknownProvider;
    assert_eq!(
        run(&ev("ibm", "x".into(), None), None, false),
        refused(UnknownProvider)
    );
    let only_aws = CloudIidConfig {
        gcp: None,
        azure: None,
        oidc: Vec::new(),
        ..config()
    };
    for evidence in [gcp(secs(now())), azure(now()), oidc(secs(now()))] {
        assert_eq!(
            run_with(&only_aws, &evidence, None, false),
            refused(UnknownProvider)
        );
    }
    let only_gcp = CloudIidConfig {
        aws: None,
        ..config()
    };
    assert_eq!(
        run_with(&only_gcp, &aws(now()), None, false),
        refused(UnknownProvider)
    );
}

#[test]
fn signature_for_each_provider() {
    use CloudIidRefusal::Signature;
    let other = other_key();
    let gcp = ev(
        "gcp",
        other.jwt(&gcp_claims(AUDIENCE, "p", "1", secs(now()))),
        None,
    );
    assert_eq!(run(&gcp, None, false), refused(Signature));
    let oidc = ev(
        "oidc",
        other.jwt(&oidc_claims(ISSUER, "bc", secs(now()))),
        None,
    );
    assert_eq!(run(&oidc, None, false), refused(Signature));
    let aws = aws_signed(aws_document("1", "i-1", now()), other);
    assert_eq!(run(&aws, None, false), refused(Signature));
    // The document altered after signing.
    let doc = aws_document("1", "i-1", now());
    let mut tampered: serde_json::Value = serde_json::from_slice(&aws_signed(doc, key())).unwrap();
    tampered["document"] = aws_document("2", "i-1", now()).into();
    assert_eq!(
        run(&serde_json::to_vec(&tampered).unwrap(), None, false),
        refused(Signature)
    );
    // Azure: signed by a key whose certificate nobody configured.
    let content = azure_content("sub-1", "vm-1", now());
    let azure = ev(
        "azure",
        azure_document(&content, other, &other.certificate("metadata.azure.com")),
        None,
    );
    assert_eq!(run(&azure, None, false), refused(Signature));
}

#[test]
fn wrong_issuer_for_gcp_and_oidc() {
    use CloudIidRefusal::WrongIssuer;
    let mut claims = gcp_claims(AUDIENCE, "p", "1", secs(now()));
    claims["iss"] = "https://evil.example".into();
    assert_eq!(
        run(&ev("gcp", key().jwt(&claims), None), None, false),
        refused(WrongIssuer)
    );
    let oidc = ev(
        "oidc",
        key().jwt(&oidc_claims("https://other", "bc", secs(now()))),
        None,
    );
    assert_eq!(run(&oidc, None, false), refused(WrongIssuer));
}

#[test]
fn wrong_audience_for_gcp_and_oidc() {
    use CloudIidRefusal::WrongAudience;
    let gcp = ev(
        "gcp",
        key().jwt(&gcp_claims("https://other", "p", "1", secs(now()))),
        None,
    );
    assert_eq!(run(&gcp, None, false), refused(WrongAudience));
    let oidc = ev(
        "oidc",
        key().jwt(&oidc_claims(ISSUER, "other", secs(now()))),
        None,
    );
    assert_eq!(run(&oidc, None, false), refused(WrongAudience));
}

#[test]
fn document_too_old_for_the_providers_whose_document_is_issued_per_request() {
    use CloudIidRefusal::DocumentTooOld;
    let old = now() - OLD;
    for evidence in [gcp(secs(old)), azure(old), oidc(secs(old))] {
        assert_eq!(
            run(&evidence, Some(NodeRole::Node), false),
            refused(DocumentTooOld)
        );
    }
    // A configured max_age of 20 minutes admits the same 11-minute-old document.
    let lenient = CloudIidConfig {
        max_age: Duration::from_secs(1200),
        ..config()
    };
    assert!(run_with(&lenient, &gcp(secs(old)), Some(NodeRole::Node), false).is_ok());
}

/// An AWS document's `pendingTime` is when the instance launched, not when the document was
/// read: the spec ages identity tokens (GCP, OIDC) only, and an instance admits one join ever
/// whatever its age (issue 40, item 11).
#[test]
fn an_aws_document_is_admitted_whatever_the_instance_s_age() {
    let launched = now() - time::Duration::days(30);
    assert!(run(&aws(launched), Some(NodeRole::Node), false).is_ok());
    assert_eq!(
        run(&aws(launched), Some(NodeRole::Node), true),
        refused(CloudIidRefusal::InstanceReused)
    );
}

/// A token whose `nbf` is still ahead (RFC 7519 section 4.1.5) is refused before it spends the
/// instance's one join: issued now, valid only in five minutes (issue 40, item 11).
#[test]
fn a_token_not_valid_before_a_future_time_is_refused_for_gcp_and_oidc() {
    let iat = secs(now());
    let nbf = secs(now() + AHEAD);
    let mut gcp_token = gcp_claims(AUDIENCE, "proj-1", "4711", iat);
    gcp_token["nbf"] = serde_json::json!(nbf);
    let mut oidc_token = oidc_claims(ISSUER, "bc", iat);
    oidc_token["nbf"] = serde_json::json!(nbf);
    for evidence in [
        ev("gcp", key().jwt(&gcp_token), None),
        ev("oidc", key().jwt(&oidc_token), None),
    ] {
        assert_eq!(
            run(&evidence, Some(NodeRole::Node), false),
            refused(CloudIidRefusal::DocumentFromFuture)
        );
    }
    // Within the minute of skew the issue time is allowed, the token is admitted.
    let mut near = oidc_claims(ISSUER, "bc", iat);
    near["nbf"] = serde_json::json!(iat + 30);
    assert!(run(
        &ev("oidc", key().jwt(&near), None),
        Some(NodeRole::Node),
        false
    )
    .is_ok());
}

#[test]
fn document_from_future_for_each_provider() {
    use CloudIidRefusal::DocumentFromFuture;
    let ahead = now() + AHEAD;
    for evidence in [
        gcp(secs(ahead)),
        aws(ahead),
        azure(ahead),
        oidc(secs(ahead)),
    ] {
        assert_eq!(
            run(&evidence, Some(NodeRole::Node), false),
            refused(DocumentFromFuture)
        );
    }
}

fn all_fresh() -> [Vec<u8>; 4] {
    [
        gcp(secs(now())),
        aws(now()),
        azure(now()),
        oidc(secs(now())),
    ]
}

#[test]
fn unknown_instance_for_each_provider() {
    for evidence in all_fresh() {
        assert_eq!(
            run(&evidence, None, false),
            refused(CloudIidRefusal::UnknownInstance)
        );
    }
}

#[test]
fn instance_reused_for_each_provider() {
    for evidence in all_fresh() {
        assert_eq!(
            run(&evidence, Some(NodeRole::Node), true),
            refused(CloudIidRefusal::InstanceReused)
        );
    }
}

#[test]
fn wrong_role_for_each_provider() {
    for evidence in all_fresh() {
        assert_eq!(
            run(&evidence, Some(NodeRole::Site), false),
            refused(CloudIidRefusal::WrongRole)
        );
    }
}

#[test]
fn every_reason_is_listed_once_and_tested() {
    let reasons: BTreeMap<String, ()> = CloudIidRefusal::ALL
        .iter()
        .map(|r| (r.reason(), ()))
        .collect();
    assert_eq!(reasons.len(), 10);
    assert!(reasons.contains_key("instance-reused"));
}

#[test]
fn a_configuration_that_cannot_verify_is_refused_at_start() {
    let bad_jwks = CloudIidConfig {
        gcp: Some(GcpConfig {
            jwks: b"{\"keys\":[]}".to_vec(),
            audience: AUDIENCE.into(),
        }),
        ..config()
    };
    assert_eq!(
        CloudIidAttestor::new(bad_jwks).err(),
        Some(CloudIidConfigError::Jwks("gcp".into()))
    );
    let bad_cert = CloudIidConfig {
        aws: Some(AwsConfig {
            certificates: vec![b"nope".to_vec()],
        }),
        ..config()
    };
    assert_eq!(
        CloudIidAttestor::new(bad_cert).err(),
        Some(CloudIidConfigError::Certificate {
            provider: "aws",
            index: 0
        })
    );
}
