//! The admission step, pure: one test per refusal of its own, the events of an admission, the
//! approval states (spec 001 "What a result means", "Two-round joins").

use domain::attest::{
    decide_admission, Admission, AdmissionCommand, AdmissionFacts, ApprovalAsk, AttestationResult,
    AttestorRefusal, BindingState, JoinRequestState, JoinRequestStatus, NodeKeyStatement,
    PoolState, SingleUse, SpentUse,
};
use domain::identity::{
    claims_digests, unix_us, DecideError, Decision, ExpectBinding, HardwareClaims, IdentityEvent,
    JoinContext, NodeState, NodeStatus, TokenRole, TokenState,
};
use domain::pki::{
    build_csr, KeyRole, KeySet, KeySetLifetimes, NodeId, NodeRole, PrivateKey, Serial, TokenSecret,
    TrustDomain, VerifiedCsr,
};
use time::OffsetDateTime;

struct World {
    keys: KeySet,
    csr: VerifiedCsr,
    now: OffsetDateTime,
}

fn world() -> World {
    let now = OffsetDateTime::from_unix_timestamp(1_790_000_000).unwrap();
    let td = TrustDomain::new("compute.example.com").unwrap();
    let keys = KeySet::generate(td, now, KeySetLifetimes::default()).unwrap();
    let key = PrivateKey::generate(KeyRole::Node).unwrap();
    let csr = VerifiedCsr::verify(&build_csr(&key).unwrap()).unwrap();
    World { keys, csr, now }
}

fn token() -> TokenState {
    TokenState {
        token_id: "tok_1".into(),
        tenant_id: "t1".into(),
        site_id: "site-1".into(),
        pool_id: "pool-1".into(),
        role: TokenRole::Node,
        uses_total: 3,
        uses_left: 3,
        expires_at_us: i64::MAX,
        secret_hash: TokenSecret::generate().unwrap().hash(),
        expect: ExpectBinding::default(),
        allow_reclaim: false,
        reclaim_node_id: None,
        for_node_id: None,
        require_approval: false,
        revoked: false,
    }
}

fn result() -> AttestationResult {
    AttestationResult {
        tenant_id: "t1".into(),
        role: NodeRole::Node,
        site_id: "site-1".into(),
        pool_id: "pool-1".into(),
        reclaim_node_id: None,
        token: Some(token()),
        bind: Vec::new(),
        single_use: vec![SingleUse {
            attestor: "join-token".into(),
            subject: [1; 32],
            expires_at_us: Some(5),
            reason_if_used: "csr-key-used".into(),
        }],
        node_key: NodeKeyStatement::Unattested,
        allowed_kinds: Vec::new(),
        approval: None,
    }
}

fn node(id: &str) -> NodeState {
    NodeState {
        node_id: id.into(),
        tenant_id: "t1".into(),
        site_id: "site-1".into(),
        pool_id: "pool-1".into(),
        role: NodeRole::Node,
        status: NodeStatus::Active,
        identity_generation: 2,
        hardware_key_sha256: None,
        product_uuid_sha256: None,
    }
}

fn run(
    w: &World,
    result: &AttestationResult,
    claims: &HardwareClaims,
    facts: &AdmissionFacts,
) -> Result<Decision<Admission>, DecideError<AttestorRefusal>> {
    let ctx = JoinContext {
        trust_domain: &w.keys.trust_domain,
        node_ca: &w.keys.node_ca,
        join_encryption: &w.keys.join_encryption,
        leaf_lifetime: time::Duration::hours(24),
        ramdisk_lifetime: time::Duration::hours(2),
    };
    let digests = claims_digests(claims);
    let new_node_id = NodeId::new("node_new").unwrap();
    let serial = Serial::generate().unwrap();
    let cmd = AdmissionCommand {
        attestor: "join-token",
        csr: &w.csr,
        claims,
        digests: &digests,
        result,
        new_node_id: &new_node_id,
        serial: &serial,
        new_request_id: "jr_new",
        report: &Default::default(),
    };
    decide_admission(&ctx, &cmd, facts, w.now).and_then(|d| d.sign(ctx.node_ca, &w.csr, w.now))
}

