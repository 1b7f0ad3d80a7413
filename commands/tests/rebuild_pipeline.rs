//! The pipelined rebuild: projections that only write apply the next page into a recorder while
//! the writer stores the last page's writes and applies the projections that may read, in their
//! turn. A projection's recorded writes must leave the same rows as the same projection applied
//! directly, a reading projection must see the writes of those before it, progress comes per
//! stored page, the writer's own error is the rebuild's, and a projection that reads while it
//! claims only to write is refused. On Postgres (SQLite takes the same path; the replay and
//! rebuild tests cover it there).

use events::store::testkit::TestDb;
use events::store::{EventStore, ExpectedVersion, LogStore, LogTx, SqlValue, StoreError, StoreTx};
use events::{NewEvent, RecordedEvent};
use projections::scratch;
use projections::{BoxFuture, Projection, ProjectionError, RebuildProgress, TableSpec};

const TABLE: TableSpec = TableSpec {
    name: "pipe_rows",
    columns: &["n", "stream_version"],
    order_by: "n",
};

/// Writes one row per event: `n` is the event's position, or `duplicate_at`'s row again for the
/// event at that position (a unique violation on the server). Every fifth event's row goes by
/// `insert_rows`, the others are deferred, so that both kinds of recorded write are replayed.
struct Rows {
    reads: bool,
    claims_only_writes: bool,
    duplicate_at: Option<i64>,
}

impl Projection for Rows {
    fn name(&self) -> &'static str {
        "pipe_rows"
    }
    fn tables(&self) -> &'static [TableSpec] {
        &[TABLE]
    }
    fn handles(&self, event_type: &str) -> bool {
        event_type == "pipe.step"
    }
    fn only_writes(&self) -> bool {
        self.claims_only_writes
    }
    fn apply<'a>(
        &'a self,
        tx: &'a mut StoreTx,
        events: &'a [&'a RecordedEvent],
    ) -> BoxFuture<'a, Result<(), ProjectionError>> {
        Box::pin(async move {
            if self.reads {
                projections::scratch::probe(tx).await?;
            }
            for e in events {
                let n = match self.duplicate_at {
                    Some(at) if e.position == at => 1,
                    _ => e.position,
                };
                if e.position % 5 == 0 {
                    let row = vec![SqlValue::Int(n), SqlValue::Int(e.stream_version)];
                    tx.insert_rows(TABLE.name, TABLE.columns, vec![row]).await?;
                } else {
                    tx.defer(scratch::insert_row(&TABLE, vec![n, e.stream_version]))
                        .await?;
                }
            }
            Ok(())
        })
    }
}

/// A Postgres store holding `count` events of type `pipe.step`, and the projection's table.
async fn store_with_events(db: &TestDb, count: usize) -> EventStore {
    let store = db.store().await.unwrap();
    let mut tx = store.begin().await.unwrap();
    scratch::create_table(&mut tx, &TABLE).await.unwrap();
    let events: Vec<NewEvent> = (0..count)
        .map(|i| {
            NewEvent::from_bytes(
                events::new_event_id(),
                "pipe.step",
                1,
                "t1",
                1_800_000_000_000_000 + i as i64,
                vec![],
            )
        })
        .collect();
    tx.append("pipe/1", ExpectedVersion::NoStream, &events)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    store
}

async fn rows(store: &EventStore) -> Vec<(i64, i64)> {
    assert!(
        matches!(store, EventStore::Postgres(_)),
        "these tests run on Postgres"
    );
    scratch::pairs(store, &TABLE).await.unwrap()
}

async fn rebuild(
    store: &EventStore,
    projection: &'static Rows,
) -> (Result<u64, ProjectionError>, Vec<RebuildProgress>) {
    let mut seen = Vec::new();
    let result = projections::rebuild(store, &[projection], None, 10, |p| seen.push(p)).await;
    (result, seen)
}

const COUNTS: TableSpec = TableSpec {
    name: "pipe_counts",
    columns: &["position", "seen"],
    order_by: "position",
};

/// Reads: for each page, records how many `pipe_rows` rows it sees (a statement that reads
/// another projection's table, so it does not only write).
struct RowCounter;

impl Projection for RowCounter {
    fn name(&self) -> &'static str {
        "pipe_counts"
    }
    fn tables(&self) -> &'static [TableSpec] {
        &[COUNTS]
    }
    fn handles(&self, event_type: &str) -> bool {
        event_type == "pipe.step"
    }
    fn apply<'a>(
        &'a self,
        tx: &'a mut StoreTx,
        events: &'a [&'a RecordedEvent],
    ) -> BoxFuture<'a, Result<(), ProjectionError>> {
        Box::pin(async move {
            let last = events.last().map_or(0, |e| e.position);
            scratch::insert_count_of(tx, &COUNTS, last, &TABLE).await?;
            Ok(())
        })
    }
}

static APPLIED_DIRECTLY: Rows = Rows {
    reads: false,
    claims_only_writes: false,
    duplicate_at: None,
};
static PIPELINED: Rows = Rows {
    reads: false,
    claims_only_writes: true,
    duplicate_at: None,
};
static FAILING: Rows = Rows {
    reads: false,
    claims_only_writes: true,
    duplicate_at: Some(17),
};
static LIAR: Rows = Rows {
    reads: true,
    claims_only_writes: true,
    duplicate_at: None,
};
static HONEST_READER: Rows = Rows {
    reads: true,
    claims_only_writes: false,
    duplicate_at: None,
};

