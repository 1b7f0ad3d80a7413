//! (Postgres) 200 concurrent joins with one single-use token: exactly one node joins.

mod identity_support;

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
    let requests: Vec<proto::JoinRequest> = (0..200)
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
