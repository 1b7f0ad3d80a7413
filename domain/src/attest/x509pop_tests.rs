//! One test per x509pop reason, and the admitted result.

use time::{Duration as TimeDuration, OffsetDateTime};

use super::*;
use crate::attest::{AttestRequest, Attestor, Facts, Verdict};
use crate::identity::{claims_digests, unix_us, CertState, HardwareClaims, NodeState, NodeStatus};
use crate::pki::statement::{sign, RenewPop, Statement};
use crate::pki::{
    build_csr, issue_node_certificate, KeyRole, KeySet, KeySetLifetimes, NodeCertificateDecision,
    NodeId, NodeKeyStatement as UriStatement, NodeRole, PrivateKey, Serial, SiteId, SpiffeId,
    TrustDomain, VerifiedCsr,
};

const NODE: &str = "node_a";

fn t0() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_790_000_000).unwrap()
}

fn ms_of(t: OffsetDateTime) -> u64 {
    u64::try_from(t.unix_timestamp_nanos() / 1_000_000).unwrap()
}

struct Fx {
    keys: KeySet,
    attestor: X509PopAttestor,
    node_key: PrivateKey,
    leaf: Vec<u8>,
    cert: CertState,
    node: NodeState,
    csr: VerifiedCsr,
    claims: HardwareClaims,
    /// notAfter of the leaf.
    not_after: OffsetDateTime,
}

fn issue(
    keys: &KeySet,
    key: &PrivateKey,
    node: &str,
    role: NodeRole,
    statements: Vec<UriStatement>,
) -> (Vec<u8>, String, OffsetDateTime) {
    let csr = VerifiedCsr::verify(&build_csr(key).unwrap()).unwrap();
    let decision = NodeCertificateDecision {
        spiffe_id: SpiffeId::new(
            keys.trust_domain.clone(),
            SiteId::new("site-1").unwrap(),
            NodeId::new(node).unwrap(),
        ),
        role,
        serial: Serial::generate().unwrap(),
        requested_lifetime: None,
        statements,
    };
    let issued = issue_node_certificate(&keys.node_ca, &csr, &decision, t0()).unwrap();
    (issued.der, issued.serial.to_hex(), issued.not_after)
}

fn fixture_with(role: NodeRole, statements: Vec<UriStatement>) -> Fx {
    let td = TrustDomain::new("compute.example.com").unwrap();
    let keys = KeySet::generate(td.clone(), t0(), KeySetLifetimes::default()).unwrap();
    let node_key = PrivateKey::generate(KeyRole::Node).unwrap();
    let (leaf, serial, not_after) = issue(&keys, &node_key, NODE, role, statements);
    let cert = CertState {
        serial,
        node_id: NODE.into(),
        identity_generation: 1,
        der: leaf.clone(),
        not_after_us: unix_us(not_after),
        revoked: false,
        allowed_kinds: Vec::new(),
    };
    let node = NodeState {
        node_id: NODE.into(),
        tenant_id: "t1".into(),
        site_id: "site-1".into(),
        pool_id: "pool-1".into(),
        role,
        status: NodeStatus::Active,
        identity_generation: 1,
        hardware_key_sha256: None,
        product_uuid_sha256: None,
    };
    let new_key = PrivateKey::generate(KeyRole::Node).unwrap();
    let csr = VerifiedCsr::verify(&build_csr(&new_key).unwrap()).unwrap();
    Fx {
        attestor: X509PopAttestor::new(td, keys.node_ca.cert_der().to_vec()),
        keys,
        node_key,
        leaf,
        cert,
        node,
        csr,
        claims: HardwareClaims::default(),
        not_after,
    }
}

fn fixture() -> Fx {
    fixture_with(NodeRole::Node, Vec::new())
}

impl Fx {
    /// A day after the leaf expired: the case x509pop exists for.
    fn now(&self) -> OffsetDateTime {
        self.not_after + TimeDuration::days(1)
    }

