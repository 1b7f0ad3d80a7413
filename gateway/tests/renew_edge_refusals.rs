//! Renewals refused at the gateway's own TLS handshake are `security.renew.refused` events
//! (issue 40, item 15), as the JoinService's renewal refusals are: a revoked node certificate
//! (`renew:revoked`, in the node's tenant: the leaf is its stored certificate) and an expired
//! one (`renew:expired`, in the root tenant: a leaf nobody stored), each naming the node and
//! serial the leaf claims with no CSR; and a flood of refused handshakes writes at most the
//! per-minute bound of events per reason, every other refusal counted in a
//! `security.refusals.suppressed` event, none lost.
//!
//! Run: `cargo test -p gateway --test suite renew_edge_refusals::`.

use crate::common;

use std::time::{Duration, Instant};

use common::{start, Env, TD};
use domain::pki::{
    build_csr, issue_node_certificate, KeyRole, NodeCertificateDecision, NodeIdentity, NodeRole,
    PrivateKey, Serial, SpiffeId, TrustDomain, VerifiedCsr,
};
use events::schema::{RefusalsSuppressed, RenewRefused};
use events::store::{EventStore, LogStore};
use events::RecordedEvent;
use time::OffsetDateTime;

async fn all_events(store: &EventStore) -> Vec<RecordedEvent> {
    store.read_batch(0, 1_000_000).await.unwrap()
}

/// The (tenant, event) of every `security.renew.refused` in the log.
async fn renew_refusals(store: &EventStore) -> Vec<(String, RenewRefused)> {
    all_events(store)
        .await
        .into_iter()
        .filter(|e| e.event_type == "security.renew.refused")
        .map(|e| (e.tenant_id.clone(), e.decode::<RenewRefused>().unwrap()))
        .collect()
}

