//! The log-store conformance suite: every check runs against Postgres and against SQLite.

use events::store::testkit::TestDb;
use events::store::{
    DeferredWrite, EventStore, ExpectedVersion, LogStore, LogTx, SqlValue, StoreError,
    StreamAppend, TailCursor, TailerOptions,
};
use events::NewEvent;

fn event(n: u32, tenant: &str) -> NewEvent {
    NewEvent::from_bytes(
        *uuid::Uuid::new_v4().as_bytes(),
        "test.happened",
        1,
        tenant,
        1_700_000_000_000_000 + i64::from(n),
        format!("payload-{n}").into_bytes(),
    )
}

fn events(count: u32) -> Vec<NewEvent> {
    (0..count).map(|n| event(n, "t1")).collect()
}

macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let db = events::store::testkit::TestDb::postgres().await.expect("test database");
                    super::$name(&db).await;
                }
            )*
        }
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let db = events::store::testkit::TestDb::sqlite().expect("test database");
                    super::$name(&db).await;
                }
            )*
        }
    };
}

on_both_backends!(
    appends_number_versions_from_one,
    expected_version_rules,
    conflict_reports_actual_version,
    retried_append_is_idempotent,
    retried_single_append_leaves_the_transaction_usable,
    single_event_reusing_an_id_elsewhere_is_refused,
    a_rolled_back_version_is_not_taken_as_committed,
    a_stream_moved_on_by_another_store_is_a_conflict,
    reused_event_id_elsewhere_is_refused,
    batch_sharing_a_later_id_is_refused,
    empty_append_is_refused,
    stored_bytes_are_the_appended_bytes,
    projection_writes_commit_with_the_append,
    rollback_leaves_nothing,
    update_and_delete_are_refused,
    read_batch_pages_in_position_order,
    tailer_delivers_everything_once_and_resumes,
    now_cursor_skips_the_past,
    cursor_text_round_trips,
    append_streams_lands_each_stream_at_its_versions,
    append_streams_conflict_names_the_stale_stream_and_lands_nothing,
    retried_append_streams_is_idempotent,
    insert_rows_writes_every_value_exactly,
    deferred_writes_land_in_order_and_check_their_counts,
    a_deferred_write_fails_when_it_is_sent,
);

async fn appends_number_versions_from_one(db: &TestDb) {
    let store = db.store().await.unwrap();
    let a = store
        .append("node/a", ExpectedVersion::NoStream, &events(3))
        .await
        .unwrap();
    assert_eq!(a.stream_version, 3);
    assert_eq!(a.positions.len(), 3);
    assert!(a.positions.windows(2).all(|w| w[0] < w[1]));
    assert!(!a.already_appended);
    let b = store
        .append("node/a", ExpectedVersion::Exact(3), &events(2))
        .await
        .unwrap();
    assert_eq!(b.stream_version, 5);
    let read = store.read_stream("node/a").await.unwrap();
    let versions: Vec<i64> = read.iter().map(|e| e.stream_version).collect();
    assert_eq!(versions, vec![1, 2, 3, 4, 5]);
    assert_eq!(
        read.iter().map(|e| e.position).collect::<Vec<_>>(),
        [a.positions.clone(), b.positions.clone()].concat()
    );
    assert_eq!(store.head_position().await.unwrap(), b.positions[1]);
    // What the append says it recorded is what the log holds (but the commit marker).
    let batch = events(2);
    let c = store
        .append("node/a", ExpectedVersion::Exact(5), &batch)
        .await
        .unwrap();
    let mut stored = store.read_stream("node/a").await.unwrap().split_off(5);
    for e in &mut stored {
        e.tx_id = None;
    }
    assert_eq!(c.recorded("node/a", &batch), stored);
}

async fn expected_version_rules(db: &TestDb) {
    let store = db.store().await.unwrap();
    // Any on a new stream creates it; Any on an existing one appends.
    assert_eq!(
        store
            .append("s", ExpectedVersion::Any, &events(1))
            .await
            .unwrap()
            .stream_version,
        1
    );
    assert_eq!(
        store
            .append("s", ExpectedVersion::Any, &events(2))
            .await
            .unwrap()
            .stream_version,
        3
    );
    // Exact(0) means "no stream yet".
    assert_eq!(
        store
            .append("t", ExpectedVersion::Exact(0), &events(1))
            .await
            .unwrap()
            .stream_version,
        1
    );
    assert!(store
        .append("s", ExpectedVersion::NoStream, &events(1))
        .await
        .unwrap_err()
        .is_conflict());
    assert!(store
        .append("s", ExpectedVersion::Exact(2), &events(1))
        .await
        .unwrap_err()
        .is_conflict());
    assert!(store
        .append("new", ExpectedVersion::Exact(1), &events(1))
        .await
        .unwrap_err()
        .is_conflict());
    // Nothing of the refused appends is in the log.
    assert_eq!(store.read_stream("s").await.unwrap().len(), 3);
    assert_eq!(store.read_stream("new").await.unwrap().len(), 0);
}

