//! The `discovery` attestor, pure (spec 000 "discovery"): one test per refusal reason, in the
//! attestor's order, the admitted result's fields, the approval modes, the 15-minute cap, and
//! the admission step's ramdisk certificate (lifetime, allowed kinds). Facts are built by hand;
//! assertions are signed by a real site agent key whose certificate the test node CA issued.

use domain::attest::discovery::{
    assertion_subject, assertion_valid_until_ms, DiscoveryApproval, DiscoveryAssertion,
    DiscoveryAttestor, DiscoveryConfig, DiscoveryRefusal, SignedDiscoveryAssertion,
    DEFAULT_ALLOWED_KINDS, DISCOVERY_ATTESTOR, MAX_ASSERTION_AGE_MS,
};
use domain::attest::{
    decide_admission, Admission, AdmissionCommand, AdmissionFacts, AttestRequest,
    AttestationResult, Attestor, AttestorRefusal, BootEntryState, FactKey, Facts, NodeKeyStatement,
    SiteLeaseState, Verdict,
};
use domain::identity::{
    claims_digests, unix_us, CertState, ExpectBinding, HardwareClaims, IdentityEvent, JoinContext,
    NodeState, NodeStatus, TokenRole, TokenState,
};
use domain::pki::{
    build_csr, issue_node_certificate, KeyRole, KeySet, KeySetLifetimes, NodeCertificateDecision,
    NodeId, NodeRole, PrivateKey, Serial, SiteId, SpiffeId, TokenSecret, TrustDomain, VerifiedCsr,
};
use time::OffsetDateTime;

const SITE: &str = "fra1";
const SIGNER: &str = "node_site1";
const MAC: &str = "aa:bb:cc:dd:ee:01";
const UUID: &str = "4c4c4544-0042-3510-8052-b4c04f384d32";
const ENTRY: &str = "boot_1";

struct World {
    keys: KeySet,
    site_key: PrivateKey,
    site_cert: Vec<u8>,
    site_serial: String,
    secret: TokenSecret,
    facts: Facts,
    assertion: DiscoveryAssertion,
    claims: HardwareClaims,
    csr: VerifiedCsr,
    now: OffsetDateTime,
    config: DiscoveryConfig,
}

fn t0() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_790_000_000).unwrap()
}

fn ms(t: OffsetDateTime) -> i64 {
    unix_us(t) / 1000
}

fn site_certificate(keys: &KeySet, key: &PrivateKey, node: &str) -> (Vec<u8>, String, i64) {
    let csr = VerifiedCsr::verify(&build_csr(key).unwrap()).unwrap();
    let decision = NodeCertificateDecision {
        spiffe_id: SpiffeId::new(
            keys.trust_domain.clone(),
            SiteId::new(SITE).unwrap(),
            NodeId::new(node).unwrap(),
        ),
        role: NodeRole::Site,
        serial: Serial::generate().unwrap(),
        requested_lifetime: None,
        statements: Vec::new(),
    };
    // Issued a minute before the join.
    let issued = issue_node_certificate(
        &keys.node_ca,
        &csr,
        &decision,
        t0() - time::Duration::minutes(1),
    )
    .unwrap();
    (
        issued.der,
        issued.serial.to_hex(),
        unix_us(issued.not_after),
    )
}

