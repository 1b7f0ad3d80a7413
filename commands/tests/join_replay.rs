//! A JoinRequest admits one node at most (issue 17 item 6): the node key its CSR carries is
//! recorded in `attestation_uses` (attestor `join-token`, subject SHA-256 of the CSR's
//! SubjectPublicKeyInfo) for the token's lifetime, so the same key in a freshly made and freshly
//! sealed CSR is refused `join-token:csr-key-used`, and the same request bytes sent again get the
//! identity the first one was issued, spending nothing and making no node (issue 40: a join
//! whose answer was lost is answered again), on both backends and under real concurrency on
//! Postgres.

use crate::identity_support;

use std::sync::Arc;

use commands::identity::{IdentityError, NewToken};
use domain::pki::{build_csr, KeyRole, PrivateKey};
use events::store::testkit::TestDb;
use events::store::EventStore;
use identity_support::*;

const KEY_USED: &str = "join-token:csr-key-used";

fn count(events: &[events::RecordedEvent], event_type: &str) -> usize {
    events.iter().filter(|e| e.event_type == event_type).count()
}

/// The attack as found: the same request bytes four times on a 3-use token made three nodes
/// for one CSR key. Now the first joins and the three replays get its identity again: one node,
/// one use spent, nothing appended.
#[tokio::test]
async fn the_same_request_four_times_on_a_three_use_token_makes_one_node() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let created = f
            .svc
            .create_token(&NewToken {
                uses: 3,
                ..token_spec("t1")
            })
            .await
            .unwrap();
        let agent = Agent::new();
        let request = join_request(&f, &agent, &created.secret, "node", Default::default());
        let mut outcomes = Vec::new();
        for _ in 0..4 {
            outcomes.push(f.svc.join(&request).await);
        }
        let first = match &outcomes[0] {
            Ok(answer) => answer.clone(),
            other => panic!("the first join: {other:?}"),
        };
        for replay in outcomes.drain(1..) {
            let replay = replay.expect("a replay is answered again");
            assert_eq!(
                (&replay.node_id, &replay.certificate_chain),
                (&first.node_id, &first.certificate_chain)
            );
        }
        assert_eq!(f.svc.list_nodes(None).await.unwrap().len(), 1);
        let token = &f.svc.list_tokens(Some("t1")).await.unwrap()[0];
        assert_eq!(token.uses_left, 2, "a replay spends no use");
        let all = all_events(&f.store).await;
        assert_eq!(count(&all, "node.joined"), 1);
        assert_eq!(count(&all, "node.certificate.issued"), 1);
        assert_eq!(count(&all, "token.used"), 1);
        assert_eq!(
            refusals(&f.store).await,
            vec![],
            "nothing appended for a replay"
        );
        // The same key in another CSR is the attack's other half: refused.
        let same_key = PrivateKey::from_pkcs8_der(KeyRole::Node, agent.key.pkcs8_der()).unwrap();
        let again = Agent {
            csr: build_csr(&same_key).unwrap(),
            key: same_key,
        };
        let req = join_request(&f, &again, &created.secret, "node", Default::default());
        assert_join_denied(f.svc.join(&req).await);
        let (_, event) = last_join_refusal(&f.store).await;
        assert_eq!(event.refusal, KEY_USED);
        assert_eq!(event.csr_sha256, again.csr_sha256().to_vec());
        assert_eq!(event.token_id, created.token.token_id);
    }
}

