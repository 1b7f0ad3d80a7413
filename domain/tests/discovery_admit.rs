//! The `discovery` attestor's admitted result (spec 000 "discovery"): its fields and plan, the
//! approval modes, the configured kinds, and the ramdisk certificate the admission step issues
//! for it (lifetime, allowed kinds, the token spent, the assertion used once).

use domain::attest::discovery::{
    assertion_subject, assertion_valid_until_ms, DiscoveryApproval, DEFAULT_ALLOWED_KINDS,
    DISCOVERY_ATTESTOR,
};
use domain::attest::{
    decide_admission, Admission, AdmissionCommand, AdmissionFacts, AttestRequest, Attestor,
    FactKey, NodeKeyStatement,
};
use domain::identity::{claims_digests, IdentityEvent, JoinContext};
use domain::pki::{NodeId, NodeRole, Serial};

use crate::discovery_support::*;

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
        entropy: &const { domain::attest::Entropy::from_seed([7; 32]) },
    };
    let attestor = w.attestor();
    assert_eq!(attestor.id(), DISCOVERY_ATTESTOR);
    assert_eq!(attestor.roles(), &[NodeRole::Ramdisk]);
    assert_eq!(
        attestor.plan(&request).unwrap().facts,
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
    let keys = attestor.plan(&request).unwrap().facts;
    assert!(!keys.iter().any(|k| matches!(k, FactKey::BootEntry(_))));
    assert_eq!(keys.len(), 5);
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
        report: &Default::default(),
    };
    for (ramdisk, want) in [
        // notBefore is backdated a tenth of the lifetime up to 5 minutes (domain::pki::BACKDATE);
        // the span stops at the max.
        (time::Duration::minutes(30), time::Duration::minutes(33)),
        (time::Duration::hours(5), time::Duration::hours(2)),
    ] {
        let ctx = JoinContext {
            trust_domain: &w.keys.trust_domain,
            node_ca: &w.keys.node_ca,
            join_encryption: &w.keys.join_encryption,
            leaf_lifetime: time::Duration::hours(24),
            ramdisk_lifetime: ramdisk,
        };
        let d = decide_admission(&ctx, &cmd, &AdmissionFacts::default(), w.now)
            .and_then(|d| d.sign(ctx.node_ca, &w.csr, w.now))
            .unwrap();
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
