//! Reading all of a 100,000-event log runs in bounded memory: batches, never one vector.
//!
//! This binary counts every allocation, so it holds this one test only.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use events::store::testkit::TestDb;
use events::store::{EventStore, ExpectedVersion, LogStore};
use events::NewEvent;

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            let now = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const EVENTS: usize = 100_000;
const PAYLOAD: usize = 512;

async fn fill(store: &EventStore) {
    let payload = vec![0xa5u8; PAYLOAD];
    for chunk in 0..EVENTS / 1000 {
        let batch: Vec<NewEvent> = (0..1000)
            .map(|i| {
                NewEvent::from_bytes(
                    *uuid::Uuid::new_v4().as_bytes(),
                    "test.filled",
                    1,
                    "t1",
                    (chunk * 1000 + i) as i64,
                    payload.clone(),
                )
            })
            .collect();
        store
            .append(&format!("fill/{chunk}"), ExpectedVersion::NoStream, &batch)
            .await
            .unwrap();
    }
}

/// Reads everything and returns (events read, peak bytes above the level at the start).
async fn read_everything(store: &EventStore) -> (usize, usize) {
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let mut pages = store.read_all(0, 1000);
    let mut count = 0;
    let mut last = 0;
    while let Some(batch) = pages.next_batch().await.unwrap() {
        for e in &batch {
            assert!(e.position > last);
            last = e.position;
        }
        count += batch.len();
    }
    (count, PEAK.load(Ordering::Relaxed).saturating_sub(base))
}

#[tokio::test(flavor = "current_thread")]
async fn reading_a_100k_event_log_stays_within_a_few_batches_of_memory() {
    // The whole log is ~100,000 x (512 B payload + envelope) = over 60 MB as one vector.
    let whole_log = EVENTS * PAYLOAD;
    let bound = 16 * 1024 * 1024;
    assert!(bound * 3 < whole_log);
    let dbs = TestDb::each().await.unwrap();
    let mut stores = Vec::new();
    for db in &dbs {
        stores.push(db.store().await.unwrap());
    }
    // Both backends filled at once (each waits on its own database); only the reads below are
    // measured, one backend at a time, after every fill has ended.
    futures::future::join_all(stores.iter().map(fill)).await;
    for (db, store) in dbs.iter().zip(&stores) {
        assert_eq!(store.head_position().await.unwrap(), EVENTS as i64);
        let (count, peak) = read_everything(store).await;
        assert_eq!(count, EVENTS);
        assert!(
            peak < bound,
            "{}: peak {} bytes while reading, bound {}",
            if db.is_postgres() {
                "postgres"
            } else {
                "sqlite"
            },
            peak,
            bound
        );
        eprintln!(
            "{}: read {count} events with a peak of {} KiB above start",
            if db.is_postgres() {
                "postgres"
            } else {
                "sqlite"
            },
            peak / 1024
        );
    }
}