/// The same key in a new CSR (other DER bytes, so another CSR digest) with a freshly sealed
/// token is refused too, with this token and with another one.
#[tokio::test]
async fn the_same_key_in_a_new_csr_is_refused_on_any_token() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let first = f.svc.create_token(&token_spec("t1")).await.unwrap();
        let second = f.svc.create_token(&token_spec("t2")).await.unwrap();
        let agent = Agent::new();
        f.svc
            .join(&join_request(
                &f,
                &agent,
                &first.secret,
                "node",
                Default::default(),
            ))
            .await
            .expect("the first join");
        let same_key = PrivateKey::from_pkcs8_der(KeyRole::Node, agent.key.pkcs8_der()).unwrap();
        let again = Agent {
            csr: build_csr(&same_key).unwrap(),
            key: same_key,
        };
        assert_ne!(again.csr, agent.csr, "a new CSR, new bytes");
        for (secret, tenant) in [(&first.secret, "t1"), (&second.secret, "t2")] {
            let req = join_request(&f, &again, secret, "node", Default::default());
            assert_join_denied(f.svc.join(&req).await);
            assert_last_refusal(&f.store, tenant, KEY_USED).await;
        }
        assert_eq!(f.svc.list_nodes(None).await.unwrap().len(), 1);
        // A new key joins with either token.
        for secret in [&first.secret, &second.secret] {
            let req = join_request(&f, &Agent::new(), secret, "node", Default::default());
            f.svc.join(&req).await.expect("a new key joins");
        }
        assert_eq!(f.svc.list_nodes(None).await.unwrap().len(), 3);
    }
}

/// The key's use lasts as long as the token: while it lives the same request is answered again,
/// and once the token expired and maintenance pruned the row, a replay is refused as `expired`
/// (the token's own rule) and the row is gone.
#[tokio::test]
async fn the_key_use_is_kept_for_the_token_lifetime_and_pruned_after() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let created = f
            .svc
            .create_token(&NewToken {
                ttl_seconds: 600,
                ..token_spec("t1")
            })
            .await
            .unwrap();
        let agent = Agent::new();
        let request = join_request(&f, &agent, &created.secret, "node", Default::default());
        let first = f.svc.join(&request).await.expect("the first join");
        f.clock.advance_secs(599);
        let again = f.svc.join(&request).await.expect("answered again");
        assert_eq!(again.certificate_chain, first.certificate_chain);
        assert_eq!(refusals(&f.store).await, vec![]);
        assert_eq!(
            f.svc.maintain().await.unwrap().pruned,
            0,
            "kept while the token lives"
        );
        f.clock.advance_secs(1);
        assert_eq!(f.svc.maintain().await.unwrap().pruned, 1);
        assert_join_denied(f.svc.join(&request).await);
        assert_last_refusal(&f.store, "t1", "join-token:expired").await;
    }
}

/// (Postgres) The same request ten times at once on a 10-use token: exactly one node; every
/// other request gets its identity again, and nine uses are left.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_parallel_copies_of_one_request_make_one_node() {
    let db = TestDb::postgres().await.unwrap();
    let store = EventStore::Postgres(db.pg_store(20).await.unwrap());
    let f = Arc::new(fixture_on(db, store).await);
    let created = f
        .svc
        .create_token(&NewToken {
            uses: 10,
            ..token_spec("t1")
        })
        .await
        .unwrap();
    let request = Arc::new(join_request(
        &f,
        &Agent::new(),
        &created.secret,
        "node",
        Default::default(),
    ));
    let barrier = Arc::new(tokio::sync::Barrier::new(10));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..10 {
        let (f, request, barrier) = (f.clone(), request.clone(), barrier.clone());
        tasks.spawn(async move {
            barrier.wait().await;
            f.svc.join(&request).await
        });
    }
    let mut answers = Vec::new();
    while let Some(r) = tasks.join_next().await {
        match r.unwrap() {
            Ok(answer) => answers.push(answer),
            Err(e @ IdentityError::AccessDenied(_)) => panic!("refused: {e}"),
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    assert_eq!(answers.len(), 10);
    assert!(answers
        .iter()
        .all(|a| a.node_id == answers[0].node_id
            && a.certificate_chain == answers[0].certificate_chain));
    assert_eq!(f.svc.list_nodes(None).await.unwrap().len(), 1);
    let token = &f.svc.list_tokens(Some("t1")).await.unwrap()[0];
    assert_eq!(token.uses_left, 9);
    let all = all_events(&f.store).await;
    assert_eq!(count(&all, "token.used"), 1);
    assert_eq!(count(&all, "node.joined"), 1);
    assert_eq!(refusals(&f.store).await, vec![]);
}