fn world() -> World {
    let now = t0();
    let td = TrustDomain::new("compute.example.com").unwrap();
    let keys = KeySet::generate(
        td,
        now - time::Duration::hours(1),
        KeySetLifetimes::default(),
    )
    .unwrap();
    let site_key = PrivateKey::generate(KeyRole::Node).unwrap();
    let (site_cert, site_serial, not_after_us) = site_certificate(&keys, &site_key, SIGNER);
    let secret = TokenSecret::generate().unwrap();
    let token = TokenState {
        token_id: "tok_d1".into(),
        tenant_id: "acme".into(),
        site_id: SITE.into(),
        pool_id: "commission".into(),
        role: TokenRole::Discovery,
        uses_total: 1,
        uses_left: 1,
        expires_at_us: unix_us(now + time::Duration::minutes(10)),
        secret_hash: secret.hash(),
        expect: ExpectBinding {
            product_uuid: None,
            mac: Some(MAC.to_uppercase()),
        },
        allow_reclaim: false,
        reclaim_node_id: None,
        for_node_id: None,
        require_approval: false,
        revoked: false,
    };
    let mut facts = Facts {
        tokens: vec![token],
        ..Facts::default()
    };
    facts.nodes.insert(
        SIGNER.into(),
        NodeState {
            node_id: SIGNER.into(),
            tenant_id: "acme".into(),
            site_id: SITE.into(),
            pool_id: "infra".into(),
            role: NodeRole::Site,
            status: NodeStatus::Active,
            identity_generation: 1,
            hardware_key_sha256: None,
            product_uuid_sha256: None,
        },
    );
    facts.certificates.insert(
        site_serial.clone(),
        CertState {
            serial: site_serial.clone(),
            node_id: SIGNER.into(),
            identity_generation: 1,
            der: site_cert.clone(),
            not_after_us,
            revoked: false,
            allowed_kinds: Vec::new(),
        },
    );
    facts.site_leases.insert(
        SITE.into(),
        SiteLeaseState {
            site_id: SITE.into(),
            holder_node_id: Some(SIGNER.into()),
            epoch: 4,
            expires_at_us: unix_us(now + time::Duration::seconds(40)),
        },
    );
    facts.boot_entries.insert(
        ENTRY.into(),
        BootEntryState {
            entry_id: ENTRY.into(),
            site_id: SITE.into(),
            tenant_id: "acme".into(),
            mac: MAC.into(),
            product_uuid: Some(UUID.into()),
            pool_id: "commission".into(),
            not_after_us: unix_us(now + time::Duration::hours(1)),
            removed: false,
        },
    );
    let issued_at = now - time::Duration::seconds(30);
    let assertion = DiscoveryAssertion {
        site_id: SITE.into(),
        signer_node_id: SIGNER.into(),
        lease_epoch: 4,
        mac: MAC.into(),
        ip: "10.0.0.7".into(),
        product_uuid: UUID.into(),
        workflow_id: ENTRY.into(),
        issued_at_ms: ms(issued_at),
        not_after_ms: ms(issued_at + time::Duration::minutes(15)),
    };
    let claims = HardwareClaims {
        product_uuid: Some(UUID.to_uppercase()),
        macs: vec!["AA-BB-CC-DD-EE-01".into(), "aa:bb:cc:dd:ee:02".into()],
        hardware_key: None,
    };
    let ramdisk_key = PrivateKey::generate(KeyRole::Node).unwrap();
    let csr = VerifiedCsr::verify(&build_csr(&ramdisk_key).unwrap()).unwrap();
    World {
        keys,
        site_key,
        site_cert,
        site_serial,
        secret,
        facts,
        assertion,
        claims,
        csr,
        now,
        config: DiscoveryConfig::default(),
    }
}

impl World {
    fn signed(&self) -> SignedDiscoveryAssertion {
        SignedDiscoveryAssertion::sign(&self.assertion, self.site_cert.clone(), &self.site_key)
            .unwrap()
    }

    fn attestor(&self) -> DiscoveryAttestor {
        DiscoveryAttestor::new(self.keys.trust_domain.clone(), self.config.clone())
    }

    fn token(&mut self) -> &mut TokenState {
        &mut self.facts.tokens[0]
    }

    fn signer(&mut self) -> &mut NodeState {
        self.facts.nodes.get_mut(SIGNER).unwrap()
    }

    fn signer_cert(&mut self) -> &mut CertState {
        let serial = self.site_serial.clone();
        self.facts.certificates.get_mut(&serial).unwrap()
    }

