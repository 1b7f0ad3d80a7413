//! Refused joins cost no store write each (issue 17 item 7: "every refused join is a store
//! write"): at most `refusals_per_minute` `security.join.refused` events per (kind, reason) and
//! minute, the rest counted in the process's memory and written by the maintenance flush as
//! `security.refusals.suppressed` counts that add up exactly; exact across two replicas on
//! Postgres. Renewals refused at a gateway's handshake (issue 40) go under the same bound, and
//! what their events say is decided from the stored certificate.

use crate::identity_support;

use std::sync::Arc;

use commands::identity::{IdentityConfig, JoinService};
use events::store::testkit::TestDb;
use events::store::{EventStore, LogStore, LogTx};
use identity_support::*;

/// (refusal, window, count) of every `security.refusals.suppressed` event.
async fn suppressed(store: &EventStore) -> Vec<(String, u64)> {
    all_events(store)
        .await
        .into_iter()
        .filter(|e| e.event_type == "security.refusals.suppressed")
        .map(|e| {
            let p: events::schema::RefusalsSuppressed = e.decode().unwrap();
            (p.refusal, p.count)
        })
        .collect()
}

/// Rows of the old per-refusal buffer table (each suppressed refusal was an upsert there).
async fn buffered_rows(store: &EventStore) -> i64 {
    let mut tx = store.begin().await.unwrap();
    let n = projections::inspect::row_count(&mut tx, "refusal_suppressed_pending")
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    n
}

/// 1,000 refusals of one reason in a minute, for each of the two paths (refused before the
/// token is looked up: a broken CSR; refused by the decision: an unknown token): exactly 60
/// events of each, nothing written for the other 940 until the flush, which writes 940.
#[tokio::test]
async fn a_thousand_refused_joins_write_sixty_events_and_one_exact_count() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let stranger = domain::pki::TokenSecret::generate().unwrap();
        let unknown = join_request(
            &f,
            &Agent::new(),
            stranger.expose(),
            "node",
            Default::default(),
        );
        let mut broken = unknown.clone();
        broken.input.csr_der[20] ^= 0xff;
        let head = f.store.head_position().await.unwrap();
        for _ in 0..1_000 {
            assert_join_denied(f.svc.join(&unknown).await);
            assert_join_denied(f.svc.join(&broken).await);
        }
        let written = all_events(&f.store)
            .await
            .into_iter()
            .filter(|e| e.position > head)
            .count();
        assert_eq!(written, 120, "60 events per reason, nothing else");
        let refused = refusals(&f.store).await;
        let of = |reason: &str| refused.iter().filter(|(_, r)| r == reason).count();
        assert_eq!(of("join-token:unknown-token"), 60);
        assert_eq!(of("join-token:bad-csr"), 60);
        assert_eq!(
            buffered_rows(&f.store).await,
            0,
            "no store write per refusal"
        );
        assert_eq!(f.svc.joins().suppressed_in_memory(), 1_880);
        // The minute is not over: the flush writes nothing yet.
        assert_eq!(f.svc.flush_suppressed_refusals().await.unwrap(), 0);
        f.clock.advance_secs(60);
        assert_eq!(f.svc.maintain().await.unwrap().suppressed_events, 2);
        let mut counts = suppressed(&f.store).await;
        counts.sort();
        assert_eq!(
            counts,
            vec![
                ("join-token:bad-csr".to_owned(), 940),
                ("join-token:unknown-token".to_owned(), 940)
            ]
        );
        assert_eq!(f.svc.joins().suppressed_in_memory(), 0);
        // Written once.
        assert_eq!(f.svc.maintain().await.unwrap().suppressed_events, 0);
        // The counters add up to every refusal.
        assert_eq!(
            projections::identity::refusal_totals(&f.store)
                .await
                .unwrap(),
            vec![
                ("join".to_owned(), "join-token:bad-csr".to_owned(), 60, 940),
                (
                    "join".to_owned(),
                    "join-token:unknown-token".to_owned(),
                    60,
                    940
                )
            ]
        );
    }
}

