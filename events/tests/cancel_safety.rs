//! A caller that gives up on an append (its future dropped mid-statement) must leave the store
//! usable and nothing of the append visible, on both backends.

use std::time::Duration;

use events::store::testkit::TestDb;
use events::store::{ExpectedVersion, LogStore, LogTx};
use events::NewEvent;

fn events(count: u32) -> Vec<NewEvent> {
    (0..count)
        .map(|n| {
            NewEvent::from_bytes(
                events::new_event_id(),
                "test.cancelled",
                1,
                "t1",
                i64::from(n),
                vec![7u8; 256],
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_append_leaves_nothing_and_the_store_usable() {
    for db in TestDb::each().await.unwrap() {
        let store = db.store().await.unwrap();
        for round in 0..20u64 {
            let store2 = store.clone();
            let attempt = tokio::time::timeout(Duration::from_micros(200 * round), async move {
                let mut tx = store2.begin().await?;
                tx.append(
                    &format!("c/{round}"),
                    ExpectedVersion::NoStream,
                    &events(2000),
                )
                .await?;
                // Never committed: the timeout drops it, or it is dropped here.
                Ok::<_, events::store::StoreError>(())
            })
            .await;
            drop(attempt);
            // The store still takes appends, and the dropped one left nothing behind.
            store
                .append(
                    &format!("ok/{round}"),
                    ExpectedVersion::NoStream,
                    &events(1),
                )
                .await
                .unwrap_or_else(|e| {
                    panic!("round {round}: store unusable after a dropped append: {e}")
                });
            assert!(store
                .read_stream(&format!("c/{round}"))
                .await
                .unwrap()
                .is_empty());
        }
        assert!(store.head_position().await.is_ok());
    }
}