    fn lease(&mut self) -> &mut SiteLeaseState {
        self.facts.site_leases.get_mut(SITE).unwrap()
    }

    /// Plans and verifies `evidence` with `token`.
    fn run_with(
        &self,
        evidence: &[u8],
        token: Option<&TokenSecret>,
    ) -> Result<Box<AttestationResult>, AttestorRefusal> {
        let digests = claims_digests(&self.claims);
        let request = AttestRequest {
            role: NodeRole::Ramdisk,
            csr: &self.csr,
            claims: &self.claims,
            digests: &digests,
            evidence,
            token,
            now: self.now,
        };
        let attestor = self.attestor();
        attestor.plan(&request)?;
        match attestor.verify(&request, &self.facts) {
            Verdict::Admit(r) => Ok(r),
            Verdict::Refuse(r) => Err(r),
            Verdict::Challenge(_) => panic!("discovery never challenges"),
        }
    }

    fn run(&self) -> Result<Box<AttestationResult>, AttestorRefusal> {
        self.run_with(&self.signed().to_bytes(), Some(&self.secret))
    }

    /// The refusal's text, which must be `discovery:<reason>`.
    fn refused(&self) -> String {
        match self.run() {
            Ok(r) => panic!("admitted: {r:?}"),
            Err(r) => r.text(),
        }
    }
}

/// A change to the world before a join.
type Change = Box<dyn Fn(&mut World)>;

fn text(r: DiscoveryRefusal) -> String {
    r.to_string()
}

#[test]
fn discovery_admits_a_vouched_ramdisk_with_the_tokens_placement() {
    let w = world();
    let r = w.run().unwrap();
    assert_eq!(r.tenant_id, "acme");
    assert_eq!(r.site_id, SITE);
    assert_eq!(r.pool_id, "commission");
    assert_eq!(r.role, NodeRole::Ramdisk);
    assert_eq!(r.reclaim_node_id, None);
    assert_eq!(
        r.token.as_ref().map(|t| t.token_id.as_str()),
        Some("tok_d1")
    );
    assert!(r.bind.is_empty());
    assert_eq!(r.node_key, NodeKeyStatement::Unattested);
    assert_eq!(r.allowed_kinds, DEFAULT_ALLOWED_KINDS);
    assert_eq!(r.approval, None);
    let signed = w.signed();
    assert_eq!(r.single_use.len(), 1);
    let u = &r.single_use[0];
    assert_eq!(u.attestor, "discovery");
    assert_eq!(u.subject, assertion_subject(&signed));
    assert_eq!(u.reason_if_used, "assertion-reused");
    assert_eq!(
        u.expires_at_us,
        Some(assertion_valid_until_ms(&w.assertion) * 1000)
    );
}

#[test]
fn discovery_plans_the_token_signer_certificate_lease_entry_and_use() {
    let w = world();
    let signed = w.signed();
    let claims = w.claims.clone();
    let digests = claims_digests(&claims);
    let evidence = signed.to_bytes();
    let request = AttestRequest {
        role: NodeRole::Ramdisk,
        csr: &w.csr,
        claims: &claims,
        digests: &digests,
        evidence: &evidence,
        token: Some(&w.secret),
        now: w.now,
    };
    let attestor = w.attestor();
    assert_eq!(attestor.id(), DISCOVERY_ATTESTOR);
    assert_eq!(attestor.roles(), &[NodeRole::Ramdisk]);
    assert_eq!(
        attestor.plan(&request).unwrap(),
        vec![
            FactKey::TokenByHash(w.secret.hash()),
            FactKey::Node(SIGNER.into()),
            FactKey::Certificate(w.site_serial.clone()),
            FactKey::SiteLease(SITE.into()),
            FactKey::BootEntry(ENTRY.into()),
            FactKey::Use {
                attestor: "discovery".into(),
                subject: assertion_subject(&signed),
            },
        ]
    );
    // Without a workflow the boot entry is not asked for.
    let mut w2 = world();
    w2.assertion.workflow_id.clear();
    let evidence = w2.signed().to_bytes();
    let request = AttestRequest {
        evidence: &evidence,
        ..request
    };
    let keys = attestor.plan(&request).unwrap();
    assert!(!keys.iter().any(|k| matches!(k, FactKey::BootEntry(_))));
    assert_eq!(keys.len(), 5);
}