#[tokio::test]
async fn recorded_writes_leave_the_rows_of_the_projection_applied_directly() {
    let db = TestDb::postgres().await.unwrap();
    let store = store_with_events(&db, 35).await;
    let (read, _) = rebuild(&store, &APPLIED_DIRECTLY).await;
    assert_eq!(read.unwrap(), 35);
    let expected = rows(&store).await;
    assert_eq!(expected.len(), 35);
    assert_eq!(expected[34], (35, 35));

    let (read, progress) = rebuild(&store, &PIPELINED).await;
    assert_eq!(read.unwrap(), 35);
    assert_eq!(rows(&store).await, expected);
    // One report per stored page of 10, in order, the last at the head.
    let reported: Vec<(u64, i64)> = progress
        .iter()
        .map(|p| (p.events_read, p.position))
        .collect();
    assert_eq!(reported, vec![(10, 10), (20, 20), (30, 30), (35, 35)]);
    assert!(progress.iter().all(|p| p.head == 35));
}

#[tokio::test]
async fn a_pipelined_rebuild_fails_with_the_writers_error_and_changes_nothing() {
    let db = TestDb::postgres().await.unwrap();
    let store = store_with_events(&db, 35).await;
    rebuild(&store, &PIPELINED).await.0.unwrap();
    let before = rows(&store).await;

    // Position 17 writes row 1 again: the server refuses it while storing the second page,
    // after the applier has moved on to later pages.
    let (result, progress) = rebuild(&store, &FAILING).await;
    match result {
        Err(ProjectionError::Store(StoreError::Database(e))) if e.as_database_error().is_some() => {
            let code = e.as_database_error().and_then(|d| d.code());
            assert_eq!(code.as_deref(), Some("23505"), "{e}");
        }
        other => panic!("expected the unique violation, got {other:?}"),
    }
    // Only the first page was stored before the failure.
    assert_eq!(progress.len(), 1);
    assert_eq!(progress[0].events_read, 10);
    // The rebuild's transaction was rolled back: the old rows are all there.
    assert_eq!(rows(&store).await, before);
}

#[tokio::test]
async fn a_projection_that_reads_while_claiming_only_to_write_is_refused() {
    let db = TestDb::postgres().await.unwrap();
    let store = store_with_events(&db, 5).await;
    match rebuild(&store, &LIAR).await.0 {
        Err(ProjectionError::Store(StoreError::RecordingOnly { op })) => {
            assert_eq!(op, "a statement whose row count is read");
        }
        other => panic!("expected RecordingOnly, got {other:?}"),
    }
    // Declared honestly, the same projection rebuilds.
    assert_eq!(rebuild(&store, &HONEST_READER).await.0.unwrap(), 5);
    assert_eq!(rows(&store).await.len(), 5);
}

#[tokio::test]
async fn a_projection_that_reads_sees_the_recorded_writes_of_those_before_it() {
    let db = TestDb::postgres().await.unwrap();
    let store = store_with_events(&db, 35).await;
    assert!(
        matches!(store, EventStore::Postgres(_)),
        "these tests run on Postgres"
    );
    scratch::create_table_now(&store, &COUNTS).await.unwrap();
    static COUNTER: RowCounter = RowCounter;
    let counts = || async { scratch::pairs(&store, &COUNTS).await.unwrap() };
    // Each page's count is taken after that page's rows are written, whichever the path.
    let expected = vec![(10, 10), (20, 20), (30, 30), (35, 35)];
    for writer in [&APPLIED_DIRECTLY, &PIPELINED] {
        let read = projections::rebuild(&store, &[writer, &COUNTER], None, 10, |_| {})
            .await
            .unwrap();
        assert_eq!(read, 35);
        assert_eq!(
            counts().await,
            expected,
            "only_writes={}",
            writer.claims_only_writes
        );
        assert_eq!(rows(&store).await.len(), 35);
    }
}

#[tokio::test]
async fn a_rebuild_cancelled_midway_commits_nothing_and_its_transaction_cannot_commit() {
    let db = TestDb::postgres().await.unwrap();
    let store = store_with_events(&db, 500).await;
    rebuild(&store, &PIPELINED).await.0.unwrap();
    let before = rows(&store).await;
    assert_eq!(before.len(), 500);

    // A replay-style rebuild in the caller's transaction, dropped once a page is stored: the
    // writer task still holds the real transaction, which nobody will commit.
    let mut tx = store.begin().await.unwrap();
    let first_page = std::sync::Arc::new(tokio::sync::Notify::new());
    let signal = first_page.clone();
    let writer: [&'static dyn Projection; 1] = [&PIPELINED];
    tokio::select! {
        done = projections::rebuild_in(&store, &mut tx, &writer, None, 10, move |_| {
            signal.notify_one()
        }) => panic!("the rebuild of 50 pages ended before its first page was reported: {done:?}"),
        _ = first_page.notified() => {}
    }
    match tx.commit().await {
        Err(StoreError::RecordingOnly { op }) => assert_eq!(op, "a commit"),
        other => panic!("a cancelled rebuild's transaction must not commit, got {other:?}"),
    }
    assert_eq!(rows(&store).await, before);
}
