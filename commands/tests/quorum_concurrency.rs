//! (Postgres) Real concurrency: settlers of the same bundle, each on its own OS thread with its
//! own runtime and store (own pool, own connections), released together by a barrier, publish one
//! version; two creates with one idempotency key make one batch.
//!
//! Threads rather than `tokio::spawn`: the futures of `commands::in_transaction` bodies (async
//! closures) are not provably `Send` to rustc today, so they cannot be spawned on a multi-thread
//! runtime; separate threads are the stronger test anyway (true parallelism).

use crate::quorum_support as support;

use std::future::Future;
use std::sync::{Arc, Barrier};

use commands::quorum::{create_batch, settle_trust_bundle, SettleOutcome, TRUST_BUNDLE_STREAM};
use commands::SimClock;
use domain::quorum::{ApproverSet, CreateBatch, ScopeLeafRequest};
use events::store::testkit::TestDb;
use events::store::{EventStore, LogStore};
use support::*;

#[tokio::test]
async fn two_settlers_of_the_same_bundle_publish_one_version() {
    let db = TestDb::postgres().await.unwrap();
    db.store().await.unwrap();
    let clock = SimClock::new();
    let mut config = config(ApproverSet::none(), 0, vec![]);
    for round in 1..=12u64 {
        if round > 1 {
            // New content each round: both settlers race to publish the next version.
            config.command_signing_roots.push(root(round as u8 + 10));
        }
        let url = db.url().to_string();
        let (config, clock) = (config.clone(), clock.clone());
        let outcomes = race(2, move |_| {
            let (url, config, clock) = (url.clone(), config.clone(), clock.clone());
            (url, move |store: EventStore| async move {
                settle_trust_bundle(&store, &clock, &config).await.unwrap()
            })
        });
        assert!(outcomes.iter().all(|s| s.version == round), "{outcomes:?}");
        let published = outcomes
            .iter()
            .filter(|s| matches!(s.outcome, SettleOutcome::Published { .. }))
            .count();
        assert_eq!(published, 1, "{outcomes:?}");
    }
    let store = db.store().await.unwrap();
    let stream = store.read_stream(TRUST_BUNDLE_STREAM).await.unwrap();
    let versions: Vec<u64> = stream
        .iter()
        .map(|e| {
            e.decode::<events::schema::TrustBundlePublished>()
                .unwrap()
                .version
        })
        .collect();
    assert_eq!(versions, (1..=12).collect::<Vec<_>>());
}

#[tokio::test]
async fn two_creates_with_one_key_make_one_batch() {
    let db = TestDb::postgres().await.unwrap();
    let seeded = db.store().await.unwrap();
    crate::quorum_support::seed_nodes(&seeded, "t1", 200).await;
    let clock = SimClock::new();
    let request = CreateBatch {
        tenant: "t1".into(),
        caller: "alice".into(),
        idempotency_key: "same".into(),
        reason: "reboot".into(),
        leaves: (0..200)
            .map(|i| ScopeLeafRequest {
                subject: format!("node-{i}"),
                kind: "node.reboot".into(),
                payload_sha256: None,
                payload: None,
            })
            .collect(),
        not_after_seconds: None,
    };
    let url = db.url().to_string();
    let created = race(2, move |_| {
        let (url, request, clock) = (url.clone(), request.clone(), clock.clone());
        (url, move |store: EventStore| async move {
            create_batch(&store, &clock, &request).await.unwrap()
        })
    });
    assert_eq!(created[0].batch_id, created[1].batch_id);
    assert_eq!(created.iter().filter(|c| c.retry).count(), 1);
}

/// Runs `n` bodies on `n` threads, each with its own runtime and store, released together.
fn race<T, F, Fut>(n: usize, make: impl Fn(usize) -> (String, F)) -> Vec<T>
where
    T: Send + 'static,
    F: FnOnce(EventStore) -> Fut + Send + 'static,
    Fut: Future<Output = T>,
{
    let barrier = Arc::new(Barrier::new(n));
    let threads: Vec<_> = (0..n)
        .map(|i| {
            let (url, body) = make(i);
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                let store = rt.block_on(EventStore::connect(&url)).unwrap();
                barrier.wait();
                rt.block_on(body(store))
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}