async fn conflict_reports_actual_version(db: &TestDb) {
    let store = db.store().await.unwrap();
    store
        .append("node/x", ExpectedVersion::NoStream, &events(4))
        .await
        .unwrap();
    match store
        .append("node/x", ExpectedVersion::Exact(2), &events(1))
        .await
    {
        Err(StoreError::Conflict {
            stream,
            expected,
            actual,
        }) => {
            assert_eq!(stream, "node/x");
            assert_eq!(expected, ExpectedVersion::Exact(2));
            assert_eq!(actual, 4);
        }
        other => panic!("expected a typed conflict, got {other:?}"),
    }
}

async fn retried_append_is_idempotent(db: &TestDb) {
    let store = db.store().await.unwrap();
    let batch = events(3);
    let first = store
        .append("node/r", ExpectedVersion::NoStream, &batch)
        .await
        .unwrap();
    // The same events again, even with the same (now stale) expected version: a no-op that
    // answers with the first append's positions.
    let again = store
        .append("node/r", ExpectedVersion::NoStream, &batch)
        .await
        .unwrap();
    assert!(again.already_appended);
    assert_eq!(again.positions, first.positions);
    assert_eq!(again.stream_version, 3);
    assert_eq!(store.read_stream("node/r").await.unwrap().len(), 3);
}

/// One event retried as the first thing of a transaction (Postgres appends it without the id
/// check, fails on the unique key and begins the transaction again) and as a later thing of one
/// (with the check): both answer with the first append, and the transaction goes on.
async fn retried_single_append_leaves_the_transaction_usable(db: &TestDb) {
    let store = db.store().await.unwrap();
    make_projection_table(&store).await;
    let e = event(1, "t1");
    let one = std::slice::from_ref(&e);
    let first = store
        .append("node/one", ExpectedVersion::NoStream, one)
        .await
        .unwrap();

    // First in its transaction.
    let mut tx = store.begin().await.unwrap();
    let again = tx
        .append("node/one", ExpectedVersion::NoStream, one)
        .await
        .unwrap();
    assert!(again.already_appended);
    assert_eq!(again.positions, first.positions);
    assert_eq!(again.stream_version, 1);
    let next = tx
        .append("node/one", ExpectedVersion::Exact(1), &[event(2, "t1")])
        .await
        .unwrap();
    assert_eq!(next.stream_version, 2);
    let seen_row = "INSERT INTO seen (stream_id, position) VALUES ($1, $2)";
    let row = |name: &str, position: i64| [SqlValue::Text(name.into()), SqlValue::Int(position)];
    tx.execute(seen_row, &row("after-retry", next.positions[0]))
        .await
        .unwrap();
    tx.commit().await.unwrap();

    // A conflict after another statement is not hidden by beginning again: the transaction is
    // aborted, and dropping it loses its row.
    let mut tx = store.begin().await.unwrap();
    tx.execute(seen_row, &row("conflicted", -1)).await.unwrap();
    let stale = tx
        .append("node/one", ExpectedVersion::Exact(1), &[event(3, "t1")])
        .await;
    assert!(stale.unwrap_err().is_conflict());
    drop(tx);

    // A retry after another statement: the append is found by the id check, the row stays.
    let mut tx = store.begin().await.unwrap();
    tx.execute(seen_row, &row("before-retry", -2))
        .await
        .unwrap();
    let again = tx
        .append("node/one", ExpectedVersion::NoStream, one)
        .await
        .unwrap();
    assert!(again.already_appended);
    tx.commit().await.unwrap();

    assert_eq!(store.read_stream("node/one").await.unwrap().len(), 2);
    let seen: Vec<(String, i64)> = read_rows(
        &store,
        "SELECT stream_id, position FROM seen ORDER BY position",
    )
    .await;
    assert_eq!(
        seen,
        vec![
            ("before-retry".to_string(), -2),
            ("after-retry".to_string(), next.positions[0])
        ]
    );
}

