//! Identity maintenance, on Postgres and SQLite: expired renew proofs pruned in batches at
//! exactly their expiry (120 s after use), unexpired ones kept, suppressed refusal counts written
//! to the log, and the background loop a serving process runs; the renew proof's replay row
//! read as spent until its expiry and not after it, pruned or not (issue 40).

use crate::identity_support;

use std::sync::Arc;
use std::time::Duration;

use commands::identity::{run_maintenance, IdentityMaintenance, MaintenanceReport, PRUNE_BATCH};
use events::store::testkit::TestDb;
use identity_support::*;
use projections::identity;

/// Renews the node of (`agent`, `leaf`) `n` times at the clock's now, each renewal presenting
/// the certificate the previous one issued (a renewed certificate never renews again), each
/// with a fresh proof: `n` rows in `attestation_uses`, each expiring 120 s from now. Returns the
/// last key and certificate.
async fn renew_times(
    f: &Fixture,
    agent: Agent,
    leaf: Vec<u8>,
    node: &str,
    n: usize,
) -> (Agent, Vec<u8>) {
    let (mut agent, mut leaf) = (agent, leaf);
    for _ in 0..n {
        let next = Agent::new();
        let renewed = f
            .svc
            .renew(&renew_request(&agent, &leaf, node, &next, now_ms(f)))
            .await
            .expect("renewal");
        (agent, leaf) = (next, renewed.certificate_chain[0].clone());
    }
    (agent, leaf)
}

/// The keys named by every `attestation.uses.pruned` event, per event.
async fn prune_events(f: &Fixture) -> Vec<usize> {
    all_events(&f.store)
        .await
        .into_iter()
        .filter(|e| e.event_type == "attestation.uses.pruned")
        .map(|e| {
            e.decode::<events::schema::AttestationUsesPruned>()
                .unwrap()
                .keys
                .len()
        })
        .collect()
}

#[tokio::test]
async fn expired_proofs_are_pruned_in_batches_at_their_expiry_and_the_rest_kept() {
    assert_eq!(PRUNE_BATCH, 5_000, "spec 001: 5,000 by default");
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let (agent, body) = join_new(&f, "t1").await;
        let leaf = body.certificate_chain[0].clone();
        let (agent, leaf) = renew_times(&f, agent, leaf, &body.node_id, 5).await;
        f.clock.advance_secs(60);
        renew_times(&f, agent, leaf, &body.node_id, 1).await;

        // 1 µs before the first five expire: nothing to prune.
        f.clock.advance_us(60_000_000 - 1);
        assert_eq!(
            f.svc.maintain_in_batches(2).await.unwrap(),
            MaintenanceReport::default()
        );
        // At their expiry: the five go, two per event; the sixth (60 s younger) stays.
        f.clock.advance_us(1);
        let report = f.svc.maintain_in_batches(2).await.unwrap();
        assert_eq!(
            report,
            MaintenanceReport {
                pruned: 5,
                prune_events: 3,
                suppressed_events: 0,
                expired_join_requests: 0
            }
        );
        assert_eq!(prune_events(&f).await, vec![2, 2, 1]);
        assert_eq!(f.svc.maintain().await.unwrap().pruned, 0);
        // And the sixth at its own expiry.
        f.clock.advance_secs(60);
        assert_eq!(f.svc.maintain().await.unwrap().pruned, 1);
        assert_eq!(prune_events(&f).await, vec![2, 2, 1, 1]);

        // Prunes are events: a rebuild gives the same tables.
        let tables = identity::tables();
        let inline = projections::digest_tables(&f.store, &tables).await.unwrap();
        projections::rebuild(&f.store, &identity::all(), None, 1000, |_| {})
            .await
            .unwrap();
        assert_eq!(
            inline,
            projections::digest_tables(&f.store, &tables).await.unwrap()
        );
    }
}

#[tokio::test]
async fn maintenance_writes_the_suppressed_refusal_counts_of_finished_minutes() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let stranger = domain::pki::TokenSecret::generate().unwrap();
        let req = join_request(
            &f,
            &Agent::new(),
            stranger.expose(),
            "node",
            Default::default(),
        );
        for _ in 0..63 {
            assert_join_denied(f.svc.join(&req).await);
        }
        // The minute is not over: nothing to write yet.
        assert_eq!(f.svc.maintain().await.unwrap().suppressed_events, 0);
        f.clock.advance_secs(60);
        assert_eq!(f.svc.maintain().await.unwrap().suppressed_events, 1);
        let counts: Vec<u64> = all_events(&f.store)
            .await
            .into_iter()
            .filter(|e| e.event_type == "security.refusals.suppressed")
            .map(|e| {
                e.decode::<events::schema::RefusalsSuppressed>()
                    .unwrap()
                    .count
            })
            .collect();
        assert_eq!(counts, vec![3]);
        // Written once.
        assert_eq!(f.svc.maintain().await.unwrap().suppressed_events, 0);
    }
}