#[test]
fn discovery_refuses_malformed_evidence() {
    let w = world();
    let want = text(DiscoveryRefusal::Malformed);
    assert_eq!(
        w.run_with(b"\xff\xff", Some(&w.secret)).unwrap_err().text(),
        want
    );
    let mut short = w.signed();
    short.signature.truncate(10);
    assert_eq!(
        w.run_with(&short.to_bytes(), Some(&w.secret))
            .unwrap_err()
            .text(),
        want
    );
    let mut w2 = world();
    w2.assertion.mac = "not a mac".into();
    assert_eq!(w2.refused(), want);
    let mut w3 = world();
    w3.assertion.signer_node_id.clear();
    assert_eq!(w3.refused(), want);
    // Malformed goes before the token, and to the root tenant.
    let r = w.run_with(b"junk", None).unwrap_err();
    assert_eq!((r.text(), r.tenant_id), (want, None));
}

#[test]
fn discovery_refuses_without_an_opened_token() {
    let w = world();
    let r = w.run_with(&w.signed().to_bytes(), None).unwrap_err();
    assert_eq!(r.text(), text(DiscoveryRefusal::TokenDoesNotOpen));
    assert_eq!(r.tenant_id, None);
}

#[test]
fn discovery_refuses_an_unknown_token() {
    let mut w = world();
    w.facts.tokens.clear();
    let r = w.run().unwrap_err();
    assert_eq!(r.text(), text(DiscoveryRefusal::UnknownToken));
    assert_eq!(r.tenant_id, None);
}

#[test]
fn discovery_refuses_a_revoked_token_in_its_tenant() {
    let mut w = world();
    w.token().revoked = true;
    let r = w.run().unwrap_err();
    assert_eq!(r.text(), text(DiscoveryRefusal::Revoked));
    assert_eq!(r.tenant_id.as_deref(), Some("acme"));
    assert_eq!(r.token_id.as_deref(), Some("tok_d1"));
}

#[test]
fn discovery_refuses_an_expired_token() {
    let mut w = world();
    let now = unix_us(w.now);
    w.token().expires_at_us = now;
    assert_eq!(w.refused(), text(DiscoveryRefusal::Expired));
}

#[test]
fn discovery_refuses_a_token_of_another_role() {
    for role in [TokenRole::Node, TokenRole::Provisioned, TokenRole::Site] {
        let mut w = world();
        w.token().role = role;
        assert_eq!(
            w.refused(),
            text(DiscoveryRefusal::WrongTokenRole),
            "{role:?}"
        );
    }
}

#[test]
fn discovery_refuses_a_token_without_exactly_one_use() {
    for left in [0, 2] {
        let mut w = world();
        w.token().uses_left = left;
        w.token().uses_total = 2;
        assert_eq!(w.refused(), text(DiscoveryRefusal::NotSingleUse));
    }
}

#[test]
fn discovery_refuses_a_token_of_another_site() {
    let mut w = world();
    w.token().site_id = "par1".into();
    assert_eq!(w.refused(), text(DiscoveryRefusal::WrongSite));
}

#[test]
fn discovery_refuses_a_token_bound_to_another_mac() {
    let mut w = world();
    w.token().expect.mac = Some("aa:bb:cc:dd:ee:02".into());
    assert_eq!(w.refused(), text(DiscoveryRefusal::MacMismatch));
    // No expect.mac: nothing to compare.
    w.token().expect.mac = None;
    assert!(w.run().is_ok());
}

