//! Shared fixture of the identity tests: a fresh database, a key set, a JoinService on a
//! simulated clock, and agent-side helpers (CSR, sealed token, renew proof).

#![allow(dead_code)]

use std::sync::Arc;

use commands::identity::{
    IdentityConfig, IdentityError, JoinAnswer, JoinRequest, JoinService, NewToken, JOIN_REFUSED,
};
use commands::{Clock, SimClock};
use domain::identity::{ExpectBinding, HardwareClaims, JoinInput, RenewInput, TokenRole};
use domain::pki::statement::{sign, RenewPop};
use domain::pki::{
    build_csr, seal_token, KeyRole, KeySet, KeySetLifetimes, NodeId, PrivateKey, TokenSecret,
    TrustDomain,
};
use events::store::testkit::TestDb;
use events::store::{EventStore, LogStore};
use events::RecordedEvent;

pub const TD: &str = "compute.example.com";

pub struct Fixture {
    pub db: TestDb,
    pub store: EventStore,
    pub clock: SimClock,
    pub keys: Arc<KeySet>,
    pub svc: JoinService,
}

pub async fn fixture(db: TestDb) -> Fixture {
    let store = db.store().await.expect("store");
    fixture_on(db, store).await
}

pub async fn fixture_on(db: TestDb, store: EventStore) -> Fixture {
    let clock = SimClock::new();
    let td = TrustDomain::new(TD).unwrap();
    let keys = Arc::new(
        KeySet::generate(td.clone(), clock.now(), KeySetLifetimes::default()).expect("keys"),
    );
    let svc = JoinService::new(
        store.clone(),
        keys.clone(),
        Arc::new(clock.clone()),
        IdentityConfig::new(td),
    )
    .expect("service");
    Fixture {
        db,
        store,
        clock,
        keys,
        svc,
    }
}

pub fn token_spec(tenant: &str) -> NewToken {
    NewToken {
        tenant_id: tenant.into(),
        site_id: "site-1".into(),
        pool_id: "pool-1".into(),
        role: TokenRole::Node,
        uses: 5,
        ttl_seconds: 3600,
        expect: ExpectBinding::default(),
        allow_reclaim: false,
        reclaim_node_id: None,
        for_node_id: None,
        require_approval: false,
    }
}

pub struct Agent {
    pub key: PrivateKey,
    pub csr: Vec<u8>,
}

impl Agent {
    pub fn new() -> Agent {
        let key = PrivateKey::generate(KeyRole::Node).unwrap();
        let csr = build_csr(&key).unwrap();
        Agent { key, csr }
    }

    pub fn csr_sha256(&self) -> [u8; 32] {
        domain::identity::sha256(&self.csr)
    }
}

pub fn join_request(
    f: &Fixture,
    agent: &Agent,
    secret: &str,
    role: &str,
    claims: HardwareClaims,
) -> JoinRequest {
    let secret = TokenSecret::parse(secret).unwrap();
    let sealed = seal_token(
        f.keys.join_encryption.public_key(),
        &secret,
        &agent.csr_sha256(),
    )
    .unwrap();
    JoinRequest {
        attestor: String::new(),
        input: JoinInput {
            csr_der: agent.csr.clone(),
            sealed_token: sealed.as_bytes().to_vec(),
            role: role.into(),
            claims,
            attestation: Vec::new(),
            report: Default::default(),
        },
    }
}

/// A renew request: `current` proves possession over `next`'s CSR at `client_time_ms`.
pub fn renew_request(
    current: &Agent,
    leaf: &[u8],
    node_id: &str,
    next: &Agent,
    client_time_ms: i64,
) -> RenewInput {
    let pop = RenewPop {
        csr_sha256: next.csr_sha256(),
        node_id: NodeId::new(node_id).unwrap(),
        client_time_ms: client_time_ms as u64,
    };
    let sig = sign(&current.key, &pop).unwrap();
    RenewInput {
        csr_der: next.csr.clone(),
        chain: vec![leaf.to_vec()],
        client_time_ms: u64::try_from(client_time_ms).unwrap_or(0),
        signature: sig.as_bytes().to_vec(),
        key_attestation: None,
    }
}

pub fn now_ms(f: &Fixture) -> i64 {
    f.clock.now_us() / 1000
}

/// Every event in the log.
pub async fn all_events(store: &EventStore) -> Vec<RecordedEvent> {
    store.read_batch(0, 1_000_000).await.unwrap()
}

