//! The sequencer and the sealer on both backends: exactly-once dense indexes, crash-resume,
//! concurrent writers (Postgres), seal refusals and the checkpoint chain.

use crate::audit_support;

use std::sync::Arc;
use std::time::Duration;

use audit_support::*;
use commands::audit::{reads, SealOutcome, Sequencer, SequencerOptions, StepOutcome};
use events::store::testkit::TestDb;

#[tokio::test]
async fn sequences_and_seals_on_both_backends() {
    for db in TestDb::each().await.expect("dbs") {
        let store = db.store().await.expect("store");
        for n in 0..50u64 {
            let tenant = format!("t{}", n % 3);
            append(&store, &format!("tenant/{tenant}"), &[event(&tenant, n)]).await;
        }
        let mut seq = Sequencer::new(
            store.clone(),
            SequencerOptions {
                batch: 7,
                ..Default::default()
            },
        );
        assert_eq!(seq.catch_up().await.expect("catch up"), 50);
        assert_eq!(seq.step().await.expect("step"), StepOutcome::Idle);
        let signer = signer();
        let sealer = sealer(&store, signer.clone());
        let sealed = sealer.seal_all().await.expect("seal");
        assert_eq!(sealed.len(), 3);
        for r in &sealed {
            assert!(matches!(r, Ok(SealOutcome::Sealed { seq: 1, .. })), "{r:?}");
        }
        // Nothing grew: nothing to seal.
        assert!(matches!(
            sealer.seal_tenant("t0").await.expect("seal"),
            SealOutcome::Unchanged { size: 17, .. }
        ));
        // The sealed events are events of their tenants: sequenced, then sealed again.
        seq.catch_up().await.expect("catch up");
        for n in 50..60u64 {
            append(&store, "tenant/t1", &[event("t1", n)]).await;
        }
        seq.catch_up().await.expect("catch up");
        let again = sealer.seal_all().await.expect("seal");
        assert_eq!(again.len(), 3);
        // Only t1 grew by more than its own checkpoint event: t0 and t2 are idle.
        let sealed: Vec<&str> = again
            .iter()
            .filter_map(|r| match r {
                Ok(SealOutcome::Sealed { tenant, .. }) => Some(tenant.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(sealed, ["t1"], "{again:?}");
        seq.catch_up().await.expect("catch up");
        for (tenant, checkpoints) in [("t0", 1), ("t1", 2), ("t2", 1)] {
            let summary = verify_tenant(&store, tenant, signer.public_key()).await;
            assert_eq!(summary.checkpoints, checkpoints, "{tenant}");
        }
        assert_exactly_once(db.url()).await;
        let size = reads::tree_size(&store, "t1").await.expect("size");
        assert_eq!(
            size,
            17 + 1 + 10 + 1,
            "17 events, a checkpoint, 10 events, a checkpoint"
        );
        // An inclusion proof against the latest checkpoint.
        let cps = reads::checkpoints(&store, "t1").await.expect("cps");
        let last = cps.last().expect("checkpoint");
        let leaf = reads::leaves(&store, "t1", 5, 1)
            .await
            .expect("leaf")
            .pop()
            .expect("leaf 5");
        let proof = reads::prove(&store, "t1", leaf.position)
            .await
            .expect("prove");
        domain::audit::verify_inclusion(
            &leaf.leaf_hash,
            5,
            last.tree_size,
            &proof.proof,
            &last.root_hash,
        )
        .expect("inclusion");
    }
}

/// An idle deployment: two seal ticks with the sequencer running between them sign one
/// checkpoint, not one per tick (the sealer's own event grows the tree by one leaf, which alone is
/// nothing to vouch for). The next real event is sealed, and that checkpoint covers the first
/// checkpoint's event too.
#[tokio::test]
async fn two_seal_ticks_on_an_idle_store_sign_one_checkpoint() {
    for db in TestDb::each().await.expect("dbs") {
        let store = db.store().await.expect("store");
        for n in 0..4u64 {
            append(&store, "tenant/t0", &[event("t0", n)]).await;
        }
        let mut seq = Sequencer::new(store.clone(), SequencerOptions::default());
        let signer = signer();
        let sealer = sealer(&store, signer.clone());
        let mut outcomes = Vec::new();
        for _tick in 0..3 {
            seq.catch_up().await.expect("catch up");
            outcomes.extend(sealer.seal_all().await.expect("seal"));
            seq.catch_up().await.expect("catch up");
        }
        let sealed = outcomes
            .iter()
            .filter(|r| matches!(r, Ok(SealOutcome::Sealed { .. })))
            .count();
        assert_eq!(sealed, 1, "{outcomes:?}");
        assert_eq!(reads::tree_size(&store, "t0").await.expect("size"), 5);
        assert!(matches!(
            sealer.seal_tenant("t0").await.expect("seal"),
            SealOutcome::Unchanged { size: 4, .. }
        ));
        assert_eq!(
            reads::checkpoints(&store, "t0").await.expect("cps").len(),
            1
        );
        // Something happens: sealed again, covering the first checkpoint's leaf.
        append(&store, "tenant/t0", &[event("t0", 4)]).await;
        seq.catch_up().await.expect("catch up");
        assert!(matches!(
            sealer.seal_tenant("t0").await.expect("seal"),
            SealOutcome::Sealed {
                seq: 2,
                size: 6,
                ..
            }
        ));
        seq.catch_up().await.expect("catch up");
        let summary = verify_tenant(&store, "t0", signer.public_key()).await;
        assert_eq!(summary.checkpoints, 2);
    }
}

/// (Postgres) A stored cursor that ends on a full page keeps the snapshot it was paging through
/// (its ceiling). A new sequencer resuming from it must not call the log caught up once that old
/// snapshot is exhausted: events committed since are still to be sequenced. (The cause of
/// `crash_resume_gives_the_same_trees`' "events not in any tree" flake, and of `bcctl audit
/// seal` sequencing nothing after a run whose last batch was full.)
#[tokio::test]
async fn a_resumed_cursor_ending_on_a_full_page_still_sees_later_commits() {
    let db = TestDb::postgres().await.expect("db");
    let store = db.store().await.expect("store");
    for n in 0..26u64 {
        append(&store, "tenant/t0", &[event("t0", n)]).await;
    }
    let options = SequencerOptions {
        batch: 13,
        ..Default::default()
    };
    let mut first = Sequencer::new(store.clone(), options);
    assert_eq!(first.catch_up().await.expect("catch up"), 26);
    drop(first);
    for n in 26..31u64 {
        append(&store, "tenant/t0", &[event("t0", n)]).await;
    }
    let mut resumed = Sequencer::new(store.clone(), options);
    assert_eq!(resumed.catch_up().await.expect("resume"), 5);
    assert_exactly_once(db.url()).await;
    assert_eq!(reads::tree_size(&store, "t0").await.expect("size"), 31);
}

/// (Postgres) A sequencer page whose writers' transaction ids straddle a power of ten (here 7 to
/// 12) is sequenced whole. The tail step cut its pages in the text order of the ids ("10" before
/// "7"), so a full page of "10", "11" moved the cursor past 7, 8 and 9 for good: the cause of
/// `concurrent_writers_sequencers_and_sealer`'s "events not in any tree" (hundreds missing, one
/// run in a few hundred, whenever the server's ids crossed 10^k while a page was full). Failed
/// before: 3 of 6 sequenced.
#[tokio::test]
async fn a_page_straddling_a_power_of_ten_of_transaction_ids_is_sequenced_whole() {
    let db = TestDb::postgres().await.expect("db");
    let store = db.store().await.expect("store");
    let mut rewrites = Vec::new();
    for n in 0..6u64 {
        let appended = store
            .append(
                &format!("tenant/t0/s{n}"),
                events::store::ExpectedVersion::NoStream,
                &[event("t0", n)],
            )
            .await
            .expect("append");
        // Ids every snapshot of the server sees as committed long ago.
        rewrites.push((appended.positions[0], 7 + n));
    }
    events::store::testkit_tamper::rewrite_tx_ids(db.url(), &rewrites)
        .await
        .expect("rewrite tx ids");
    let mut seq = Sequencer::new(
        store.clone(),
        SequencerOptions {
            batch: 2,
            ..Default::default()
        },
    );
    assert_eq!(seq.catch_up().await.expect("catch up"), 6);
    assert_exactly_once(db.url()).await;
    let signer = signer();
    let sealed = sealer(&store, signer.clone())
        .seal_all()
        .await
        .expect("seal");
    assert!(
        matches!(sealed.as_slice(), [Ok(SealOutcome::Sealed { size: 6, .. })]),
        "{sealed:?}"
    );
    seq.catch_up().await.expect("catch up");
    let summary = verify_tenant(&store, "t0", signer.public_key()).await;
    assert_eq!((summary.leaves, summary.checkpoints), (7, 1));
}

/// A sequencer dropped mid-way (between steps, and in the middle of a step) resumes exactly:
/// the result equals an uninterrupted run over the same log.
#[tokio::test]
async fn crash_resume_gives_the_same_trees() {
    for db in TestDb::each().await.expect("dbs") {
        let store = db.store().await.expect("store");
        for n in 0..300u64 {
            let tenant = format!("t{}", n % 4);
            append(
                &store,
                &format!("tenant/{tenant}/s{}", n % 7),
                &[event(&tenant, n)],
            )
            .await;
        }
        let options = SequencerOptions {
            batch: 13,
            ..Default::default()
        };
        // Some steps, then dropped.
        let mut first = Sequencer::new(store.clone(), options);
        for _ in 0..5 {
            first.step().await.expect("step");
        }
        drop(first);
        // Dropped in the middle of steps, several times (Postgres: a cancelled future's connection
        // is discarded and its transaction rolled back; on SQLite, cancelling the single writer
        // mid-statement leaves that connection unusable, a store limitation, so only drops between
        // steps are exercised there).
        for _ in 0..if db.is_postgres() { 5 } else { 0 } {
            let mut s = Sequencer::new(store.clone(), options);
            let _ = tokio::time::timeout(Duration::from_micros(300), s.catch_up()).await;
        }
        for n in 300..400u64 {
            let tenant = format!("t{}", n % 4);
            append(&store, &format!("tenant/{tenant}"), &[event(&tenant, n)]).await;
        }
        let mut resumed = Sequencer::new(store.clone(), options);
        resumed.catch_up().await.expect("resume");
        assert_exactly_once(db.url()).await;

        // The uninterrupted reference: the same leaves, recomputed in index order from the events.
        let signer = signer();
        sealer(&store, signer.clone())
            .seal_all()
            .await
            .expect("seal");
        let mut total = 0;
        for t in 0..4 {
            let summary = verify_tenant(&store, &format!("t{t}"), signer.public_key()).await;
            total += summary.leaves;
        }
        assert_eq!(total, 400);
        if !db.is_postgres() {
            // On SQLite the tailer order is the position order: compare with a clean run.
            let rows = reads::leaves(&store, "t0", 0, 1000).await.expect("leaves");
            let mut positions: Vec<i64> = rows.iter().map(|r| r.position).collect();
            let sorted = {
                let mut p = positions.clone();
                p.sort();
                p
            };
            assert_eq!(positions, sorted);
            positions.dedup();
            assert_eq!(positions.len(), 100);
        }
    }
}

/// (Postgres) 16 writers into 20 tenants while two sequencers and a sealer run: afterwards every
/// committed event is in its tenant's tree exactly once, with dense indexes, and every trail
/// verifies.
#[tokio::test]
async fn concurrent_writers_sequencers_and_sealer() {
    let db = TestDb::postgres().await.expect("db");
    let store = db.store().await.expect("store");
    let signer = signer();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);

    let mut background = Vec::new();
    for _ in 0..2 {
        let s = Sequencer::new(
            store.clone(),
            SequencerOptions {
                batch: 500,
                poll_interval: Duration::from_millis(5),
            },
        );
        background.push(tokio::spawn(s.run(stop_rx.clone())));
    }
    let mut sealer_options = commands::audit::SealerOptions::new(TRUST_DOMAIN);
    sealer_options.interval = Duration::from_millis(40);
    let background_sealer = commands::audit::Sealer::new(
        store.clone(),
        signer.clone(),
        Arc::new(commands::SimClock::new()),
        sealer_options,
    );
    let refusals = Arc::new(std::sync::Mutex::new(Vec::new()));
    let r2 = refusals.clone();
    let sealer_task = tokio::spawn(background_sealer.run(
        Arc::new(tokio::sync::Notify::new()),
        stop_rx.clone(),
        move |r| {
            if let Err(e) = r {
                r2.lock().expect("lock").push(e.to_string());
            }
        },
    ));

    let writers = 16;
    let per_writer = 250u64;
    let mut tasks = Vec::new();
    for w in 0..writers {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            for n in 0..per_writer {
                let tenant = format!("tenant-{:02}", (n * 7 + w) % 20);
                let k = 1 + (n % 3);
                let evs: Vec<_> = (0..k).map(|i| event(&tenant, n * 10 + i)).collect();
                append(&store, &format!("tenant/{tenant}/w{w}"), &evs).await;
            }
        }));
    }
    for t in tasks {
        t.await.expect("writer");
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    stop_tx.send(true).expect("stop");
    for b in background {
        b.await.expect("join").expect("sequencer");
    }
    sealer_task.await.expect("join").expect("sealer");
    assert!(
        refusals.lock().expect("lock").is_empty(),
        "{:?}",
        refusals.lock()
    );

    // Final catch-up and seal, then the checks.
    let mut seq = Sequencer::new(store.clone(), SequencerOptions::default());
    seq.catch_up().await.expect("catch up");
    let sealer = sealer(&store, signer.clone());
    for r in sealer.seal_all().await.expect("seal") {
        r.expect("seal");
    }
    seq.catch_up().await.expect("catch up");
    assert_exactly_once(db.url()).await;
    let mut leaves = 0;
    let mut checkpoints = 0;
    for t in 0..20 {
        let s = verify_tenant(&store, &format!("tenant-{t:02}"), signer.public_key()).await;
        leaves += s.leaves;
        checkpoints += s.checkpoints;
    }
    let written = writers
        * (per_writer / 3 * 6
            + if per_writer % 3 >= 1 { 1 } else { 0 }
            + if per_writer % 3 == 2 { 2 } else { 0 });
    eprintln!("{leaves} leaves (of which {checkpoints} checkpoint events sealed into later leaves), {written} written by the writers");
    assert!(leaves >= written);
    assert!(checkpoints >= 20);
}