#[tokio::test]
async fn the_maintenance_loop_prunes_without_being_called_and_stops_on_shutdown() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let (agent, body) = join_new(&f, "t1").await;
        let leaf = body.certificate_chain[0].clone();
        renew_times(&f, agent, leaf, &body.node_id, 3).await;
        f.clock.advance_secs(120);

        // A second maintenance service on the same store and clock, as a serving process holds one.
        let service = Arc::new(IdentityMaintenance::new(
            f.store.clone(),
            Arc::new(f.clock.clone()),
            "root",
        ));
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let (rounds, mut reported) = tokio::sync::mpsc::unbounded_channel();
        let task = tokio::spawn(run_maintenance(
            service,
            commands::identity::MaintenanceWork::All,
            Duration::from_millis(20),
            stopped,
            move |r| {
                let _ = rounds.send(r.map_err(|e| e.to_string()));
            },
        ));
        let first = tokio::time::timeout(Duration::from_secs(10), reported.recv())
            .await
            .expect("a round within 10 s")
            .expect("a report")
            .expect("the round succeeded");
        assert_eq!(first.pruned, 3);
        // Later rounds find nothing.
        let next = tokio::time::timeout(Duration::from_secs(10), reported.recv())
            .await
            .expect("another round")
            .expect("a report")
            .expect("the round succeeded");
        assert_eq!(next, MaintenanceReport::default());
        assert_eq!(prune_events(&f).await, vec![3]);

        stop.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("the loop stops on shutdown")
            .unwrap();
    }
}

/// Issue 40, item 13: the renew-proof replay row lives 120 s, and its lookup honours that: at
/// 1 µs before its expiry the proof reads as spent, at its expiry (not pruned yet) it no longer
/// does. Its expiry covers the proof's whole clock window, so a proof past it is refused for
/// its time (`renew:clock-window`) before the replay row is asked.
#[tokio::test]
async fn the_renew_proof_replay_row_counts_until_its_expiry_and_not_after() {
    use events::store::LogStore;
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let (agent, body) = join_new(&f, "t1").await;
        let leaf = body.certificate_chain[0].clone();
        let req = renew_request(&agent, &leaf, &body.node_id, &Agent::new(), now_ms(&f));
        f.svc.renew(&req).await.expect("renewal");
        let used: events::schema::EvidenceUsed = all_events(&f.store)
            .await
            .into_iter()
            .filter(|e| e.event_type == "attestation.evidence.used")
            .map(|e| e.decode::<events::schema::EvidenceUsed>().unwrap())
            .find(|u| u.attestor == domain::identity::RENEW_POP_ATTESTOR)
            .expect("the proof's use");
        let subject: [u8; 32] = used.subject.as_slice().try_into().unwrap();
        let expires = used.expires_at_us;
        assert_eq!(expires, commands::Clock::now_us(&f.clock) + 120_000_000);
        let mut tx = f.store.begin().await.unwrap();
        let read = identity::read::attestation_used_at;
        assert!(
            read(&mut tx, "renew-pop", &subject, expires - 1)
                .await
                .unwrap(),
            "1 µs before its expiry"
        );
        assert!(
            !read(&mut tx, "renew-pop", &subject, expires).await.unwrap(),
            "at its expiry, not pruned yet, the row no longer counts"
        );
        drop(tx);
        // The same proof at that moment: refused for its time, not admitted.
        f.clock.advance_us(120_000_000);
        assert_renew_denied(f.svc.renew(&req).await);
        assert_last_refusal(&f.store, "t1", "renew:clock-window").await;
    }
}

/// Issue 40, item 13: a proof signed a full window (60 s) ahead of the clock, used on a
/// millisecond boundary, is admitted by its window until 999 µs past `used + 120 s`; its replay
/// row must live that long, or a lookup that honours the expiry would let it through again.
#[tokio::test]
async fn the_replay_row_of_a_proof_a_window_ahead_outlives_its_window() {
    let f = fixture(TestDb::sqlite().unwrap()).await;
    let (agent, body) = join_new(&f, "t1").await;
    let leaf = body.certificate_chain[0].clone();
    let used_us = commands::Clock::now_us(&f.clock);
    assert_eq!(used_us % 1000, 0, "the simulated clock is on a millisecond");
    let ahead_ms = now_ms(&f) + 60_000;
    let req = renew_request(&agent, &leaf, &body.node_id, &Agent::new(), ahead_ms);
    f.svc
        .renew(&req)
        .await
        .expect("a proof 60 s ahead is in its window");
    let used: events::schema::EvidenceUsed = all_events(&f.store)
        .await
        .into_iter()
        .filter(|e| e.event_type == "attestation.evidence.used")
        .map(|e| e.decode::<events::schema::EvidenceUsed>().unwrap())
        .find(|u| u.attestor == domain::identity::RENEW_POP_ATTESTOR)
        .expect("the proof's use");
    let last_admitted_us = (ahead_ms + 60_000) * 1000 + 999;
    assert!(
        used.expires_at_us > last_admitted_us,
        "the row expires at {} but the window admits the proof until {last_admitted_us}",
        used.expires_at_us
    );
    // At that last µs the same proof is a replay, not a second renewal.
    f.clock.advance_us(last_admitted_us - used_us);
    assert_renew_denied(f.svc.renew(&req).await);
    assert_last_refusal(&f.store, "t1", "renew:replay").await;
}
