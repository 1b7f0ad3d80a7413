//! The pipelined rebuild (Postgres, every projection `only_writes`): projections apply the next
//! page into a recorder while the last page's writes are stored. It must leave the same rows as
//! the sequential rebuild, report progress per stored page, surface the writer's own error, and
//! refuse a projection that reads while it claims only to write.

use events::store::testkit::TestDb;
use events::store::{
    DeferredWrite, EventStore, ExpectedVersion, LogStore, LogTx, SqlValue, StoreError, StoreTx,
};
use events::{NewEvent, RecordedEvent};
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
                tx.execute("SELECT 1", &[]).await?;
            }
            for e in events {
                let n = match self.duplicate_at {
                    Some(at) if e.position == at => 1,
                    _ => e.position,
                };
                let row = vec![SqlValue::Int(n), SqlValue::Int(e.stream_version)];
                if e.position % 5 == 0 {
                    tx.insert_rows(TABLE.name, TABLE.columns, vec![row]).await?;
                } else {
                    tx.defer(DeferredWrite::new(
                        TABLE.name,
                        "INSERT INTO pipe_rows (n, stream_version) VALUES ($1, $2)".into(),
                        row,
                    ))
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
    tx.execute(
        "CREATE TABLE pipe_rows (n BIGINT PRIMARY KEY, stream_version BIGINT NOT NULL)",
        &[],
    )
    .await
    .unwrap();
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
    let EventStore::Postgres(pg) = store else {
        panic!("these tests run on Postgres");
    };
    sqlx::query_as("SELECT n, stream_version FROM pipe_rows ORDER BY n")
        .fetch_all(pg.pool())
        .await
        .unwrap()
}

async fn rebuild(
    store: &EventStore,
    projection: &Rows,
) -> (Result<u64, ProjectionError>, Vec<RebuildProgress>) {
    let mut seen = Vec::new();
    let result = projections::rebuild(store, &[projection], None, 10, |p| seen.push(p)).await;
    (result, seen)
}

#[tokio::test]
async fn a_pipelined_rebuild_leaves_the_rows_of_the_sequential_one() {
    let db = TestDb::postgres().await.unwrap();
    let store = store_with_events(&db, 35).await;
    let sequential = Rows {
        reads: false,
        claims_only_writes: false,
        duplicate_at: None,
    };
    let (read, _) = rebuild(&store, &sequential).await;
    assert_eq!(read.unwrap(), 35);
    let expected = rows(&store).await;
    assert_eq!(expected.len(), 35);
    assert_eq!(expected[34], (35, 35));

    let pipelined = Rows {
        claims_only_writes: true,
        ..sequential
    };
    let (read, progress) = rebuild(&store, &pipelined).await;
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
    let good = Rows {
        reads: false,
        claims_only_writes: true,
        duplicate_at: None,
    };
    rebuild(&store, &good).await.0.unwrap();
    let before = rows(&store).await;

    // Position 17 writes row 1 again: the server refuses it while storing the second page,
    // after the applier has moved on to later pages.
    let failing = Rows {
        duplicate_at: Some(17),
        ..good
    };
    let (result, progress) = rebuild(&store, &failing).await;
    match result {
        Err(ProjectionError::Store(StoreError::Database(sqlx::Error::Database(e)))) => {
            assert_eq!(e.code().as_deref(), Some("23505"), "{e}");
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
    let liar = Rows {
        reads: true,
        claims_only_writes: true,
        duplicate_at: None,
    };
    match rebuild(&store, &liar).await.0 {
        Err(ProjectionError::Store(StoreError::RecordingOnly { op })) => {
            assert_eq!(op, "a statement whose row count is read");
        }
        other => panic!("expected RecordingOnly, got {other:?}"),
    }
    // Declared honestly, the same projection rebuilds.
    let honest = Rows {
        claims_only_writes: false,
        ..liar
    };
    assert_eq!(rebuild(&store, &honest).await.0.unwrap(), 5);
    assert_eq!(rows(&store).await.len(), 5);
}
