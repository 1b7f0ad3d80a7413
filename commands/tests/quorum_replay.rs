//! Replay: the quorum tables (trust_bundle_state and its history, node_trust_reports, batches with
//! scope proofs and approvals) rebuild byte-identically from the log, and at random cut points
//! equal the tables of a store that only ever saw the events up to the cut. Both backends.

use crate::quorum_support as support;

use commands::quorum::{
    approve_batch, cancel_batch, create_batch, drop_command_root, expire_due_batches,
    report_node_trust, rotate_add_command_root, settle_trust_bundle, switch_command_root,
    TrustReport,
};
use commands::{append_and_project, SimClock};
use domain::quorum::{CreateBatch, PayloadDigest, ScopeLeafRequest, Tier};
use events::store::testkit::TestDb;
use events::store::{EventStore, ExpectedVersion, LogStore, LogTx, StoreTx};
use events::NewEvent;
use projections::digest::dump_table;
use projections::{digest_tables, rebuild, rebuild_in};
use support::*;

fn request(key: &str, n: usize, not_after_seconds: Option<u32>) -> CreateBatch {
    CreateBatch {
        tenant: "t1".into(),
        caller: "alice".into(),
        idempotency_key: key.into(),
        reason: format!("batch {key}"),
        leaves: (0..n)
            .map(|i| ScopeLeafRequest {
                subject: format!("node-{i}"),
                kind: if i % 3 == 0 {
                    "node.reboot"
                } else {
                    "node.reimage"
                }
                .into(),
                payload_sha256: (i % 2 == 0).then(|| PayloadDigest::of(&[i as u8])),
                payload: None,
            })
            .collect(),
        not_after_seconds,
    }
}

/// A history touching every quorum event type.
async fn scenario(store: &EventStore) {
    seed_nodes(store, "t1", 700).await;
    let clock = SimClock::new();
    let a = approvers(3);
    let s1 = set_of(
        &[&a[0], &a[1], &a[2]],
        2,
        vec![Tier {
            max_scope_size: 10,
            threshold: 1,
        }],
    );
    settle_trust_bundle(store, &clock, &config(s1.clone(), 1, vec![]))
        .await
        .unwrap();
    // Each report also names the approver set held (from version 2 on, the first set at epoch
    // 1), so the replay covers node_trust_reports' approver-set columns.
    let s1_digest = s1.digest().as_bytes().to_vec();
    let node = |id: &str, v: u64| TrustReport {
        tenant_id: "t1".into(),
        node_id: id.into(),
        trust_version: v,
        session_start: true,
        connected: true,
        approver_set_epoch: u64::from(v >= 2),
        approver_set_sha256: if v >= 2 {
            s1_digest.clone()
        } else {
            Vec::new()
        },
    };
    report_node_trust(store, &clock, &node("n1", 1))
        .await
        .unwrap();
    let big = create_batch(store, &clock, &request("big", 700, None))
        .await
        .unwrap();
    let small = create_batch(store, &clock, &request("small", 3, Some(600)))
        .await
        .unwrap();
    let other = create_batch(store, &clock, &request("other", 20, None))
        .await
        .unwrap();
    for (i, approver) in a.iter().enumerate().take(2) {
        approve_batch(
            store,
            &clock,
            &td(),
            &big.batch_id,
            &approver.sign_batch(
                &big.batch_id,
                &big.scope_root,
                big.scope_size,
                big.not_after_us,
                &td(),
            ),
        )
        .await
        .unwrap();
        clock.advance_secs(i as i64 + 1);
    }
    rotate_add_command_root(store, &clock, &root(2))
        .await
        .unwrap();
    report_node_trust(store, &clock, &node("n1", 2))
        .await
        .unwrap();
    switch_command_root(store, &clock, false).await.unwrap();
    let s2 = set_of(&[&a[0], &a[1]], 1, vec![]);
    let mut c2 = config(
        s2.clone(),
        2,
        vec![a[0].sign_set(&s2, 2, &td()), a[1].sign_set(&s2, 2, &td())],
    );
    c2.command_signing_roots = vec![root(1), root(2)];
    c2.active_root = root(2);
    settle_trust_bundle(store, &clock, &c2).await.unwrap();
    clock.advance_secs(3600);
    expire_due_batches(store, &clock, 10).await.unwrap();
    cancel_batch(store, &clock, &other.batch_id, "not needed", "bob")
        .await
        .unwrap();
    clock.advance_secs(24 * 3600);
    drop_command_root(store, &clock, false).await.unwrap();
    let _ = small;
}

async fn digest_in(tx: &mut StoreTx) -> String {
    let mut hasher = blake3_like::Hasher::default();
    for table in commands::quorum::tables() {
        hasher.update(table.name.as_bytes());
        for row in dump_table(tx, &table).await.unwrap() {
            hasher.update(row.as_bytes());
        }
    }
    hasher.finish()
}

/// A tiny order-sensitive digest for the in-transaction comparison (the tables' rows joined).
mod blake3_like {
    #[derive(Default)]
    pub struct Hasher(Vec<u8>);
    impl Hasher {
        pub fn update(&mut self, bytes: &[u8]) {
            self.0.extend_from_slice(bytes);
            self.0.push(b'\n');
        }
        pub fn finish(self) -> String {
            String::from_utf8_lossy(&self.0).into_owned()
        }
    }
}