#[test]
fn discovery_refuses_an_unknown_signer() {
    let mut w = world();
    w.facts.nodes.clear();
    assert_eq!(w.refused(), text(DiscoveryRefusal::UnknownSigner));
}

#[test]
fn discovery_refuses_a_signer_that_is_no_site_agent_of_the_site() {
    let mut w = world();
    w.signer().role = NodeRole::Node;
    assert_eq!(w.refused(), text(DiscoveryRefusal::SignerNotSite));
    let mut w = world();
    w.signer().site_id = "par1".into();
    assert_eq!(w.refused(), text(DiscoveryRefusal::SignerNotSite));
}

#[test]
fn discovery_refuses_a_retired_signer() {
    for status in [NodeStatus::Retired, NodeStatus::Deleted] {
        let mut w = world();
        w.signer().status = status;
        assert_eq!(w.refused(), text(DiscoveryRefusal::SignerRetired));
    }
}

#[test]
fn discovery_refuses_a_signer_certificate_that_is_not_its_current_stored_one() {
    let want = text(DiscoveryRefusal::SignerCertificate);
    let cases: Vec<(&str, Change)> = vec![
        ("no row", Box::new(|w| w.facts.certificates.clear())),
        ("other bytes", Box::new(|w| w.signer_cert().der.push(0))),
        ("revoked", Box::new(|w| w.signer_cert().revoked = true)),
        (
            "expired",
            Box::new(|w| {
                let now = unix_us(w.now);
                w.signer_cert().not_after_us = now;
            }),
        ),
        (
            "older generation",
            Box::new(|w| w.signer().identity_generation = 2),
        ),
        (
            "another node's row",
            Box::new(|w| w.signer_cert().node_id = "node_other".into()),
        ),
        (
            "not a certificate",
            Box::new(|w| w.site_cert = b"not a certificate".to_vec()),
        ),
    ];
    for (what, change) in cases {
        let mut w = world();
        change(&mut w);
        assert_eq!(w.refused(), want, "{what}");
    }
}

#[test]
fn discovery_refuses_a_signature_by_another_key() {
    let mut w = world();
    w.site_key = PrivateKey::generate(KeyRole::Node).unwrap();
    assert_eq!(w.refused(), text(DiscoveryRefusal::Signature));
    // Bytes changed after signing.
    let w = world();
    let mut signed = w.signed();
    let mut other = w.assertion.clone();
    other.ip = "10.0.0.8".into();
    signed.assertion = prost::Message::encode_to_vec(&other);
    assert_eq!(
        w.run_with(&signed.to_bytes(), Some(&w.secret))
            .unwrap_err()
            .text(),
        text(DiscoveryRefusal::Signature)
    );
}

#[test]
fn discovery_refuses_a_signer_not_holding_the_lease_at_the_epoch() {
    let want = text(DiscoveryRefusal::NotLeaseHolder);
    let cases: Vec<(&str, Change)> = vec![
        (
            "another holder",
            Box::new(|w| w.lease().holder_node_id = Some("node_b".into())),
        ),
        ("a later epoch (fenced)", Box::new(|w| w.lease().epoch = 5)),
        (
            "lapsed",
            Box::new(|w| {
                let now = unix_us(w.now);
                w.lease().expires_at_us = now;
            }),
        ),
        ("released", Box::new(|w| w.lease().holder_node_id = None)),
        ("never held", Box::new(|w| w.facts.site_leases.clear())),
    ];
    for (what, change) in cases {
        let mut w = world();
        change(&mut w);
        assert_eq!(w.refused(), want, "{what}");
    }
}

#[test]
fn discovery_refuses_an_expired_assertion() {
    let mut w = world();
    w.assertion.not_after_ms = ms(w.now);
    assert_eq!(w.refused(), text(DiscoveryRefusal::AssertionExpired));
}