    fn chain(&self) -> Vec<Vec<u8>> {
        vec![self.leaf.clone(), self.keys.node_ca.cert_der().to_vec()]
    }

    fn evidence_at(&self, client: OffsetDateTime) -> Vec<u8> {
        build_evidence(
            &self.chain(),
            &self.node_key,
            self.csr.sha256(),
            &NodeId::new(NODE).unwrap(),
            ms_of(client),
        )
        .unwrap()
    }

    fn evidence(&self) -> Vec<u8> {
        self.evidence_at(self.now())
    }

    fn facts(&self) -> Facts {
        let mut facts = Facts::default();
        facts.nodes.insert(NODE.into(), self.node.clone());
        facts
            .certificates
            .insert(self.cert.serial.clone(), self.cert.clone());
        facts
    }

    fn run_as(
        &self,
        evidence: &[u8],
        facts: &Facts,
        role: NodeRole,
        now: OffsetDateTime,
    ) -> Verdict {
        let digests = claims_digests(&self.claims);
        let request = AttestRequest {
            role,
            csr: &self.csr,
            claims: &self.claims,
            digests: &digests,
            evidence,
            token: None,
            now,
            entropy: &const { crate::attest::Entropy::from_seed([7; 32]) },
        };
        match self.attestor.plan(&request) {
            Ok(planned) => self.attestor.verify(&request, &planned.plan, facts),
            Err(refusal) => Verdict::Refuse(refusal),
        }
    }

    fn run(&self, evidence: &[u8], facts: &Facts) -> Verdict {
        self.run_as(evidence, facts, NodeRole::Node, self.now())
    }
}