fn refused(r: Result<Decision<Admission>, DecideError<AttestorRefusal>>) -> AttestorRefusal {
    match r {
        Err(DecideError::Refused(r)) => r,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn types(d: &Decision<Admission>) -> Vec<String> {
    d.events
        .iter()
        .map(|e| e.to_new_event([0; 16], "t", 0).event_type)
        .collect()
}

#[test]
fn a_plain_result_joins_a_new_node_and_spends_what_it_names() {
    let w = world();
    let d = run(
        &w,
        &result(),
        &HardwareClaims::default(),
        &AdmissionFacts::default(),
    )
    .unwrap();
    assert_eq!(
        types(&d),
        [
            "node.joined",
            "node.certificate.issued",
            "attestation.evidence.used",
            "token.used"
        ]
    );
    let Admission::Joined(j) = &d.outcome else {
        panic!("joined")
    };
    assert_eq!((j.node_id.as_str(), j.identity_generation), ("node_new", 1));
    match &d.events[3] {
        IdentityEvent::TokenUsed(u) => {
            assert!(u.csr_key_sha256.is_empty());
            assert_eq!((u.use_number, u.uses_left), (1, 2));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_expect_binding_is_checked_whenever_a_token_is_named() {
    let w = world();
    let mut r = result();
    r.token.as_mut().unwrap().expect.product_uuid = Some("ABC".into());
    let claims = HardwareClaims {
        product_uuid: Some("other".into()),
        ..HardwareClaims::default()
    };
    let refusal = refused(run(&w, &r, &claims, &AdmissionFacts::default()));
    assert_eq!(refusal.text(), "join:expect-product-uuid");
    assert_eq!(refusal.tenant_id.as_deref(), Some("t1"));
    assert_eq!(refusal.token_id.as_deref(), Some("tok_1"));
    let ok = HardwareClaims {
        product_uuid: Some(" abc ".into()),
        ..HardwareClaims::default()
    };
    assert!(run(&w, &r, &ok, &AdmissionFacts::default()).is_ok());

    let mut r = result();
    r.token.as_mut().unwrap().expect.mac = Some("AA-BB-CC-DD-EE-FF".into());
    let refusal = refused(run(
        &w,
        &r,
        &HardwareClaims::default(),
        &AdmissionFacts::default(),
    ));
    assert_eq!(refusal.text(), "join:expect-mac");
    let ok = HardwareClaims {
        macs: vec!["aa:bb:cc:dd:ee:ff".into()],
        ..HardwareClaims::default()
    };
    assert!(run(&w, &r, &ok, &AdmissionFacts::default()).is_ok());
}

#[test]
fn a_node_key_statement_the_renewal_cannot_prove_is_refused() {
    let w = world();
    let mut r = result();
    r.node_key = NodeKeyStatement::Statement {
        label: "other".into(),
        uri: "urn:bc:other-key:1".into(),
    };
    let refusal = refused(run(
        &w,
        &r,
        &HardwareClaims::default(),
        &AdmissionFacts::default(),
    ));
    assert_eq!(refusal.text(), "join:node-key-statement");
}

#[test]
fn a_reclaim_needs_an_active_node_with_the_same_placement() {
    let w = world();
    let mut r = result();
    r.reclaim_node_id = Some("node_old".into());
    let none = refused(run(
        &w,
        &r,
        &HardwareClaims::default(),
        &AdmissionFacts::default(),
    ));
    assert_eq!(none.text(), "join:reclaim-inactive");
    assert_eq!(none.node_id.as_deref(), Some("node_old"));
    let mut retired = node("node_old");
    retired.status = NodeStatus::Retired;
    let facts = AdmissionFacts {
        reclaimed: Some(retired),
        ..AdmissionFacts::default()
    };
    let refusal = refused(run(&w, &r, &HardwareClaims::default(), &facts));
    assert_eq!(refusal.text(), "join:reclaim-inactive");

    for change in 0..4 {
        let mut other = node("node_old");
        match change {
            0 => other.tenant_id = "t2".into(),
            1 => other.site_id = "site-2".into(),
            2 => other.pool_id = "pool-2".into(),
            _ => other.role = NodeRole::Site,
        }
        let facts = AdmissionFacts {
            reclaimed: Some(other),
            ..AdmissionFacts::default()
        };
        let refusal = refused(run(&w, &r, &HardwareClaims::default(), &facts));
        assert_eq!(refusal.text(), "join:reclaim-mismatch", "change {change}");
    }

    let facts = AdmissionFacts {
        reclaimed: Some(node("node_old")),
        reclaimed_unrevoked_serials: vec!["0a".into()],
        ..AdmissionFacts::default()
    };
    let d = run(&w, &r, &HardwareClaims::default(), &facts).unwrap();
    assert_eq!(types(&d)[0], "node.identity.revoked");
    match &d.events[0] {
        IdentityEvent::IdentityRevoked(e) => {
            assert_eq!(e.reason, "reclaim");
            assert_eq!(e.new_identity_generation, 3);
            assert_eq!(e.revoked_serials, vec!["0a".to_owned()]);
        }
        other => panic!("{other:?}"),
    }
    let Admission::Joined(j) = &d.outcome else {
        panic!("joined")
    };
    assert_eq!((j.node_id.as_str(), j.reclaimed), ("node_old", true));
}

#[test]
fn a_subject_bound_to_another_node_is_refused() {
    let w = world();
    let mut r = result();
    r.bind = vec![[9; 32]];
    let mut facts = AdmissionFacts::default();
    facts.bindings.insert(
        [9; 32],
        BindingState {
            attestor: "tpm".into(),
            node_id: "node_other".into(),
        },
    );
    let refusal = refused(run(&w, &r, &HardwareClaims::default(), &facts));
    assert_eq!(refusal.text(), "join:bound-elsewhere");
    assert_eq!(refusal.spent, None);
    // With its single-use subject spent too (the same request again, its answer lost, from an
    // attestor that cannot look bindings up): still bound-elsewhere, naming the spent subject so
    // the shell can answer it again.
    facts.uses.insert(("join-token".into(), [1; 32]));
    let refusal = refused(run(&w, &r, &HardwareClaims::default(), &facts));
    assert_eq!(refusal.text(), "join:bound-elsewhere");
    assert_eq!(
        refusal.spent.as_deref(),
        Some(&SpentUse {
            attestor: "join-token".into(),
            subject: [1; 32]
        })
    );
    // Unbound: the join binds it.
    let d = run(
        &w,
        &r,
        &HardwareClaims::default(),
        &AdmissionFacts::default(),
    )
    .unwrap();
    assert!(types(&d).contains(&"node.bound".to_owned()));
}

#[test]
fn the_pool_policy_is_checked_first_in_the_pool_owners_tenant() {
    let w = world();
    let mut r = result();
    r.reclaim_node_id = Some("node_missing".into());
    let facts = AdmissionFacts {
        pool: Some(PoolState {
            pool_id: "pool-1".into(),
            tenant_id: "owner".into(),
            description: String::new(),
            join_attestors: Some(vec!["x509pop".into()]),
        }),
        ..AdmissionFacts::default()
    };
    let refusal = refused(run(&w, &r, &HardwareClaims::default(), &facts));
    assert_eq!(refusal.text(), "join:pool-attestor");
    assert_eq!(refusal.tenant_id.as_deref(), Some("owner"));
}

/// Issue 40 item 9: a tenant nobody created (an out-of-process attestor's, the only results
/// whose tenant the shell checks) is refused before anything else, in the root tenant.
#[test]
fn a_tenant_nobody_created_is_refused_first_in_the_root_tenant() {
    let w = world();
    let mut r = result();
    r.token = None;
    r.tenant_id = "nobody".into();
    r.reclaim_node_id = Some("node_missing".into());
    let facts = AdmissionFacts {
        tenant_known: Some(false),
        pool: Some(PoolState {
            pool_id: "pool-1".into(),
            tenant_id: "owner".into(),
            description: String::new(),
            join_attestors: Some(vec!["x509pop".into()]),
        }),
        ..AdmissionFacts::default()
    };
    let refusal = refused(run(&w, &r, &HardwareClaims::default(), &facts));
    assert_eq!(refusal.text(), "join:unknown-tenant");
    assert_eq!(refusal.tenant_id, None);
    assert_eq!((refusal.token_id, refusal.node_id), (None, None));
    r.reclaim_node_id = None;
    for known in [Some(true), None] {
        let facts = AdmissionFacts {
            tenant_known: known,
            ..AdmissionFacts::default()
        };
        let d = run(&w, &r, &HardwareClaims::default(), &facts).unwrap();
        assert_eq!(types(&d)[0], "node.joined", "{known:?}");
    }
}

#[test]
fn used_single_use_evidence_is_refused_with_its_own_reason() {
    let w = world();
    let mut facts = AdmissionFacts::default();
    facts.uses.insert(("join-token".into(), [1; 32]));
    let refusal = refused(run(&w, &result(), &HardwareClaims::default(), &facts));
    assert_eq!(refusal.text(), "join-token:csr-key-used");
    assert_eq!(refusal.tenant_id.as_deref(), Some("t1"));
    // Naming the subject spent: a lost answer asked again is answered from it (issue 40).
    assert_eq!(
        refusal.spent.as_deref(),
        Some(&SpentUse {
            attestor: "join-token".into(),
            subject: [1; 32]
        })
    );
}

fn request(status: JoinRequestStatus, expires_at_us: i64) -> JoinRequestState {
    JoinRequestState {
        request_id: "jr_old".into(),
        tenant_id: "t1".into(),
        attestor: "join-token".into(),
        subject: [4; 32],
        csr_sha256: [4; 32],
        status,
        expires_at_us,
        version: 2,
    }
}

#[test]
fn an_approval_defers_until_approved_and_spends_nothing_before() {
    let w = world();
    let mut r = result();
    r.approval = Some(ApprovalAsk {
        subject: [4; 32],
        summary: "s".into(),
    });
    let later = unix_us(w.now) + 1_000_000;
    let at = |req: Option<JoinRequestState>| AdmissionFacts {
        join_request: req,
        ..AdmissionFacts::default()
    };
    // None: a new request, its created event only.
    let d = run(&w, &r, &HardwareClaims::default(), &at(None)).unwrap();
    assert_eq!(types(&d), ["join_request.created"]);
    assert!(matches!(&d.outcome, Admission::Pending(p) if p.request_id == "jr_new" && p.created));
    // Pending: deferred, nothing written.
    let d = run(
        &w,
        &r,
        &HardwareClaims::default(),
        &at(Some(request(JoinRequestStatus::Pending, later))),
    )
    .unwrap();
    assert!(d.events.is_empty());
    assert!(matches!(&d.outcome, Admission::Pending(p) if p.request_id == "jr_old"));
    // Pending past its expiry, or expired: a new request.
    for req in [
        request(JoinRequestStatus::Pending, 0),
        request(JoinRequestStatus::Expired, later),
    ] {
        let d = run(&w, &r, &HardwareClaims::default(), &at(Some(req))).unwrap();
        assert_eq!(types(&d), ["join_request.created"]);
    }
    // Rejected.
    let refusal = refused(run(
        &w,
        &r,
        &HardwareClaims::default(),
        &at(Some(request(JoinRequestStatus::Rejected, later))),
    ));
    assert_eq!(refusal.text(), "join:request-rejected");
    // Approved but not consumed in time.
    let refusal = refused(run(
        &w,
        &r,
        &HardwareClaims::default(),
        &at(Some(request(JoinRequestStatus::Approved, 0))),
    ));
    assert_eq!(refusal.text(), "join:request-expired");
    // Approved: admitted and consumed.
    let d = run(
        &w,
        &r,
        &HardwareClaims::default(),
        &at(Some(request(JoinRequestStatus::Approved, later))),
    )
    .unwrap();
    assert_eq!(types(&d).last().unwrap(), "join_request.consumed");
    assert!(types(&d).contains(&"token.used".to_owned()));
}