/// A rebuild of every projection (`bcctl rebuild`) over a log of identity and quorum events read
/// in one page, so that the identity projections' deferred writes and the quorum projections'
/// statements share one `apply_all`: the tables equal the inline ones on both backends.
#[tokio::test]
async fn every_projection_rebuilds_identity_and_quorum_events_of_one_page() {
    for db in TestDb::each().await.unwrap() {
        let store = db.store().await.unwrap();
        let token = events::schema::JoinTokenCreated {
            token_id: "tok_1".into(),
            tenant_id: "t1".into(),
            site_id: "s1".into(),
            pool_id: "p1".into(),
            role: "node".into(),
            uses: 2,
            expires_at_us: 1_900_000_000_000_000,
            secret_sha256: vec![7; 32],
            ..Default::default()
        };
        let mut tx = store.begin().await.unwrap();
        append_and_project(
            &mut tx,
            &projections::identity::all(),
            "token/tok_1",
            ExpectedVersion::NoStream,
            &[NewEvent::from_payload(
                events::new_event_id(),
                "t1",
                1_800_000_000_000_000,
                &token,
            )],
        )
        .await
        .unwrap();
        tx.commit().await.unwrap();
        scenario(&store).await;

        let all = commands::every_projection();
        let tables: Vec<projections::TableSpec> = all
            .iter()
            .flat_map(|p| p.tables().iter().copied())
            .collect();
        let inline = digest_tables(&store, &tables).await.unwrap();
        let read = rebuild(&store, &all, None, 10_000, |_| {}).await.unwrap();
        assert_eq!(read, store.head_position().await.unwrap() as u64);
        let rebuilt = digest_tables(&store, &tables).await.unwrap();
        assert_eq!(inline, rebuilt, "backend postgres={}", db.is_postgres());
    }
}

#[tokio::test]
async fn quorum_tables_rebuild_byte_identically() {
    for db in TestDb::each().await.unwrap() {
        let store = db.store().await.unwrap();
        scenario(&store).await;
        let tables = commands::quorum::tables();
        let inline = digest_tables(&store, &tables).await.unwrap();
        let projections = commands::quorum::projections();
        let read = rebuild(&store, &projections, None, 7, |_| {})
            .await
            .unwrap();
        assert!(read >= 18, "{read} events");
        let rebuilt = digest_tables(&store, &tables).await.unwrap();
        assert_eq!(inline, rebuilt, "backend postgres={}", db.is_postgres());
    }
}

#[tokio::test]
async fn quorum_tables_at_random_cut_points_match_a_store_that_saw_only_that_far() {
    for db in TestDb::each().await.unwrap() {
        let store = db.store().await.unwrap();
        scenario(&store).await;
        let head = store.head_position().await.unwrap();
        let mut all = Vec::new();
        let mut pages = store.read_all(0, 1000);
        while let Some(batch) = pages.next_batch().await.unwrap() {
            all.extend(batch);
        }
        assert_eq!(
            all.len() as i64,
            head,
            "no gaps in a single-writer scenario"
        );

        // Cut points: deterministic pseudo-random positions, plus the ends.
        let mut cuts = vec![1, head];
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..8 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            cuts.push(1 + (x % head as u64) as i64);
        }
        cuts.sort_unstable();
        cuts.dedup();

        // The copy: a fresh store fed the same events one by one, inline.
        let copy_db = if db.is_postgres() {
            TestDb::postgres().await.unwrap()
        } else {
            TestDb::sqlite().unwrap()
        };
        let copy = copy_db.store().await.unwrap();
        let projections = commands::quorum::projections();
        for event in &all {
            let mut tx = copy.begin().await.unwrap();
            let new = NewEvent::from_bytes(
                event.event_id,
                event.event_type.clone(),
                event.schema_version,
                event.tenant_id.clone(),
                event.occurred_at_us,
                event.payload.clone(),
            );
            let recorded = append_and_project(
                &mut tx,
                &projections,
                &event.stream_id,
                ExpectedVersion::Exact(event.stream_version as u64 - 1),
                &[new],
            )
            .await
            .unwrap();
            assert_eq!(recorded[0].position, event.position);
            tx.commit().await.unwrap();
            if cuts.contains(&event.position) {
                let mut copy_tx = copy.begin().await.unwrap();
                let expected = digest_in(&mut copy_tx).await;
                copy_tx.rollback().await.unwrap();
                let mut tx = store.begin().await.unwrap();
                rebuild_in(
                    &store,
                    &mut tx,
                    &projections,
                    Some(event.position),
                    5,
                    |_| {},
                )
                .await
                .unwrap();
                let actual = digest_in(&mut tx).await;
                tx.rollback().await.unwrap();
                assert_eq!(actual, expected, "cut at position {}", event.position);
            }
        }
        // The live tables were left untouched by the rolled-back rebuilds.
        let tables = commands::quorum::tables();
        assert_eq!(
            digest_tables(&store, &tables).await.unwrap(),
            digest_tables(&copy, &tables).await.unwrap()
        );
    }
}