/// One event whose id is already in another stream, first in its transaction: refused as a
/// duplicate id, whatever the expected version, and nothing lands.
async fn single_event_reusing_an_id_elsewhere_is_refused(db: &TestDb) {
    let store = db.store().await.unwrap();
    let e = event(1, "t1");
    store
        .append("a", ExpectedVersion::NoStream, std::slice::from_ref(&e))
        .await
        .unwrap();
    for expected in [ExpectedVersion::NoStream, ExpectedVersion::Exact(1)] {
        if expected == ExpectedVersion::Exact(1) {
            store
                .append("b", ExpectedVersion::NoStream, &[event(2, "t1")])
                .await
                .unwrap();
        }
        let err = store
            .append("b", expected, std::slice::from_ref(&e))
            .await
            .unwrap_err();
        assert!(
            matches!(err, StoreError::DuplicateEventId { .. }),
            "{expected:?}: got {err:?}"
        );
    }
    assert_eq!(store.read_stream("a").await.unwrap().len(), 1);
    assert_eq!(store.read_stream("b").await.unwrap().len(), 1);
}

/// A version this store appended in a transaction that rolled back is not in the log: an append
/// expecting it is a conflict, not an append after a gap.
async fn a_rolled_back_version_is_not_taken_as_committed(db: &TestDb) {
    let store = db.store().await.unwrap();
    store
        .append("s", ExpectedVersion::NoStream, &[event(1, "t1")])
        .await
        .unwrap();
    let mut tx = store.begin().await.unwrap();
    let two = tx
        .append("s", ExpectedVersion::Exact(1), &[event(2, "t1")])
        .await
        .unwrap();
    assert_eq!(two.stream_version, 2);
    tx.rollback().await.unwrap();
    match store
        .append("s", ExpectedVersion::Exact(2), &[event(3, "t1")])
        .await
    {
        Err(StoreError::Conflict { actual, .. }) => assert_eq!(actual, 1),
        other => panic!("expected a conflict at version 1, got {other:?}"),
    }
    let versions: Vec<i64> = store
        .read_stream("s")
        .await
        .unwrap()
        .iter()
        .map(|e| e.stream_version)
        .collect();
    assert_eq!(versions, vec![1]);

    // The same through one statement for several streams.
    let append = |stream, expected, events| StreamAppend {
        stream,
        expected,
        events,
    };
    let mut tx = store.begin().await.unwrap();
    let (s3, t1) = ([event(4, "t1")], [event(5, "t1")]);
    tx.append_streams(&[
        append("s", ExpectedVersion::Exact(1), &s3[..]),
        append("t", ExpectedVersion::NoStream, &t1[..]),
    ])
    .await
    .unwrap();
    tx.rollback().await.unwrap();
    let mut tx = store.begin().await.unwrap();
    let (s4, t2) = ([event(6, "t1")], [event(7, "t1")]);
    let err = tx
        .append_streams(&[
            append("s", ExpectedVersion::Exact(2), &s4[..]),
            append("t", ExpectedVersion::Exact(1), &t2[..]),
        ])
        .await
        .unwrap_err();
    assert!(err.is_conflict(), "got {err:?}");
    drop(tx);
    assert_eq!(store.read_stream("s").await.unwrap().len(), 1);
    assert!(store.read_stream("t").await.unwrap().is_empty());
}

/// A store that appended version 1 itself, when another store (another process) has since
/// appended version 2: expecting 1 is still a conflict, reported at 2.
async fn a_stream_moved_on_by_another_store_is_a_conflict(db: &TestDb) {
    let ours = db.store().await.unwrap();
    let theirs = db.store().await.unwrap();
    ours.append("s", ExpectedVersion::NoStream, &[event(1, "t1")])
        .await
        .unwrap();
    theirs
        .append("s", ExpectedVersion::Exact(1), &[event(2, "t1")])
        .await
        .unwrap();
    match ours
        .append("s", ExpectedVersion::Exact(1), &[event(3, "t1")])
        .await
    {
        Err(StoreError::Conflict { actual, .. }) => assert_eq!(actual, 2),
        other => panic!("expected a conflict at version 2, got {other:?}"),
    }
    let three = ours
        .append("s", ExpectedVersion::Exact(2), &[event(4, "t1")])
        .await
        .unwrap();
    assert_eq!(three.stream_version, 3);
}

async fn reused_event_id_elsewhere_is_refused(db: &TestDb) {
    let store = db.store().await.unwrap();
    let e = event(1, "t1");
    store
        .append("a", ExpectedVersion::Any, std::slice::from_ref(&e))
        .await
        .unwrap();
    let err = store
        .append("b", ExpectedVersion::Any, &[e])
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::DuplicateEventId { .. }),
        "got {err:?}"
    );
    assert!(store.read_stream("b").await.unwrap().is_empty());
}