#[test]
fn discovery_caps_an_assertion_at_fifteen_minutes_after_issue() {
    let mut w = world();
    let issued = ms(w.now) - MAX_ASSERTION_AGE_MS;
    w.assertion.issued_at_ms = issued;
    w.assertion.not_after_ms = issued + 3_600_000;
    assert_eq!(w.refused(), text(DiscoveryRefusal::AssertionExpired));
    w.assertion.issued_at_ms = issued + 1;
    let r = w.run().unwrap();
    assert_eq!(
        r.single_use[0].expires_at_us,
        Some((issued + 1 + MAX_ASSERTION_AGE_MS) * 1000)
    );
}

#[test]
fn discovery_refuses_an_assertion_from_the_future() {
    let mut w = world();
    let now = ms(w.now);
    w.assertion.issued_at_ms = now + 60_001;
    w.assertion.not_after_ms = now + 600_000;
    assert_eq!(w.refused(), text(DiscoveryRefusal::AssertionNotYetValid));
    // Up to 60 s ahead is clock skew, admitted.
    w.assertion.issued_at_ms = now + 60_000;
    assert!(w.run().is_ok());
}

#[test]
fn discovery_refuses_a_machine_not_claiming_the_mac() {
    let mut w = world();
    w.claims.macs = vec!["aa:bb:cc:dd:ee:02".into()];
    assert_eq!(w.refused(), text(DiscoveryRefusal::MacNotClaimed));
}

#[test]
fn discovery_refuses_a_machine_with_another_product_uuid() {
    let mut w = world();
    w.claims.product_uuid = Some("00000000-0000-0000-0000-000000000000".into());
    assert_eq!(w.refused(), text(DiscoveryRefusal::ProductUuidMismatch));
    w.claims.product_uuid = None;
    assert_eq!(w.refused(), text(DiscoveryRefusal::ProductUuidMismatch));
    // An assertion that names none asks for none.
    w.assertion.product_uuid.clear();
    assert!(w.run().is_ok());
}

#[test]
fn discovery_refuses_a_reused_assertion() {
    let mut w = world();
    let subject = assertion_subject(&w.signed());
    w.facts.uses.insert(("discovery".into(), subject));
    let r = w.run().unwrap_err();
    assert_eq!(r.text(), text(DiscoveryRefusal::AssertionReused));
    assert_eq!(r.tenant_id.as_deref(), Some("acme"));
}

#[test]
fn discovery_has_one_test_per_reason() {
    // The tests above cover every reason of DiscoveryRefusal::ALL, in its order.
    assert_eq!(DiscoveryRefusal::ALL.len(), 20);
}

#[test]
fn discovery_approval_follows_the_configuration() {
    let mut w = world();
    let subject = assertion_subject(&w.signed());
    // never
    assert_eq!(w.run().unwrap().approval, None);
    // always
    w.config.approval = DiscoveryApproval::Always;
    let ask = w.run().unwrap().approval.expect("always asks");
    assert_eq!(ask.subject, subject);
    assert!(ask.summary.contains(SIGNER) && ask.summary.contains(ENTRY));
    assert!(!ask.summary.contains(MAC), "the summary names no claim");
    // unknown-machines: the boot entry names the claimed UUID: admitted without asking.
    w.config.approval = DiscoveryApproval::UnknownMachines;
    assert_eq!(w.run().unwrap().approval, None);
    // ... an entry without a UUID, another UUID, a removed entry, no entry: asks.
    let cases: Vec<Change> = vec![
        Box::new(|w| w.facts.boot_entries.get_mut(ENTRY).unwrap().product_uuid = None),
        Box::new(|w| {
            w.facts.boot_entries.get_mut(ENTRY).unwrap().product_uuid =
                Some("11111111-0000-0000-0000-000000000000".into());
        }),
        Box::new(|w| w.facts.boot_entries.get_mut(ENTRY).unwrap().removed = true),
        Box::new(|w| w.facts.boot_entries.clear()),
        Box::new(|w| {
            w.assertion.workflow_id.clear();
        }),
    ];
    for (i, change) in cases.into_iter().enumerate() {
        let mut w = world();
        w.config.approval = DiscoveryApproval::UnknownMachines;
        change(&mut w);
        let subject = assertion_subject(&w.signed());
        let ask = w
            .run()
            .unwrap()
            .approval
            .unwrap_or_else(|| panic!("case {i}"));
        assert_eq!(ask.subject, subject);
    }
}

