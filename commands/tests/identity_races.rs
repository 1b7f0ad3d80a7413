//! (Postgres) Races under real concurrency: 200 concurrent joins with one single-use token, exactly
//! one node joins; one renew proof sent to two replicas at once, exactly one renewal.

use crate::identity_support;

use std::sync::Arc;

use commands::identity::{IdentityError, NewToken};
use events::store::testkit::TestDb;
use events::store::EventStore;
use identity_support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_concurrent_joins_one_single_use_token() {
    let db = TestDb::postgres().await.unwrap();
    let store = EventStore::Postgres(db.pg_store(220).await.unwrap());
    let f = Arc::new(fixture_on(db, store).await);
    let created = f
        .svc
        .create_token(&NewToken {
            uses: 1,
            ..token_spec("t1")
        })
        .await
        .unwrap();
    let requests: Vec<commands::identity::JoinRequest> = (0..200)
        .map(|_| {
            join_request(
                &f,
                &Agent::new(),
                &created.secret,
                "node",
                Default::default(),
            )
        })
        .collect();
    let barrier = Arc::new(tokio::sync::Barrier::new(requests.len()));
    let mut tasks = tokio::task::JoinSet::new();
    for req in requests {
        let f = f.clone();
        let barrier = barrier.clone();
        tasks.spawn(async move {
            barrier.wait().await;
            f.svc.join(&req).await
        });
    }
    let (mut joined, mut denied) = (0, 0);
    while let Some(r) = tasks.join_next().await {
        match r.unwrap() {
            Ok(_) => joined += 1,
            Err(IdentityError::AccessDenied(_)) => denied += 1,
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    assert_eq!((joined, denied), (1, 199));
    assert_eq!(f.svc.list_nodes(None).await.unwrap().len(), 1);
    let token = &f.svc.list_tokens(Some("t1")).await.unwrap()[0];
    assert_eq!(token.uses_left, 0);
    let uses = all_events(&f.store)
        .await
        .iter()
        .filter(|e| e.event_type == "token.used")
        .count();
    assert_eq!(uses, 1);
    // Every loser is a no-use-left refusal: 60 recorded, the rest counted as suppressed.
    let refused = refusals(&f.store).await;
    assert_eq!(refused.len(), 60);
    assert!(refused
        .iter()
        .all(|(t, r)| t == "t1" && r == "join-token:no-use-left"));
}

/// (Postgres) One captured renew request sent 50 times at once, half to each of two replicas
/// (two JoinServices, each with its own connection pool, on one database): exactly one renews,
/// every other is a `renew:replay` refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_renew_proof_sent_to_two_replicas_at_once_renews_once() {
    use commands::identity::{IdentityConfig, JoinService};
    let db = TestDb::postgres().await.unwrap();
    let first = EventStore::Postgres(db.pg_store(30).await.unwrap());
    let second = EventStore::Postgres(db.pg_store(30).await.unwrap());
    let f = Arc::new(fixture_on(db, first).await);
    let replica = Arc::new(
        JoinService::new(
            second,
            f.keys.clone(),
            Arc::new(f.clock.clone()),
            IdentityConfig::new(domain::pki::TrustDomain::new(TD).unwrap()),
        )
        .unwrap(),
    );
    let (agent, body) = join_new(&f, "t1").await;
    f.clock.advance_secs(60);
    let req = Arc::new(renew_request(
        &agent,
        &body.certificate_chain[0],
        &body.node_id,
        &Agent::new(),
        now_ms(&f),
    ));
    let barrier = Arc::new(tokio::sync::Barrier::new(50));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..50 {
        let (f, replica, req, barrier) = (f.clone(), replica.clone(), req.clone(), barrier.clone());
        tasks.spawn(async move {
            barrier.wait().await;
            if i % 2 == 0 {
                f.svc.renew(&req).await
            } else {
                replica.renew(&req).await
            }
        });
    }
    let (mut renewed, mut denied) = (0, 0);
    while let Some(r) = tasks.join_next().await {
        match r.unwrap() {
            Ok(_) => renewed += 1,
            Err(IdentityError::AccessDenied(_)) => denied += 1,
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    assert_eq!((renewed, denied), (1, 49));
    let all = all_events(&f.store).await;
    let issued = all
        .iter()
        .filter(|e| e.event_type == "node.certificate.issued")
        .count();
    assert_eq!(issued, 2, "the join's certificate and one renewal");
    let proofs = all
        .iter()
        .filter(|e| e.event_type == "attestation.evidence.used")
        .filter_map(|e| e.decode::<events::schema::EvidenceUsed>().ok())
        .filter(|u| u.attestor == "renew-pop")
        .count();
    assert_eq!(proofs, 1);
    let refused = refusals(&f.store).await;
    assert_eq!(refused.len(), 49);
    assert!(refused
        .iter()
        .all(|(t, r)| t == "t1" && r == "renew:replay"));
}