/// A batch whose first id is new but a later one is already in the log: refused, and nothing of
/// it (nor the stream version) is visible afterwards.
async fn batch_sharing_a_later_id_is_refused(db: &TestDb) {
    let store = db.store().await.unwrap();
    let old = event(1, "t1");
    store
        .append("a", ExpectedVersion::Any, std::slice::from_ref(&old))
        .await
        .unwrap();
    let batch = [event(2, "t1"), old, event(3, "t1")];
    let mut tx = store.begin().await.unwrap();
    let err = tx
        .append("b", ExpectedVersion::NoStream, &batch)
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::DuplicateEventId { .. }),
        "got {err:?}"
    );
    drop(tx);
    assert!(store.read_stream("b").await.unwrap().is_empty());
    assert_eq!(store.read_stream("a").await.unwrap().len(), 1);
    // The stream is still new: a fresh append at no-stream takes version 1.
    let fresh = store
        .append("b", ExpectedVersion::NoStream, &[event(4, "t1")])
        .await
        .unwrap();
    assert_eq!(fresh.stream_version, 1);
}

async fn empty_append_is_refused(db: &TestDb) {
    let store = db.store().await.unwrap();
    let err = store
        .append("a", ExpectedVersion::Any, &[])
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::EmptyAppend), "got {err:?}");
}

async fn stored_bytes_are_the_appended_bytes(db: &TestDb) {
    let store = db.store().await.unwrap();
    // Bytes that are not valid protobuf and not valid UTF-8 come back exactly.
    let payload: Vec<u8> = (0u8..=255).rev().chain([0, 0, 0xff]).collect();
    let id = *uuid::Uuid::new_v4().as_bytes();
    let e = NewEvent::from_bytes(id, "x.y", 7, "tenant-9", -42, payload.clone());
    let sha = *e.payload_sha256();
    store
        .append("bytes", ExpectedVersion::NoStream, &[e])
        .await
        .unwrap();
    let got = &store.read_stream("bytes").await.unwrap()[0];
    assert_eq!(got.payload, payload);
    assert_eq!(got.payload_sha256, sha);
    assert!(got.payload_hash_holds());
    assert_eq!(got.event_id, id);
    assert_eq!(got.event_type, "x.y");
    assert_eq!(got.schema_version, 7);
    assert_eq!(got.tenant_id, "tenant-9");
    assert_eq!(got.occurred_at_us, -42);
    assert_eq!(got.tx_id.is_some(), db.is_postgres());
}

