//! Ramdisk certificates through the real JoinService, on both backends (issue 20 item 2, 3): a
//! ramdisk certificate lives at most `[attestors.discovery] cert_ttl` (never above 2 h) at join
//! and at every renewal, and the command kinds its join allowed are stored on the certificate
//! row (`node_certs.allowed_kinds`) and carried into each renewal. The ramdisk joins through a
//! test attestor that answers role ramdisk with allowed kinds (the discovery joins through real
//! site leases are the end-to-end tests').

use std::sync::Arc;

use commands::identity::{AttestorRegistry, IdentityConfig, JoinRequest, JoinService};
use domain::attest::{
    AttestRequest, AttestationResult, Attestor, AttestorRefusal, Facts, NodeKeyStatement, Planned,
    Verdict,
};
use domain::identity::JoinInput;
use domain::pki::{NodeRole, TrustDomain};
use events::schema::NodeCertificateIssued;
use events::store::testkit::TestDb;
use events::EventPayload;

use crate::identity_support::*;

const KINDS: [&str; 2] = ["disk.wipe", "diag.*"];

/// Admits any ramdisk into t9/site-1/pool-r with [`KINDS`].
struct TestRamdisk;

const RAMDISK_ONLY: &[NodeRole] = &[NodeRole::Ramdisk];

impl Attestor for TestRamdisk {
    type Plan = ();
    fn id(&self) -> &str {
        "test-ramdisk"
    }
    fn roles(&self) -> &[NodeRole] {
        RAMDISK_ONLY
    }
    fn plan(&self, _request: &AttestRequest<'_>) -> Result<Planned<()>, AttestorRefusal> {
        Ok(Planned::new(Vec::new(), ()))
    }
    fn verify(&self, request: &AttestRequest<'_>, _plan: &(), _facts: &Facts) -> Verdict {
        Verdict::Admit(Box::new(AttestationResult {
            tenant_id: "t9".into(),
            role: request.role,
            site_id: "site-1".into(),
            pool_id: "pool-r".into(),
            reclaim_node_id: None,
            token: None,
            bind: Vec::new(),
            single_use: Vec::new(),
            node_key: NodeKeyStatement::Unattested,
            allowed_kinds: KINDS.iter().map(|k| (*k).to_owned()).collect(),
            approval: None,
        }))
    }
}

/// The fixture's service, with `cert_ttl` for ramdisks and the test attestor registered.
fn service(f: &Fixture, cert_ttl: std::time::Duration) -> JoinService {
    let mut config = IdentityConfig::new(TrustDomain::new(TD).unwrap());
    config.discovery.cert_ttl = cert_ttl;
    let svc = JoinService::new(
        f.store.clone(),
        f.keys.clone(),
        Arc::new(f.clock.clone()),
        config,
    )
    .expect("service");
    let mut registry = AttestorRegistry::builtin();
    registry.register_in_process(Arc::new(TestRamdisk));
    svc.with_attestors(registry)
}

fn ramdisk_join(agent: &Agent) -> JoinRequest {
    JoinRequest {
        attestor: "test-ramdisk".into(),
        input: JoinInput {
            csr_der: agent.csr.clone(),
            role: "ramdisk".into(),
            ..JoinInput::default()
        },
    }
}

/// Every `node.certificate.issued` in the log, in order.
async fn issued(f: &Fixture) -> Vec<NodeCertificateIssued> {
    all_events(&f.store)
        .await
        .into_iter()
        .filter(|e| e.event_type == NodeCertificateIssued::EVENT_TYPE)
        .map(|e| e.decode().unwrap())
        .collect()
}

async fn join_and_renew_twice(f: &Fixture, svc: &JoinService, want_lifetime_us: i64) {
    let agent = Agent::new();
    let joined = svc
        .join(&ramdisk_join(&agent))
        .await
        .expect("ramdisk joins");
    assert_eq!(joined.role, "ramdisk");
    // The answer bcd verifies carries them (issue 40 item 16: bcd enforces them too).
    assert_eq!(joined.allowed_kinds, KINDS);
    let mut leaf = joined.certificate_chain[0].clone();
    let mut current = agent;
    for _ in 0..2 {
        f.clock.advance_secs(300);
        let next = Agent::new();
        let req = renew_request(&current, &leaf, &joined.node_id, &next, now_ms(f));
        let renewed = svc.renew(&req).await.expect("ramdisk renews");
        assert_eq!(renewed.allowed_kinds, KINDS);
        leaf = renewed.certificate_chain[0].clone();
        current = next;
    }
    let certs = issued(f).await;
    let mine: Vec<_> = certs
        .iter()
        .filter(|c| c.node_id == joined.node_id)
        .collect();
    assert_eq!(mine.len(), 3, "a join and two renewals");
    assert_eq!(
        mine.iter().map(|c| c.cause.as_str()).collect::<Vec<_>>(),
        vec!["join", "renew", "renew"]
    );
    for c in &mine {
        assert_eq!(
            c.not_after_us - c.not_before_us,
            want_lifetime_us,
            "{}",
            c.cause
        );
        assert_eq!(c.allowed_kinds, KINDS, "{}", c.cause);
    }
    // The rows carry them too, and `node show` reads them.
    let detail = svc.show_node(&joined.node_id).await.unwrap();
    assert_eq!(detail.certificates.len(), 3);
    for c in &detail.certificates {
        assert_eq!(c.allowed_kinds, KINDS);
        assert_eq!(c.not_after_us - c.not_before_us, want_lifetime_us);
    }
}

#[tokio::test]
async fn a_ramdisk_certificate_lives_at_most_its_cert_ttl_at_join_and_each_renewal() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let svc = service(&f, std::time::Duration::from_secs(30 * 60));
        // The span: 30 minutes from issuance, notBefore backdated a tenth of that
        // (domain::pki::BACKDATE, at most 5 minutes).
        join_and_renew_twice(&f, &svc, 33 * 60 * 1_000_000).await;
    }
}

#[tokio::test]
async fn a_ramdisk_certificate_lives_two_hours_by_default_under_day_long_leaves() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let svc = service(&f, domain::attest::discovery::MAX_CERT_TTL);
        join_and_renew_twice(&f, &svc, 2 * 3600 * 1_000_000).await;
    }
}

#[tokio::test]
async fn a_node_certificate_keeps_no_kinds_and_the_leaf_lifetime() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let (_, joined) = join_new(&f, "t1").await;
        let detail = f.svc.show_node(&joined.node_id).await.unwrap();
        assert_eq!(detail.certificates.len(), 1);
        let c = &detail.certificates[0];
        assert!(c.allowed_kinds.is_empty());
        assert!(joined.allowed_kinds.is_empty());
        assert_eq!(c.not_after_us - c.not_before_us, 24 * 3600 * 1_000_000);
    }
}