/// (tenant, refusal) of every security.*.refused event, in log order.
pub async fn refusals(store: &EventStore) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for e in all_events(store).await {
        match e.event_type.as_str() {
            "security.join.refused" => {
                let p: events::schema::JoinRefused = e.decode().unwrap();
                out.push((e.tenant_id.clone(), p.refusal));
            }
            "security.renew.refused" => {
                let p: events::schema::RenewRefused = e.decode().unwrap();
                out.push((e.tenant_id.clone(), p.refusal));
            }
            _ => {}
        }
    }
    out
}

pub fn assert_join_denied<T: std::fmt::Debug>(r: Result<T, IdentityError>) {
    match r {
        Err(IdentityError::AccessDenied(m)) => assert_eq!(m, JOIN_REFUSED),
        other => panic!("expected ACCESS_DENIED (Join refused), got {other:?}"),
    }
}

pub fn assert_renew_denied<T: std::fmt::Debug>(r: Result<T, IdentityError>) {
    match r {
        Err(IdentityError::AccessDenied(m)) => {
            assert_eq!(m, commands::identity::RENEW_REFUSED)
        }
        other => panic!("expected ACCESS_DENIED (Renew refused), got {other:?}"),
    }
}

/// The last refusal recorded must be exactly (tenant, reason).
pub async fn assert_last_refusal(store: &EventStore, tenant: &str, reason: &str) {
    let all = refusals(store).await;
    let last = all.last().expect("a refusal event");
    assert_eq!(
        (last.0.as_str(), last.1.as_str()),
        (tenant, reason),
        "refusals so far: {all:?}"
    );
}

/// An admitted join's answer after checking its CSR binding (its encoding and signature are the
/// edge's: `gateway/tests` checks them).
pub fn open_response(_f: &Fixture, agent: &Agent, answer: &JoinAnswer) -> JoinAnswer {
    assert_eq!(answer.csr_sha256, agent.csr_sha256());
    answer.clone()
}

/// Joins a fresh agent with a new token of `tenant`; returns (agent, response body, secret).
pub async fn join_new(f: &Fixture, tenant: &str) -> (Agent, JoinAnswer) {
    let created = f.svc.create_token(&token_spec(tenant)).await.unwrap();
    let agent = Agent::new();
    let req = join_request(f, &agent, &created.secret, "node", Default::default());
    let signed = f.svc.join(&req).await.unwrap();
    let body = open_response(f, &agent, &signed);
    (agent, body)
}

/// The last `security.join.refused` event, decoded, with its tenant.
pub async fn last_join_refusal(store: &EventStore) -> (String, events::schema::JoinRefused) {
    let e = all_events(store)
        .await
        .into_iter()
        .rev()
        .find(|e| e.event_type == "security.join.refused")
        .expect("a security.join.refused event");
    (e.tenant_id.clone(), e.decode().unwrap())
}

/// The last `security.renew.refused` event, decoded, with its tenant.
pub async fn last_renew_refusal(store: &EventStore) -> (String, events::schema::RenewRefused) {
    let e = all_events(store)
        .await
        .into_iter()
        .rev()
        .find(|e| e.event_type == "security.renew.refused")
        .expect("a security.renew.refused event");
    (e.tenant_id.clone(), e.decode().unwrap())
}

/// `openssl verify` of `chain[0]` at unix time `at`, trusting only `roots`, with the rest of
/// `chain` as untrusted intermediates: the check a relying party makes with what a
/// JoinResponse or RenewResponse carries. Panics with openssl's output when it fails.
pub fn openssl_verifies(chain: &[Vec<u8>], roots: &[Vec<u8>], at: i64) {
    let dir = tempfile::tempdir().unwrap();
    let pem = |name: &str, ders: &[Vec<u8>]| {
        let mut text = String::new();
        for (i, der) in ders.iter().enumerate() {
            let der_path = dir.path().join(format!("{name}-{i}.der"));
            std::fs::write(&der_path, der).unwrap();
            let out = std::process::Command::new("/usr/bin/openssl")
                .args(["x509", "-inform", "DER", "-in"])
                .arg(&der_path)
                .output()
                .unwrap();
            assert!(out.status.success(), "openssl x509: {out:?}");
            text.push_str(&String::from_utf8(out.stdout).unwrap());
        }
        let path = dir.path().join(format!("{name}.pem"));
        std::fs::write(&path, text).unwrap();
        path
    };
    let leaf = pem("leaf", &chain[..1]);
    let intermediates = pem("intermediates", &chain[1..]);
    let roots = pem("roots", roots);
    let out = std::process::Command::new("/usr/bin/openssl")
        .args(["verify", "-attime", &at.to_string(), "-CAfile"])
        .arg(&roots)
        .arg("-untrusted")
        .arg(&intermediates)
        .arg(&leaf)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "openssl verify: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