async fn make_projection_table(store: &EventStore) {
    let mut tx = store.begin().await.unwrap();
    tx.execute(
        "CREATE TABLE seen (stream_id TEXT PRIMARY KEY, position BIGINT NOT NULL, note TEXT)",
        &[],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
}

/// Every row of `sql`, read in a transaction of its own on either backend.
async fn read_rows<T>(store: &EventStore, sql: &str) -> Vec<T>
where
    T: for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow>
        + for<'r> sqlx::FromRow<'r, sqlx::sqlite::SqliteRow>
        + Send
        + Unpin,
{
    let mut tx = store.begin().await.unwrap();
    let rows = match &mut tx {
        events::store::StoreTx::Postgres(t) => {
            sqlx::query_as::<_, T>(sql).fetch_all(t.connection()).await
        }
        events::store::StoreTx::Sqlite(t) => {
            sqlx::query_as::<_, T>(sql).fetch_all(t.connection()).await
        }
        events::store::StoreTx::Recorder(_) => unreachable!("begin gives a real transaction"),
    }
    .unwrap();
    tx.rollback().await.unwrap();
    rows
}

async fn count_seen(store: &EventStore) -> i64 {
    let rows: Vec<(i64,)> = read_rows(store, "SELECT count(*) FROM seen").await;
    rows[0].0
}

async fn projection_writes_commit_with_the_append(db: &TestDb) {
    let store = db.store().await.unwrap();
    make_projection_table(&store).await;
    let mut tx = store.begin().await.unwrap();
    let appended = tx
        .append("node/p", ExpectedVersion::NoStream, &events(1))
        .await
        .unwrap();
    let rows = tx
        .execute(
            "INSERT INTO seen (stream_id, position, note) VALUES ($1, $2, $3)",
            &[
                "node/p".into(),
                SqlValue::Int(appended.positions[0]),
                SqlValue::NullText,
            ],
        )
        .await
        .unwrap();
    assert_eq!(rows, 1);
    tx.commit().await.unwrap();
    assert_eq!(count_seen(&store).await, 1);
    assert_eq!(store.read_stream("node/p").await.unwrap().len(), 1);
}

async fn rollback_leaves_nothing(db: &TestDb) {
    let store = db.store().await.unwrap();
    make_projection_table(&store).await;
    let mut tx = store.begin().await.unwrap();
    tx.append("node/q", ExpectedVersion::NoStream, &events(2))
        .await
        .unwrap();
    tx.execute(
        "INSERT INTO seen (stream_id, position) VALUES ($1, $2)",
        &["node/q".into(), SqlValue::Int(1)],
    )
    .await
    .unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(count_seen(&store).await, 0);
    assert!(store.read_stream("node/q").await.unwrap().is_empty());
    // The stream was never created: NoStream still holds.
    store
        .append("node/q", ExpectedVersion::NoStream, &events(1))
        .await
        .unwrap();
}

async fn update_and_delete_are_refused(db: &TestDb) {
    let store = db.store().await.unwrap();
    store
        .append("node/u", ExpectedVersion::NoStream, &events(2))
        .await
        .unwrap();
    for sql in [
        "UPDATE events SET payload = $1",
        "UPDATE events SET tenant_id = 'other' WHERE stream_id = 'node/u'",
        "DELETE FROM events",
        "DELETE FROM events WHERE stream_version = 2",
    ] {
        let mut tx = store.begin().await.unwrap();
        let args: Vec<SqlValue> = if sql.contains("$1") {
            vec![SqlValue::Bytes(b"x".to_vec())]
        } else {
            vec![]
        };
        let err = tx.execute(sql, &args).await.unwrap_err();
        assert!(
            err.to_string().contains("append-only"),
            "{sql} was not refused by the database: {err}"
        );
        drop(tx);
    }
    if db.is_postgres() {
        let mut tx = store.begin().await.unwrap();
        let err = tx.execute("TRUNCATE events", &[]).await.unwrap_err();
        assert!(err.to_string().contains("append-only"), "{err}");
    }
    let read = store.read_stream("node/u").await.unwrap();
    assert_eq!(read.len(), 2);
    assert_eq!(read[0].payload, b"payload-0");
}

async fn read_batch_pages_in_position_order(db: &TestDb) {
    let store = db.store().await.unwrap();
    for i in 0..5 {
        store
            .append(&format!("s/{i}"), ExpectedVersion::NoStream, &events(7))
            .await
            .unwrap();
    }
    let mut pages = store.read_all(0, 10);
    let mut positions = Vec::new();
    let mut page_sizes = Vec::new();
    while let Some(batch) = pages.next_batch().await.unwrap() {
        page_sizes.push(batch.len());
        positions.extend(batch.iter().map(|e| e.position));
    }
    assert_eq!(page_sizes, vec![10, 10, 10, 5]);
    assert_eq!(positions.len(), 35);
    assert!(positions.windows(2).all(|w| w[0] < w[1]));
    // From the middle.
    let rest = store.read_batch(positions[29], 100).await.unwrap();
    assert_eq!(rest.len(), 5);
}

async fn tailer_delivers_everything_once_and_resumes(db: &TestDb) {
    let store = db.store().await.unwrap();
    let options = TailerOptions {
        batch: 4,
        poll_interval: std::time::Duration::from_millis(5),
    };
    let mut tailer = store.tailer(store.start_cursor(), options);
    for i in 0..3 {
        store
            .append(&format!("n/{i}"), ExpectedVersion::NoStream, &events(5))
            .await
            .unwrap();
    }
    let mut seen = Vec::new();
    while seen.len() < 15 {
        let batch = tokio::time::timeout(std::time::Duration::from_secs(10), tailer.next_batch())
            .await
            .expect("tailer delivered in time")
            .unwrap();
        assert!(batch.len() <= 4);
        seen.extend(batch.iter().map(|e| e.position));
    }
    assert_eq!(seen.len(), 15);
    // Resume from the stored text of the cursor: only newer events arrive.
    let saved = tailer.cursor().to_string();
    drop(tailer);
    store
        .append("n/later", ExpectedVersion::NoStream, &events(2))
        .await
        .unwrap();
    let mut resumed = store.tailer(saved.parse().unwrap(), options);
    let mut later = Vec::new();
    while later.len() < 2 {
        later.extend(resumed.next_batch().await.unwrap());
    }
    assert_eq!(later.len(), 2);
    assert!(later.iter().all(|e| e.stream_id == "n/later"));
    assert!(resumed.poll().await.unwrap().is_empty());
    let mut all = seen.clone();
    all.extend(later.iter().map(|e| e.position));
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), 17, "every event delivered exactly once");
}