#[test]
fn discovery_gives_the_configured_kinds() {
    let mut w = world();
    w.config.allowed_kinds = vec!["disk.wipe".into()];
    assert_eq!(w.run().unwrap().allowed_kinds, vec!["disk.wipe"]);
}

/// The admission step on a discovery result: a ramdisk certificate of at most the configured
/// lifetime (and never above 2 h), carrying the allowed kinds, the token spent, the assertion
/// used.
#[test]
fn discovery_admission_issues_a_short_ramdisk_certificate_with_its_kinds() {
    let w = world();
    let result = w.run().unwrap();
    let digests = claims_digests(&w.claims);
    let new_node_id = NodeId::new("node_ram1").unwrap();
    let serial = Serial::generate().unwrap();
    let cmd = AdmissionCommand {
        attestor: DISCOVERY_ATTESTOR,
        csr: &w.csr,
        claims: &w.claims,
        digests: &digests,
        result: &result,
        new_node_id: &new_node_id,
        serial: &serial,
        new_request_id: "jr_1",
    };
    for (ramdisk, want) in [
        (time::Duration::minutes(30), time::Duration::minutes(30)),
        (time::Duration::hours(5), time::Duration::hours(2)),
    ] {
        let ctx = JoinContext {
            trust_domain: &w.keys.trust_domain,
            node_ca: &w.keys.node_ca,
            join_encryption: &w.keys.join_encryption,
            leaf_lifetime: time::Duration::hours(24),
            ramdisk_lifetime: ramdisk,
        };
        let d = decide_admission(&ctx, &cmd, &AdmissionFacts::default(), w.now).unwrap();
        let Admission::Joined(joined) = &d.outcome else {
            panic!("pending");
        };
        assert_eq!(joined.role, "ramdisk");
        let issued = d
            .events
            .iter()
            .find_map(|e| match e {
                IdentityEvent::CertificateIssued(c) => Some(c.clone()),
                _ => None,
            })
            .unwrap();
        assert_eq!(
            issued.not_after_us - issued.not_before_us,
            want.whole_microseconds() as i64
        );
        assert_eq!(issued.allowed_kinds, DEFAULT_ALLOWED_KINDS);
        let kinds: Vec<&str> = d
            .events
            .iter()
            .map(|e| match e {
                IdentityEvent::NodeJoined(_) => "joined",
                IdentityEvent::CertificateIssued(_) => "issued",
                IdentityEvent::EvidenceUsed(u) => {
                    assert_eq!(u.attestor, "discovery");
                    "used"
                }
                IdentityEvent::TokenUsed(t) => {
                    assert_eq!(t.uses_left, 0);
                    "token"
                }
                _ => "other",
            })
            .collect();
        assert_eq!(kinds, vec!["joined", "issued", "used", "token"]);
    }
    // The admission step refuses the assertion's second use with the attestor's reason.
    let mut facts = AdmissionFacts::default();
    facts
        .uses
        .insert(("discovery".into(), result.single_use[0].subject));
    let ctx = JoinContext {
        trust_domain: &w.keys.trust_domain,
        node_ca: &w.keys.node_ca,
        join_encryption: &w.keys.join_encryption,
        leaf_lifetime: time::Duration::hours(24),
        ramdisk_lifetime: time::Duration::hours(2),
    };
    match decide_admission(&ctx, &cmd, &facts, w.now) {
        Err(domain::identity::DecideError::Refused(r)) => {
            assert_eq!(r.text(), "discovery:assertion-reused")
        }
        other => panic!("{other:?}"),
    }
}