/// (Postgres) Two replicas on one database, 500 refusals each at once: the bound is exact
/// across them (60 events in all) and their two flushes add up to the 940 not written.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_keep_the_bound_exact_and_their_counts_add_up() {
    let db = TestDb::postgres().await.unwrap();
    let first = EventStore::Postgres(db.pg_store(20).await.unwrap());
    let second = EventStore::Postgres(db.pg_store(20).await.unwrap());
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
    let stranger = domain::pki::TokenSecret::generate().unwrap();
    let req = Arc::new(join_request(
        &f,
        &Agent::new(),
        stranger.expose(),
        "node",
        Default::default(),
    ));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..20 {
        let (f, replica, req) = (f.clone(), replica.clone(), req.clone());
        tasks.spawn(async move {
            for _ in 0..50 {
                let r = if i % 2 == 0 {
                    f.svc.join(&req).await
                } else {
                    replica.join(&req).await
                };
                assert_join_denied(r);
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    assert_eq!(refusals(&f.store).await.len(), 60);
    assert_eq!(
        f.svc.joins().suppressed_in_memory() + replica.joins().suppressed_in_memory(),
        940
    );
    f.clock.advance_secs(60);
    f.svc.flush_suppressed_refusals().await.unwrap();
    replica.flush_suppressed_refusals().await.unwrap();
    let total: u64 = suppressed(&f.store).await.iter().map(|(_, c)| c).sum();
    assert_eq!(total, 940);
}

/// Issue 40, item 15: renewals refused at the handshake (`commands::identity::EdgeRefusals`).
/// The node's own expired certificate is attributed to its tenant; bytes that are no node
/// identity to the root tenant, naming nothing; 70 of one reason in a minute are 60 events and
/// one suppressed count of the rest (plus the edge's own 5 it could not queue).
#[tokio::test]
async fn renewals_refused_at_the_handshake_are_recorded_under_the_bound() {
    use domain::identity::EdgeRenewRefusal;
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let (_agent, body) = join_new(&f, "t1").await;
        let leaf = body.certificate_chain[0].clone();
        let edge = f.svc.edge_refusals();
        f.clock.advance_secs(25 * 3600);
        assert!(edge.record(EdgeRenewRefusal::Expired, &leaf).await.unwrap());
        assert!(edge
            .record(EdgeRenewRefusal::Revoked, b"not a certificate")
            .await
            .unwrap());
        let events: Vec<(String, events::schema::RenewRefused)> = all_events(&f.store)
            .await
            .into_iter()
            .filter(|e| e.event_type == "security.renew.refused")
            .map(|e| (e.tenant_id.clone(), e.decode().unwrap()))
            .collect();
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].0, "t1");
        assert_eq!(events[0].1.refusal, "renew:expired");
        assert_eq!(events[0].1.node_id, body.node_id);
        assert!(!events[0].1.serial.is_empty() && events[0].1.csr_sha256.is_empty());
        assert_eq!(events[1].0, "root");
        assert_eq!(events[1].1.refusal, "renew:revoked");
        assert_eq!(
            (events[1].1.node_id.as_str(), events[1].1.serial.as_str()),
            ("", "")
        );

        let mut written = 1;
        for _ in 0..69 {
            if edge.record(EdgeRenewRefusal::Expired, &leaf).await.unwrap() {
                written += 1;
            }
        }
        assert_eq!(written, 60, "one minute's bound per reason");
        edge.count_unrecorded(EdgeRenewRefusal::Expired, 5);
        f.clock.advance_secs(60);
        edge.maintenance()
            .flush_suppressed_refusals()
            .await
            .unwrap();
        // The 61st is counted in the tenant its stored leaf names; those suppressed without a
        // store read, and the unqueued ones, in the root tenant: 15 in all.
        let counts = suppressed(&f.store).await;
        assert!(
            counts.iter().all(|(r, _)| r == "renew:expired"),
            "{counts:?}"
        );
        assert_eq!(counts.iter().map(|(_, n)| n).sum::<u64>(), 15, "{counts:?}");
    }
}