/// The refusal's reason and tenant.
fn refused(verdict: Verdict) -> (String, Option<String>) {
    match verdict {
        Verdict::Refuse(r) => (r.text(), r.tenant_id),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn admitted(verdict: Verdict) -> AttestationResult {
    match verdict {
        Verdict::Admit(result) => *result,
        other => panic!("expected an admission, got {other:?}"),
    }
}

fn with_json(f: impl FnOnce(&mut serde_json::Value), evidence: &[u8]) -> Vec<u8> {
    let mut value: serde_json::Value = serde_json::from_slice(evidence).unwrap();
    f(&mut value);
    serde_json::to_vec(&value).unwrap()
}

#[test]
fn an_expired_certificate_re_joins_as_its_node() {
    let fx = fixture();
    let evidence = fx.evidence();
    let result = admitted(fx.run(&evidence, &fx.facts()));
    assert_eq!(result.tenant_id, "t1");
    assert_eq!(result.role, NodeRole::Node);
    assert_eq!(result.site_id, "site-1");
    assert_eq!(result.pool_id, "pool-1");
    assert_eq!(result.reclaim_node_id.as_deref(), Some(NODE));
    assert!(result.token.is_none() && result.bind.is_empty() && result.approval.is_none());
    assert_eq!(result.node_key, NodeKeyStatement::Unattested);
    let statement = X509Pop {
        csr_sha256: *fx.csr.sha256(),
        node_id: NodeId::new(NODE).unwrap(),
        client_time_ms: ms_of(fx.now()),
    };
    let [single] = &result.single_use[..] else {
        panic!("one single-use subject");
    };
    assert_eq!(single.attestor, "x509pop");
    assert_eq!(single.subject, statement.replay_key());
    assert_eq!(single.reason_if_used, "reused");
    let want = (i64::try_from(ms_of(fx.now())).unwrap() + 120_000) * 1000;
    assert_eq!(single.expires_at_us, Some(want));
}

#[test]
fn plan_asks_for_the_node_the_certificate_and_the_use() {
    let fx = fixture();
    let evidence = fx.evidence();
    let digests = claims_digests(&fx.claims);
    let request = AttestRequest {
        role: NodeRole::Node,
        csr: &fx.csr,
        claims: &fx.claims,
        digests: &digests,
        evidence: &evidence,
        token: None,
        now: fx.now(),
        entropy: &const { crate::attest::Entropy::from_seed([7; 32]) },
    };
    let keys = fx.attestor.plan(&request).unwrap().facts;
    assert_eq!(keys.len(), 3);
    assert_eq!(keys[0], FactKey::Node(NODE.into()));
    assert_eq!(keys[1], FactKey::Certificate(fx.cert.serial.clone()));
    assert!(matches!(&keys[2], FactKey::Use { attestor, .. } if attestor == "x509pop"));
}

#[test]
fn a_valid_certificate_re_joins_too_and_the_grace_bound_is_inclusive() {
    let fx = fixture();
    let before = fx.not_after - TimeDuration::hours(1);
    admitted(fx.run_as(&fx.evidence_at(before), &fx.facts(), NodeRole::Node, before));
    let edge = fx.not_after + TimeDuration::days(7);
    admitted(fx.run_as(&fx.evidence_at(edge), &fx.facts(), NodeRole::Node, edge));
}

#[test]
fn malformed_evidence() {
    let fx = fixture();
    let good = fx.evidence();
    let cases: Vec<Vec<u8>> = vec![
        b"not json".to_vec(),
        vec![0xff, 0xfe],
        b"[]".to_vec(),
        with_json(|v| v["v"] = "1".into(), &good),
        with_json(|v| drop(v.as_object_mut().unwrap().remove("sig")), &good),
        with_json(|v| v["extra"] = 1.into(), &good),
        with_json(|v| v["chain"] = serde_json::json!([]), &good),
        with_json(|v| v["chain"][0] = "a+/=".into(), &good),
        with_json(|v| v["nodeId"] = "../x".into(), &good),
        with_json(|v| v["clientTime"] = (-1).into(), &good),
        with_json(|v| v["sig"] = "!!".into(), &good),
    ];
    for case in cases {
        let (reason, tenant) = refused(fx.run(&case, &fx.facts()));
        assert_eq!(
            reason,
            "x509pop:malformed",
            "{}",
            String::from_utf8_lossy(&case)
        );
        assert_eq!(tenant, None);
    }
}

#[test]
fn padded_base64_is_malformed() {
    let fx = fixture();
    let good = fx.evidence();
    let padded = with_json(
        |v| {
            let sig = v["sig"].as_str().unwrap().to_owned();
            v["sig"] = format!("{sig}==").into();
        },
        &good,
    );
    assert_eq!(refused(fx.run(&padded, &fx.facts())).0, "x509pop:malformed");
}

#[test]
fn unsupported_version() {
    let fx = fixture();
    let v2 = with_json(|v| v["v"] = 2.into(), &fx.evidence());
    assert_eq!(
        refused(fx.run(&v2, &fx.facts())),
        ("x509pop:unsupported-version".into(), None)
    );
    // A later version is recognised before its other fields are read.
    assert_eq!(
        refused(fx.run(br#"{"v":2,"other":true}"#, &fx.facts())).0,
        "x509pop:unsupported-version"
    );
}

#[test]
fn unknown_certificate() {
    let fx = fixture();
    let evidence = fx.evidence();
    // No row with that serial.
    let (reason, tenant) = refused(fx.run(&evidence, &Facts::default()));
    assert_eq!(
        (reason.as_str(), tenant),
        ("x509pop:unknown-certificate", None)
    );
    // A row with that serial, other bytes.
    let mut facts = fx.facts();
    if let Some(c) = facts.certificates.get_mut(&fx.cert.serial) {
        c.der.push(0);
    }
    assert_eq!(
        refused(fx.run(&evidence, &facts)),
        ("x509pop:unknown-certificate".into(), None)
    );
    // Not an agent certificate at all (the node CA's own certificate as the leaf).
    let ca_leaf = with_json(
        |v| v["chain"][0] = URL_SAFE_NO_PAD.encode(fx.keys.node_ca.cert_der()).into(),
        &evidence,
    );
    assert_eq!(
        refused(fx.run(&ca_leaf, &fx.facts())).0,
        "x509pop:unknown-certificate"
    );
}

#[test]
fn node_mismatch() {
    let fx = fixture();
    let other = build_evidence(
        &fx.chain(),
        &fx.node_key,
        fx.csr.sha256(),
        &NodeId::new("node_b").unwrap(),
        ms_of(fx.now()),
    )
    .unwrap();
    let (reason, tenant) = refused(fx.run(&other, &fx.facts()));
    assert_eq!(reason, "x509pop:node-mismatch");
    assert_eq!(tenant.as_deref(), Some("t1"));
}

#[test]
fn bad_chain() {
    let fx = fixture();
    let good = fx.evidence();
    let root = URL_SAFE_NO_PAD.encode(fx.keys.root_ca.cert_der());
    let leaf_only = with_json(|v| v["chain"] = serde_json::json!([v["chain"][0]]), &good);
    let wrong_issuer = with_json(|v| v["chain"][1] = root.clone().into(), &good);
    let three = with_json(
        |v| {
            let chain = v["chain"].as_array_mut().unwrap();
            chain.push(root.clone().into());
        },
        &good,
    );
    for case in [leaf_only, wrong_issuer, three] {
        assert_eq!(
            refused(fx.run(&case, &fx.facts())),
            ("x509pop:bad-chain".into(), Some("t1".into()))
        );
    }
    // A node CA certificate the attestor does not know (another deployment's).
    let other = X509PopAttestor::new(
        fx.keys.trust_domain.clone(),
        fx.keys.root_ca.cert_der().to_vec(),
    );
    let fx2 = Fx {
        attestor: other,
        ..fx
    };
    assert_eq!(refused(fx2.run(&good, &fx2.facts())).0, "x509pop:bad-chain");
}

/// A node CA renewed while the machine was off (same key and subject): its old chain and the new
/// one are admitted, another key's stays `bad-chain` (issue 40, item 14).
#[test]
fn a_node_ca_renewed_while_the_machine_was_off_still_admits_its_chain() {
    let mut fx = fixture();
    let old_chain_evidence = fx.evidence();
    let old_ca = fx.keys.node_ca.cert_der().to_vec();
    fx.keys
        .renew_ca(
            crate::pki::RenewableCa::Node,
            t0() + TimeDuration::days(30),
            TimeDuration::days(365),
        )
        .unwrap();
    assert_ne!(fx.keys.node_ca.cert_der(), &old_ca[..]);
    fx.attestor = X509PopAttestor::new(
        fx.keys.trust_domain.clone(),
        fx.keys.node_ca.cert_der().to_vec(),
    );
    let result = admitted(fx.run(&old_chain_evidence, &fx.facts()));
    assert_eq!(result.reclaim_node_id.as_deref(), Some(NODE));
    let new_ca = URL_SAFE_NO_PAD.encode(fx.keys.node_ca.cert_der());
    let new_chain = with_json(
        |v| v["chain"][1] = new_ca.clone().into(),
        &old_chain_evidence,
    );
    admitted(fx.run(&new_chain, &fx.facts()));
    let root = URL_SAFE_NO_PAD.encode(fx.keys.root_ca.cert_der());
    let other_key = with_json(|v| v["chain"][1] = root.clone().into(), &old_chain_evidence);
    assert_eq!(
        refused(fx.run(&other_key, &fx.facts())),
        ("x509pop:bad-chain".into(), Some("t1".into()))
    );
}

#[test]
fn stale_generation() {
    let fx = fixture();
    let mut facts = fx.facts();
    if let Some(n) = facts.nodes.get_mut(NODE) {
        n.identity_generation = 2;
    }
    assert_eq!(
        refused(fx.run(&fx.evidence(), &facts)),
        ("x509pop:stale-generation".into(), Some("t1".into()))
    );
}

#[test]
fn revoked() {
    let fx = fixture();
    let mut facts = fx.facts();
    if let Some(c) = facts.certificates.get_mut(&fx.cert.serial) {
        c.revoked = true;
    }
    assert_eq!(
        refused(fx.run(&fx.evidence(), &facts)),
        ("x509pop:revoked".into(), Some("t1".into()))
    );
}

#[test]
fn node_inactive() {
    let fx = fixture();
    for status in [NodeStatus::Retired, NodeStatus::Deleted] {
        let mut facts = fx.facts();
        if let Some(n) = facts.nodes.get_mut(NODE) {
            n.status = status;
        }
        assert_eq!(
            refused(fx.run(&fx.evidence(), &facts)),
            ("x509pop:node-inactive".into(), Some("t1".into()))
        );
    }
    // The certificate's node not loaded at all: nobody to attribute it to.
    let mut facts = fx.facts();
    facts.nodes.clear();
    assert_eq!(
        refused(fx.run(&fx.evidence(), &facts)).0,
        "x509pop:unknown-certificate"
    );
}

#[test]
fn wrong_role() {
    let fx = fixture();
    let (reason, tenant) =
        refused(fx.run_as(&fx.evidence(), &fx.facts(), NodeRole::Site, fx.now()));
    assert_eq!(reason, "x509pop:wrong-role");
    assert_eq!(tenant.as_deref(), Some("t1"));
    // A lessee's node-tenant certificate re-joins as node, keeping the node's role.
    let lessee = fixture_with(NodeRole::NodeTenant, Vec::new());
    let result = admitted(lessee.run(&lessee.evidence(), &lessee.facts()));
    assert_eq!(result.role, NodeRole::NodeTenant);
    // x509pop admits node and site only.
    assert_eq!(fx.attestor.roles(), &[NodeRole::Node, NodeRole::Site]);
}

#[test]
fn key_statement() {
    let uri = UriStatement::new("urn:bc:tpm-ak:sha256:00ff").unwrap();
    let fx = fixture_with(NodeRole::Node, vec![uri]);
    assert_eq!(
        refused(fx.run(&fx.evidence(), &fx.facts())),
        ("x509pop:key-statement".into(), Some("t1".into()))
    );
}

#[test]
fn expired_beyond_grace() {
    let fx = fixture();
    let late = fx.not_after + TimeDuration::days(7) + TimeDuration::milliseconds(1);
    let verdict = fx.run_as(&fx.evidence_at(late), &fx.facts(), NodeRole::Node, late);
    assert_eq!(
        refused(verdict),
        ("x509pop:expired-beyond-grace".into(), Some("t1".into()))
    );
    // A shorter grace, configured.
    let fresh = fixture();
    let short = Fx {
        attestor: fresh.attestor.clone().with_grace(Duration::from_secs(3600)),
        ..fresh
    };
    assert_eq!(
        refused(short.run(&short.evidence(), &short.facts())).0,
        "x509pop:expired-beyond-grace"
    );
}

#[test]
fn bad_signature() {
    let fx = fixture();
    // Signed for another CSR.
    let other_csr =
        VerifiedCsr::verify(&build_csr(&PrivateKey::generate(KeyRole::Node).unwrap()).unwrap())
            .unwrap();
    let for_other = build_evidence(
        &fx.chain(),
        &fx.node_key,
        other_csr.sha256(),
        &NodeId::new(NODE).unwrap(),
        ms_of(fx.now()),
    )
    .unwrap();
    // Signed by another key.
    let stranger = PrivateKey::generate(KeyRole::Node).unwrap();
    let by_stranger = build_evidence(
        &fx.chain(),
        &stranger,
        fx.csr.sha256(),
        &NodeId::new(NODE).unwrap(),
        ms_of(fx.now()),
    )
    .unwrap();
    // A renew-pop signature over the very same fields.
    let renew = RenewPop {
        csr_sha256: *fx.csr.sha256(),
        node_id: NodeId::new(NODE).unwrap(),
        client_time_ms: ms_of(fx.now()),
    };
    let renew_sig = sign(&fx.node_key, &renew).unwrap().to_base64url();
    let renew_pop = with_json(|v| v["sig"] = renew_sig.clone().into(), &fx.evidence());
    // The client time changed after signing; a 63-byte signature.
    let shifted = with_json(
        |v| v["clientTime"] = (ms_of(fx.now()) + 1).into(),
        &fx.evidence(),
    );
    let short = with_json(
        |v| v["sig"] = URL_SAFE_NO_PAD.encode([7u8; 63]).into(),
        &fx.evidence(),
    );
    for case in [for_other, by_stranger, renew_pop, shifted, short] {
        assert_eq!(
            refused(fx.run(&case, &fx.facts())),
            ("x509pop:bad-signature".into(), Some("t1".into()))
        );
    }
}

#[test]
fn clock_skew() {
    let fx = fixture();
    for skew in [-60_001i64, 60_001] {
        let client = fx.now() + TimeDuration::milliseconds(skew);
        assert_eq!(
            refused(fx.run(&fx.evidence_at(client), &fx.facts())),
            ("x509pop:clock-skew".into(), Some("t1".into()))
        );
    }
    for skew in [-60_000i64, 60_000] {
        let client = fx.now() + TimeDuration::milliseconds(skew);
        admitted(fx.run(&fx.evidence_at(client), &fx.facts()));
    }
}

#[test]
fn reused() {
    let fx = fixture();
    let evidence = fx.evidence();
    let subject = admitted(fx.run(&evidence, &fx.facts())).single_use[0].subject;
    let mut facts = fx.facts();
    facts.uses.insert(("x509pop".into(), subject));
    assert_eq!(
        refused(fx.run(&evidence, &facts)),
        ("x509pop:reused".into(), Some("t1".into()))
    );
    // The refusal names the spent proof (a lost answer asked again is answered from it).
    let Verdict::Refuse(refusal) = fx.run(&evidence, &facts) else {
        panic!("refused")
    };
    assert_eq!(
        refusal.spent.as_deref(),
        Some(&crate::attest::SpentUse {
            attestor: "x509pop".into(),
            subject
        })
    );
    // The same proof recorded under another attestor is no use of this one.
    let mut facts = fx.facts();
    facts.uses.insert(("renew-pop".into(), subject));
    admitted(fx.run(&evidence, &facts));
}

#[test]
fn every_reason_is_prefixed_and_unique() {
    let mut all: Vec<String> = X509PopRefusal::ALL.iter().map(|r| r.to_string()).collect();
    assert!(all.iter().all(|r| r.starts_with("x509pop:")));
    for r in X509PopRefusal::ALL {
        assert_eq!(r.refusal().text(), r.to_string());
    }
    let n = all.len();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), n);
}

#[test]
fn the_evidence_is_the_documented_json() {
    let fx = fixture();
    let value: serde_json::Value = serde_json::from_slice(&fx.evidence()).unwrap();
    let keys: Vec<&str> = value
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys.len(), 5);
    for k in ["v", "nodeId", "chain", "clientTime", "sig"] {
        assert!(keys.contains(&k), "{k}");
    }
    assert_eq!(value["v"], 1);
    assert_eq!(value["nodeId"], NODE);
    let sig = URL_SAFE_NO_PAD
        .decode(value["sig"].as_str().unwrap())
        .unwrap();
    assert_eq!(sig.len(), 64);
    let parsed = X509PopEvidence::parse(&fx.evidence()).unwrap();
    assert_eq!(parsed.chain, fx.chain());
    // Only a node key signs x509pop proofs.
    assert!(build_evidence(
        &fx.chain(),
        &fx.keys.join_signing,
        fx.csr.sha256(),
        &NodeId::new(NODE).unwrap(),
        1
    )
    .is_err());
}