/// Waits up to 10 s for `n` renewal refusals in the log.
async fn refusals_within(store: &EventStore, n: usize) -> Vec<(String, RenewRefused)> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let found = renew_refusals(store).await;
        if found.len() >= n || Instant::now() > deadline {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Whether a connection presenting `chain` and `key` gets no call through.
async fn refused_at_handshake(env: &Env, chain: &[Vec<u8>], key: &PrivateKey) -> bool {
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::HealthCheckRequest;
    let identity = Some((chain.to_vec(), key.pkcs8_der().to_vec()));
    match common::channel(env.gateway.addr, env.keys.serving_ca.cert_der(), identity).await {
        Err(_) => true,
        Ok(channel) => HealthClient::new(channel)
            .check(HealthCheckRequest {
                service: String::new(),
            })
            .await
            .is_err(),
    }
}

/// One TLS handshake (no client library that reconnects): whether the gateway refused it. A
/// refused certificate surfaces as the server's alert at the first read; one let in would wait
/// for the session's first frame, so a read still pending after 2 s means admitted.
async fn refused_at_one_handshake(env: &Env, chain: &[Vec<u8>], key: &PrivateKey) -> bool {
    use tokio::io::AsyncReadExt as _;
    let identity = Some((chain.to_vec(), key.pkcs8_der().to_vec()));
    match common::wire_connect(env.gateway.addr, env.keys.serving_ca.cert_der(), identity).await {
        Err(_) => true,
        Ok(mut wire) => {
            let mut byte = [0u8; 1];
            matches!(
                tokio::time::timeout(Duration::from_secs(2), wire.read(&mut byte)).await,
                Ok(Err(_) | Ok(0))
            )
        }
    }
}

fn serial_of(leaf: &[u8]) -> String {
    NodeIdentity::from_leaf_der(leaf, &TrustDomain::new(TD).unwrap())
        .unwrap()
        .serial
        .to_hex()
}

/// A revoked node renewing (or reconnecting) is refused at the handshake: one
/// `security.renew.refused` event, `renew:revoked`, in its tenant.
async fn revoked(env: Env) {
    let node = env.join_node(&env.token(1).await).await;
    env.join
        .revoke_identity(&node.node_id, "compromised")
        .await
        .unwrap();
    // The feed applies the revocation within a second; then the handshake refuses it.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !refused_at_handshake(&env, &node.chain, &node.key).await {
        assert!(
            Instant::now() < deadline,
            "the revoked certificate is let in"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let found = refusals_within(&env.store, 1).await;
    assert!(
        !found.is_empty(),
        "no security.renew.refused event for a certificate refused at the handshake as revoked"
    );
    let (tenant, event) = &found[0];
    assert_eq!(tenant, "t1");
    assert_eq!(event.refusal, "renew:revoked");
    assert_eq!(event.node_id, node.node_id);
    assert_eq!(event.serial, serial_of(&node.chain[0]));
    assert!(event.csr_sha256.is_empty(), "no request was read");
    env.gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_certificate_refused_at_the_handshake_is_a_renew_refused_event_on_sqlite() {
    let db = events::store::testkit::TestDb::sqlite().unwrap();
    revoked(start(db.store().await.unwrap(), |_| {}).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_certificate_refused_at_the_handshake_is_a_renew_refused_event_on_postgres() {
    let db = events::store::testkit::TestDb::postgres().await.unwrap();
    revoked(start(db.store().await.unwrap(), |_| {}).await).await;
}

/// A node certificate from the node CA that expired an hour ago (for a node id that exists
/// nowhere: a leaf nobody stored).
fn expired_leaf(env: &Env, node: &str) -> (Vec<Vec<u8>>, PrivateKey) {
    let key = PrivateKey::generate(KeyRole::Node).unwrap();
    let csr = VerifiedCsr::verify(&build_csr(&key).unwrap()).unwrap();
    let decision = NodeCertificateDecision {
        spiffe_id: SpiffeId::parse(&format!("spiffe://{TD}/site/s1/node/{node}")).unwrap(),
        role: NodeRole::Node,
        serial: Serial::generate().unwrap(),
        requested_lifetime: Some(time::Duration::minutes(5)),
        statements: vec![],
    };
    let issued_at = OffsetDateTime::now_utc() - time::Duration::hours(1);
    let cert = issue_node_certificate(&env.keys.node_ca, &csr, &decision, issued_at).unwrap();
    (vec![cert.der, env.keys.node_ca.cert_der().to_vec()], key)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_certificate_refused_at_the_handshake_is_a_renew_refused_event() {
    let db = events::store::testkit::TestDb::sqlite().unwrap();
    let env = start(db.store().await.unwrap(), |_| {}).await;
    let (chain, key) = expired_leaf(&env, "n-expired");
    // One handshake, one event (a gRPC client may reconnect, each time a handshake and an
    // event: on a loaded host tonic's channel made three).
    assert!(refused_at_one_handshake(&env, &chain, &key).await);
    let found = refusals_within(&env.store, 1).await;
    assert_eq!(found.len(), 1, "{found:?}");
    for (tenant, event) in &found {
        assert_eq!(
            tenant, "root",
            "a leaf nobody stored is attributed to no tenant"
        );
        assert_eq!(event.refusal, "renew:expired");
        assert_eq!(event.node_id, "n-expired");
        assert_eq!(event.serial, serial_of(&chain[0]));
        assert!(event.csr_sha256.is_empty());
    }
    env.gateway.shutdown().await;
}

/// 150 attempts with an expired certificate in a burst (each one or two refused handshakes):
/// at most 60 events per reason and minute (the refusal bound), the rest suppressed counts
/// written when the gateway stops, adding up to every refused handshake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_refused_handshakes_is_bounded_and_counted() {
    const N: usize = 150;
    let db = events::store::testkit::TestDb::sqlite().unwrap();
    let env = start(db.store().await.unwrap(), |_| {}).await;
    let (chain, key) = expired_leaf(&env, "n-flood");
    for _ in 0..N {
        assert!(refused_at_handshake(&env, &chain, &key).await);
    }
    // Each attempt may be more than one handshake (the client reconnects once); the gateway
    // counts every refused one.
    let handshakes = env
        .gateway
        .sources
        .handshake_refusals
        .by_reason()
        .get("chain")
        .copied()
        .unwrap_or(0);
    assert!(handshakes >= N as u64, "{handshakes} refused handshakes");
    let store = env.store.clone();
    env.gateway.shutdown().await;
    let events = all_events(&store).await;
    let mut per_window = std::collections::BTreeMap::<i64, u64>::new();
    let mut suppressed = 0;
    for e in &events {
        match e.event_type.as_str() {
            "security.renew.refused" => {
                let p: RenewRefused = e.decode().unwrap();
                assert_eq!(p.refusal, "renew:expired");
                *per_window.entry(p.window_start_us).or_default() += 1;
            }
            "security.refusals.suppressed" => {
                let p: RefusalsSuppressed = e.decode().unwrap();
                assert_eq!(
                    (p.kind.as_str(), p.refusal.as_str()),
                    ("renew", "renew:expired")
                );
                suppressed += p.count;
            }
            _ => {}
        }
    }
    assert!(
        per_window.values().all(|n| *n <= 60),
        "events per minute: {per_window:?}"
    );
    let recorded: u64 = per_window.values().sum();
    assert_eq!(
        recorded + suppressed,
        handshakes,
        "recorded {recorded}, suppressed {suppressed}"
    );
    assert!(suppressed > 0);
}