async fn now_cursor_skips_the_past(db: &TestDb) {
    let store = db.store().await.unwrap();
    store
        .append("old", ExpectedVersion::NoStream, &events(3))
        .await
        .unwrap();
    let mut tailer = store.tailer(store.now_cursor().await.unwrap(), TailerOptions::default());
    assert!(tailer.poll().await.unwrap().is_empty());
    store
        .append("new", ExpectedVersion::NoStream, &events(1))
        .await
        .unwrap();
    let got = tailer.next_batch().await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].stream_id, "new");
}

async fn cursor_text_round_trips(db: &TestDb) {
    let store = db.store().await.unwrap();
    let cursors = [store.start_cursor(), store.now_cursor().await.unwrap()];
    for c in cursors {
        let parsed: TailCursor = c.to_string().parse().unwrap();
        assert_eq!(parsed, c);
    }
    for bad in ["", "pg1;x;-;0;0", "sqlite1;abc", "pg1;1:1:;-;0", "other;1"] {
        assert!(
            matches!(bad.parse::<TailCursor>(), Err(StoreError::BadCursor { .. })),
            "{bad:?} parsed"
        );
    }
}

/// Appends to `appends` in one transaction and commits.
async fn append_streams(
    store: &EventStore,
    appends: &[StreamAppend<'_>],
) -> Result<Vec<events::store::Appended>, StoreError> {
    let mut tx = store.begin().await?;
    match tx.append_streams(appends).await {
        Ok(done) => {
            tx.commit().await?;
            Ok(done)
        }
        Err(e) => {
            tx.rollback().await?;
            Err(e)
        }
    }
}

async fn append_streams_lands_each_stream_at_its_versions(db: &TestDb) {
    let store = db.store().await.unwrap();
    store
        .append("token/m", ExpectedVersion::NoStream, &events(2))
        .await
        .unwrap();
    let (node, token) = (events(2), events(1));
    let done = append_streams(
        &store,
        &[
            StreamAppend {
                stream: "node/m",
                expected: ExpectedVersion::NoStream,
                events: &node,
            },
            StreamAppend {
                stream: "token/m",
                expected: ExpectedVersion::Exact(2),
                events: &token,
            },
        ],
    )
    .await
    .unwrap();
    assert_eq!(done.len(), 2);
    assert_eq!(done[0].stream_version, 2);
    assert_eq!(done[1].stream_version, 3);
    assert_eq!(done[0].positions, vec![3, 4]);
    assert_eq!(done[1].positions, vec![5]);
    assert!(done.iter().all(|d| !d.already_appended));
    let read = store.read_stream("node/m").await.unwrap();
    assert_eq!(
        read.iter()
            .map(|e| (e.position, e.stream_version))
            .collect::<Vec<_>>(),
        vec![(3, 1), (4, 2)]
    );
    assert_eq!(read[1].event_id, node[1].event_id);
    let read = store.read_stream("token/m").await.unwrap();
    assert_eq!(read.last().map(|e| e.event_id), Some(token[0].event_id));
    assert_eq!(read.last().map(|e| e.stream_version), Some(3));
}

async fn append_streams_conflict_names_the_stale_stream_and_lands_nothing(db: &TestDb) {
    let store = db.store().await.unwrap();
    store
        .append("token/s", ExpectedVersion::NoStream, &events(3))
        .await
        .unwrap();
    let (node, token) = (events(2), events(1));
    let result = append_streams(
        &store,
        &[
            StreamAppend {
                stream: "node/s",
                expected: ExpectedVersion::NoStream,
                events: &node,
            },
            StreamAppend {
                stream: "token/s",
                expected: ExpectedVersion::Exact(2),
                events: &token,
            },
        ],
    )
    .await;
    match result {
        Err(StoreError::Conflict {
            stream,
            expected,
            actual,
        }) => {
            assert_eq!(stream, "token/s");
            assert_eq!(expected, ExpectedVersion::Exact(2));
            assert_eq!(actual, 3);
        }
        other => panic!("expected a typed conflict on token/s, got {other:?}"),
    }
    assert!(store.read_stream("node/s").await.unwrap().is_empty());
    assert_eq!(store.read_stream("token/s").await.unwrap().len(), 3);
    assert_eq!(store.head_position().await.unwrap(), 3);

    // A stream that exists where the caller expected none.
    let other = events(1);
    let result = append_streams(
        &store,
        &[
            StreamAppend {
                stream: "node/s2",
                expected: ExpectedVersion::NoStream,
                events: &other,
            },
            StreamAppend {
                stream: "token/s",
                expected: ExpectedVersion::NoStream,
                events: &token,
            },
        ],
    )
    .await;
    match result {
        Err(StoreError::Conflict { stream, actual, .. }) => {
            assert_eq!(stream, "token/s");
            assert_eq!(actual, 3);
        }
        other => panic!("expected a typed conflict on token/s, got {other:?}"),
    }
    assert!(store.read_stream("node/s2").await.unwrap().is_empty());
    assert_eq!(store.head_position().await.unwrap(), 3);
}

async fn retried_append_streams_is_idempotent(db: &TestDb) {
    let store = db.store().await.unwrap();
    let (node, token) = (events(2), events(2));
    let appends = [
        StreamAppend {
            stream: "node/i",
            expected: ExpectedVersion::NoStream,
            events: &node,
        },
        StreamAppend {
            stream: "token/i",
            expected: ExpectedVersion::NoStream,
            events: &token,
        },
    ];
    let first = append_streams(&store, &appends).await.unwrap();
    let again = append_streams(&store, &appends).await.unwrap();
    assert!(again.iter().all(|d| d.already_appended));
    assert_eq!(again[0].positions, first[0].positions);
    assert_eq!(again[1].positions, first[1].positions);
    assert_eq!(again[1].stream_version, 2);
    assert_eq!(store.head_position().await.unwrap(), 4);
}

type BulkRow = (
    i64,
    String,
    Vec<u8>,
    bool,
    Option<i64>,
    Option<String>,
    Option<Vec<u8>>,
);

async fn read_bulk(store: &EventStore) -> Vec<BulkRow> {
    read_rows(store, "SELECT id, t, b, f, n, nt, nb FROM bulk ORDER BY id").await
}

/// `insert_rows` with enough rows for Postgres' `COPY` (200) and with few (3, multi-row
/// `INSERT`), every kind of value and NULL: the table holds exactly what was passed.
async fn insert_rows_writes_every_value_exactly(db: &TestDb) {
    let store = db.store().await.unwrap();
    let mut tx = store.begin().await.unwrap();
    tx.execute(
        "CREATE TABLE bulk (id BIGINT PRIMARY KEY, t TEXT NOT NULL, b BYTEA NOT NULL, \
         f BOOLEAN NOT NULL, n BIGINT, nt TEXT, nb BYTEA)",
        &[],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();

    let row = |i: i64| -> (Vec<SqlValue>, BulkRow) {
        let text = format!("row {i}: tab\t, newline\n, backslash \\, quote ', é");
        let bytes: Vec<u8> = (0..=255u8).cycle().skip(i as usize).take(300).collect();
        let n = (i % 3 == 0).then_some(i64::MIN + i);
        let nt = (i % 2 == 0).then(|| format!("{i}"));
        let nb = (i % 5 == 0).then(|| vec![0u8; i as usize % 7]);
        (
            vec![
                SqlValue::Int(i - 100),
                SqlValue::Text(text.clone()),
                SqlValue::Bytes(bytes.clone()),
                SqlValue::Bool(i % 2 == 1),
                n.map_or(SqlValue::NullInt, SqlValue::Int),
                nt.clone().map_or(SqlValue::NullText, SqlValue::Text),
                nb.clone().map_or(SqlValue::NullBytes, SqlValue::Bytes),
            ],
            (i - 100, text, bytes, i % 2 == 1, n, nt, nb),
        )
    };
    let columns = ["id", "t", "b", "f", "n", "nt", "nb"];
    let (many, mut expected): (Vec<_>, Vec<_>) = (0..200).map(row).unzip();
    let (few, expected_few): (Vec<_>, Vec<_>) = (200..203).map(row).unzip();
    expected.extend(expected_few);

    let mut tx = store.begin().await.unwrap();
    assert_eq!(tx.insert_rows("bulk", &columns, many).await.unwrap(), 200);
    assert_eq!(tx.insert_rows("bulk", &columns, few).await.unwrap(), 3);
    tx.commit().await.unwrap();
    assert_eq!(read_bulk(&store).await, expected);

    // A duplicate key fails the whole insert, and the transaction's rows go with it.
    let mut tx = store.begin().await.unwrap();
    let again = vec![row(300).0; 100];
    assert!(tx.insert_rows("bulk", &columns, again).await.is_err());
    tx.rollback().await.unwrap();
    assert_eq!(read_bulk(&store).await.len(), 203);
}

async fn make_deferred_tables(store: &EventStore) {
    let mut tx = store.begin().await.unwrap();
    tx.execute(
        "CREATE TABLE da (id BIGINT PRIMARY KEY, v TEXT NOT NULL)",
        &[],
    )
    .await
    .unwrap();
    tx.execute(
        "CREATE TABLE db (id BIGINT PRIMARY KEY, n BIGINT NOT NULL)",
        &[],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
}

async fn read_deferred_tables(store: &EventStore) -> (Vec<(i64, String)>, Vec<(i64, i64)>) {
    (
        read_rows(store, "SELECT id, v FROM da ORDER BY id").await,
        read_rows(store, "SELECT id, n FROM db ORDER BY id").await,
    )
}

fn write(table: &str, sql: &str, args: Vec<SqlValue>) -> DeferredWrite {
    DeferredWrite::new(table, sql.to_owned(), args)
}

/// Deferred writes to two tables go out together (one statement on Postgres), a later write to a
/// table with one queued sees it, a quoted `$1` is left alone when parameters are renumbered,
/// and the commit sends what is still queued.
async fn deferred_writes_land_in_order_and_check_their_counts(db: &TestDb) {
    let store = db.store().await.unwrap();
    make_deferred_tables(&store).await;
    let mut tx = store.begin().await.unwrap();
    tx.defer(write(
        "da",
        "INSERT INTO da (id, v) VALUES ($1, $2), ($3, '$1 stays')",
        vec![1.into(), "a".into(), 2.into()],
    ))
    .await
    .unwrap();
    tx.defer(write(
        "db",
        "INSERT INTO db (id, n) VALUES ($1, $2)",
        vec![1.into(), 10.into()],
    ))
    .await
    .unwrap();
    // `da` has a write queued: this one goes after it and must find its row.
    tx.defer(
        write(
            "da",
            "UPDATE da SET v = v || $2 WHERE id = $1",
            vec![1.into(), "!".into()],
        )
        .expecting(1, "row 1 was inserted just before".into()),
    )
    .await
    .unwrap();
    tx.defer(
        write(
            "db",
            "UPDATE db SET n = n + $2 WHERE id = $1",
            vec![1.into(), 5.into()],
        )
        .expecting(1, "row 1 was inserted just before".into()),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(
        read_deferred_tables(&store).await,
        (
            vec![(1, "a!".to_owned()), (2, "$1 stays".to_owned())],
            vec![(1, 15)]
        )
    );
}

/// A deferred write that changes another number of rows than it expects, alone or sent with
/// others, fails with `UnexpectedRowCount` naming its table and meaning; one that breaks a unique
/// key fails as the database error. Nothing of the transaction lands.
async fn a_deferred_write_fails_when_it_is_sent(db: &TestDb) {
    let store = db.store().await.unwrap();
    make_deferred_tables(&store).await;
    let missing = || {
        write("da", "UPDATE da SET v = 'x' WHERE id = $1", vec![99.into()])
            .expecting(1, "row 99 should exist".into())
    };
    let expected_error = |e: StoreError| match e {
        StoreError::UnexpectedRowCount {
            table,
            expected,
            changed,
            meaning,
        } => assert_eq!(
            (table.as_str(), expected, changed, meaning.as_str()),
            ("da", 1, 0, "row 99 should exist")
        ),
        other => panic!("expected UnexpectedRowCount, got {other:?}"),
    };

    // Alone.
    let mut tx = store.begin().await.unwrap();
    let sent = async {
        tx.defer(missing()).await?;
        tx.flush().await
    }
    .await;
    expected_error(sent.unwrap_err());
    tx.rollback().await.unwrap();

    // Sent with a write to another table.
    let mut tx = store.begin().await.unwrap();
    let sent = async {
        tx.defer(write(
            "db",
            "INSERT INTO db (id, n) VALUES ($1, $2)",
            vec![2.into(), 0.into()],
        ))
        .await?;
        tx.defer(missing()).await?;
        tx.flush().await
    }
    .await;
    expected_error(sent.unwrap_err());
    tx.rollback().await.unwrap();
    assert_eq!(read_deferred_tables(&store).await, (vec![], vec![]));

    // A duplicate key, found when the write is sent (at once on SQLite).
    let mut tx = store.begin().await.unwrap();
    tx.execute("INSERT INTO da (id, v) VALUES (1, 'first')", &[])
        .await
        .unwrap();
    let sent = async {
        tx.defer(write(
            "db",
            "INSERT INTO db (id, n) VALUES ($1, $2)",
            vec![3.into(), 0.into()],
        ))
        .await?;
        tx.defer(write(
            "da",
            "INSERT INTO da (id, v) VALUES ($1, $2)",
            vec![1.into(), "again".into()],
        ))
        .await?;
        tx.flush().await
    }
    .await;
    match sent {
        Err(StoreError::Database(sqlx::Error::Database(e))) => assert!(e.is_unique_violation()),
        other => panic!("expected a unique violation, got {other:?}"),
    }
    tx.rollback().await.unwrap();
    assert_eq!(read_deferred_tables(&store).await, (vec![], vec![]));
}
