//! Races that only a real Postgres shows: concurrent appenders, late commits, rollbacks and
//! killed connections against the exact tailer.

use std::sync::Arc;
use std::time::Duration;

use events::store::testkit::TestDb;
use events::store::{
    ExpectedVersion, LogStore, LogTx, PgLogStore, StoreError, StreamAppend, Tailer, TailerOptions,
};
use events::NewEvent;
use tokio::sync::Barrier;

fn event(n: u32) -> NewEvent {
    NewEvent::from_bytes(
        *uuid::Uuid::new_v4().as_bytes(),
        "test.happened",
        1,
        "t1",
        i64::from(n),
        n.to_be_bytes().to_vec(),
    )
}

/// Waits (up to 5 s) until backend `pid` waits on a lock, asking through `store`'s pool.
async fn wait_until_waiting_on_a_lock(store: &PgLogStore, pid: i32) {
    for _ in 0..500 {
        let waiting: bool = sqlx::query_scalar(
            "SELECT coalesce(bool_or(wait_event_type = 'Lock'), false) FROM pg_stat_activity \
             WHERE pid = $1",
        )
        .bind(pid)
        .fetch_one(store.pool())
        .await
        .unwrap();
        if waiting {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn pid(tx: &mut events::store::PgStoreTx) -> i32 {
    sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(tx.connection())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_appenders_at_one_expected_version_one_wins() {
    let db = TestDb::postgres().await.unwrap();
    let store = db.pg_store(70).await.unwrap();
    let mut tx = store.begin().await.unwrap();
    tx.append("node/contended", ExpectedVersion::NoStream, &[event(0)])
        .await
        .unwrap();
    tx.commit().await.unwrap();

    let barrier = Arc::new(Barrier::new(64));
    let mut tasks = Vec::new();
    for i in 0..64u32 {
        let store = store.clone();
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            let mut tx = store.begin().await?;
            barrier.wait().await;
            let appended = tx
                .append("node/contended", ExpectedVersion::Exact(1), &[event(i + 1)])
                .await?;
            tx.commit().await?;
            Ok::<_, StoreError>(appended)
        }));
    }
    let mut wins = 0;
    let mut conflicts = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(a) => {
                wins += 1;
                assert_eq!(a.stream_version, 2);
            }
            Err(StoreError::Conflict {
                expected, actual, ..
            }) => {
                conflicts += 1;
                assert_eq!(expected, ExpectedVersion::Exact(1));
                assert_eq!(actual, 2);
            }
            Err(other) => panic!("expected a typed conflict, got {other:?}"),
        }
    }
    assert_eq!((wins, conflicts), (1, 63));
    let stream = store.read_stream("node/contended").await.unwrap();
    let versions: Vec<i64> = stream.iter().map(|e| e.stream_version).collect();
    assert_eq!(versions, vec![1, 2]);
    let total: i64 = sqlx::query_scalar("SELECT count(*) FROM events")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(total, 2);
}

/// The same race through the one-statement append to two streams, as a join makes it: each
/// appender writes a node stream of its own and the shared token stream at version 1. Exactly
/// one wins; every loser gets the typed conflict naming the token stream, and none of the
/// losers' node events lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_two_stream_appenders_one_wins_and_losers_land_nothing() {
    let db = TestDb::postgres().await.unwrap();
    let store = db.pg_store(70).await.unwrap();
    let mut tx = store.begin().await.unwrap();
    tx.append("token/contended", ExpectedVersion::NoStream, &[event(0)])
        .await
        .unwrap();
    tx.commit().await.unwrap();

    let barrier = Arc::new(Barrier::new(64));
    let mut tasks = Vec::new();
    for i in 0..64u32 {
        let store = store.clone();
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            let node_stream = format!("node/racer-{i}");
            let node = [event(1000 + i), event(2000 + i)];
            let token = [event(i + 1)];
            let mut tx = store.begin().await?;
            barrier.wait().await;
            let appended = tx
                .append_streams(&[
                    StreamAppend {
                        stream: &node_stream,
                        expected: ExpectedVersion::NoStream,
                        events: &node,
                    },
                    StreamAppend {
                        stream: "token/contended",
                        expected: ExpectedVersion::Exact(1),
                        events: &token,
                    },
                ])
                .await?;
            tx.commit().await?;
            Ok::<_, StoreError>((i, appended))
        }));
    }
    let mut winner = None;
    let mut conflicts = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok((i, a)) => {
                assert!(winner.is_none(), "two appenders won");
                winner = Some(i);
                assert_eq!((a[0].stream_version, a[1].stream_version), (2, 2));
            }
            Err(StoreError::Conflict {
                stream,
                expected,
                actual,
            }) => {
                conflicts += 1;
                assert_eq!(stream, "token/contended");
                assert_eq!(expected, ExpectedVersion::Exact(1));
                assert_eq!(actual, 2);
            }
            Err(other) => panic!("expected a typed conflict, got {other:?}"),
        }
    }
    assert_eq!(conflicts, 63);
    let winner = winner.expect("one appender wins");
    let token = store.read_stream("token/contended").await.unwrap();
    assert_eq!(
        token.iter().map(|e| e.stream_version).collect::<Vec<_>>(),
        vec![1, 2]
    );
    let node_streams: Vec<String> =
        sqlx::query_scalar("SELECT DISTINCT stream_id FROM events WHERE stream_id LIKE 'node/%'")
            .fetch_all(store.pool())
            .await
            .unwrap();
    assert_eq!(node_streams, vec![format!("node/racer-{winner}")]);
    let total: i64 = sqlx::query_scalar("SELECT count(*) FROM events")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(total, 4);
}

/// `Any` appends never conflict, however many race on one stream: the per-stream lock makes
/// each read the version the previous one committed. Single events and batches mixed; the
/// stream ends gap-free with every event exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_any_appenders_on_one_stream_all_land() {
    let db = TestDb::postgres().await.unwrap();
    let store = db.pg_store(70).await.unwrap();
    let barrier = Arc::new(Barrier::new(64));
    let mut tasks = Vec::new();
    for i in 0..64u32 {
        let store = store.clone();
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            let batch: Vec<NewEvent> = (0..1 + i % 3).map(|k| event(i * 10 + k)).collect();
            let mut tx = store.begin().await?;
            barrier.wait().await;
            let appended = tx
                .append("tenant/hot", ExpectedVersion::Any, &batch)
                .await?;
            tx.commit().await?;
            Ok::<_, StoreError>((batch.len(), appended))
        }));
    }
    let mut expected_total = 0u64;
    for t in tasks {
        let (n, appended) = t.await.unwrap().expect("an Any append never conflicts");
        assert_eq!(appended.positions.len(), n);
        expected_total += n as u64;
    }
    let stream = store.read_stream("tenant/hot").await.unwrap();
    let versions: Vec<u64> = stream.iter().map(|e| e.stream_version as u64).collect();
    assert_eq!(versions, (1..=expected_total).collect::<Vec<_>>());
}

/// The loser of a race gets its typed conflict even when every connection of its pool is held:
/// it waits briefly for a second connection to read the stream's version, and without one
/// reports the version it collided with. Reading it on the pool unconditionally made such a
/// loser wait for the pool's acquire timeout (30 s) and then fail with a pool error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_race_lost_while_the_pool_is_exhausted_is_still_a_conflict() {
    let db = TestDb::postgres().await.unwrap();
    let winner_store = db.pg_store(2).await.unwrap();
    let store = db.pg_store(2).await.unwrap();
    let mut setup = store.begin().await.unwrap();
    setup
        .append("pool/s", ExpectedVersion::NoStream, &[event(0)])
        .await
        .unwrap();
    setup.commit().await.unwrap();

    let mut winner = winner_store.begin().await.unwrap();
    winner
        .append("pool/s", ExpectedVersion::Exact(1), &[event(1)])
        .await
        .unwrap();
    // The loser's pool has two connections: one held idle here, one the loser's.
    let idle = store.begin().await.unwrap();
    let mut loser = store.begin().await.unwrap();
    let loser_pid = pid(&mut loser).await;
    let race = tokio::spawn(async move {
        let r = loser
            .append("pool/s", ExpectedVersion::Exact(1), &[event(2)])
            .await;
        (r, loser)
    });
    wait_until_waiting_on_a_lock(&winner_store, loser_pid).await;
    winner.commit().await.unwrap();
    let (result, loser) = tokio::time::timeout(Duration::from_secs(20), race)
        .await
        .expect("the loser must not wait for the pool's acquire timeout")
        .unwrap();
    match result {
        Err(StoreError::Conflict {
            expected, actual, ..
        }) => {
            assert_eq!(expected, ExpectedVersion::Exact(1));
            assert_eq!(actual, 2);
        }
        other => panic!("expected a typed conflict, got {other:?}"),
    }
    drop(loser);
    drop(idle);
    let versions: Vec<i64> = store
        .read_stream("pool/s")
        .await
        .unwrap()
        .iter()
        .map(|e| e.stream_version)
        .collect();
    assert_eq!(versions, vec![1, 2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_commit_of_a_lower_position_is_delivered_exactly_once() {
    let db = TestDb::postgres().await.unwrap();
    let store = db.pg_store(8).await.unwrap();
    late_commit_case(&store, &store, TailerOptions::default()).await;
}

/// The same with the tailer on a store of its own (another pool: what another process is) that
/// never polls: only the commit notifications wake it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_commit_of_a_lower_position_is_delivered_exactly_once_by_a_notified_tailer() {
    let db = TestDb::postgres().await.unwrap();
    let writer = db.pg_store(8).await.unwrap();
    let reader = db.pg_store(2).await.unwrap();
    late_commit_case(&writer, &reader, notified_only()).await;
}

/// A tailer that steps only when its commit signal changes (the poll is an hour): woken across
/// stores only by LISTEN/NOTIFY. Waits until the reader's listener is in place.
fn notified_only() -> TailerOptions {
    TailerOptions {
        poll_interval: Duration::from_secs(3600),
        ..TailerOptions::default()
    }
}

async fn listening(reader: &PgLogStore) {
    let _signal = reader.commit_signal();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !reader.wake().is_listening() {
        assert!(
            std::time::Instant::now() < deadline,
            "the listener never listened"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn late_commit_case(store: &PgLogStore, reader: &PgLogStore, options: TailerOptions) {
    let mut tailer = Tailer::new(reader.clone(), reader.start_cursor(), options);
    listening(reader).await;

    // A takes the lower position and stays open.
    let mut a = store.begin().await.unwrap();
    let a_pos = a
        .append("late/a", ExpectedVersion::NoStream, &[event(1)])
        .await
        .unwrap()
        .positions[0];
    // B takes a higher position and commits first.
    let mut b = store.begin().await.unwrap();
    let b_pos = b
        .append("late/b", ExpectedVersion::NoStream, &[event(2)])
        .await
        .unwrap()
        .positions[0];
    b.commit().await.unwrap();
    assert!(a_pos < b_pos);

    let first = tailer.next_batch().await.unwrap();
    assert_eq!(
        first.iter().map(|e| e.position).collect::<Vec<_>>(),
        vec![b_pos]
    );
    // B is delivered while A is open; nothing else is.
    assert!(tailer.poll().await.unwrap().is_empty());

    a.commit().await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(10), tailer.next_batch())
        .await
        .expect("the late commit is delivered")
        .unwrap();
    assert_eq!(
        second.iter().map(|e| e.position).collect::<Vec<_>>(),
        vec![a_pos]
    );
    for _ in 0..5 {
        assert!(tailer.poll().await.unwrap().is_empty(), "delivered twice");
    }
    // A cursor saved between the two deliveries also gets A exactly once.
    let mut fresh = Tailer::new(reader.clone(), reader.start_cursor(), options);
    let mut all = fresh.poll().await.unwrap();
    all.extend(fresh.poll().await.unwrap());
    let mut positions: Vec<i64> = all.iter().map(|e| e.position).collect();
    positions.sort_unstable();
    assert_eq!(positions, vec![a_pos, b_pos]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolled_back_position_is_never_delivered_and_never_stalls() {
    let db = TestDb::postgres().await.unwrap();
    let store = db.pg_store(8).await.unwrap();
    rollback_case(&store, &store, TailerOptions::default()).await;
}

/// The same with a tailer woken only by commit notifications (see [`notified_only`]).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolled_back_position_is_never_delivered_and_never_stalls_for_a_notified_tailer() {
    let db = TestDb::postgres().await.unwrap();
    let writer = db.pg_store(8).await.unwrap();
    let reader = db.pg_store(2).await.unwrap();
    rollback_case(&writer, &reader, notified_only()).await;
}

async fn rollback_case(store: &PgLogStore, reader: &PgLogStore, options: TailerOptions) {
    let mut tailer = Tailer::new(reader.clone(), reader.start_cursor(), options);
    listening(reader).await;

    let mut doomed = store.begin().await.unwrap();
    let doomed_pos = doomed
        .append("rb/doomed", ExpectedVersion::NoStream, &[event(1)])
        .await
        .unwrap()
        .positions[0];
    let mut later = store.begin().await.unwrap();
    let later_pos = later
        .append("rb/later", ExpectedVersion::NoStream, &[event(2)])
        .await
        .unwrap()
        .positions[0];
    later.commit().await.unwrap();

    // Delivered while the lower position is still open: no stall.
    let got = tokio::time::timeout(Duration::from_secs(5), tailer.next_batch())
        .await
        .expect("a later commit is not held back by an open lower position")
        .unwrap();
    assert_eq!(
        got.iter().map(|e| e.position).collect::<Vec<_>>(),
        vec![later_pos]
    );

    doomed.rollback().await.unwrap();
    let mut after = store.begin().await.unwrap();
    let after_pos = after
        .append("rb/after", ExpectedVersion::NoStream, &[event(3)])
        .await
        .unwrap()
        .positions[0];
    after.commit().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(10), tailer.next_batch())
        .await
        .expect("delivery goes on after a rollback")
        .unwrap();
    assert_eq!(
        got.iter().map(|e| e.position).collect::<Vec<_>>(),
        vec![after_pos]
    );
    for _ in 0..3 {
        let more = tailer.poll().await.unwrap();
        assert!(more.iter().all(|e| e.position != doomed_pos));
        assert!(more.is_empty());
    }
}

async fn terminate(store: &PgLogStore, pid: i32) {
    let killed: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
        .bind(pid)
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert!(killed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_killed_before_commit_leaves_nothing() {
    let db = TestDb::postgres().await.unwrap();
    let store = db.pg_store(8).await.unwrap();
    let mut tx = store.begin().await.unwrap();
    let pid = pid(&mut tx).await;
    tx.append("killed/a", ExpectedVersion::NoStream, &[event(1), event(2)])
        .await
        .unwrap();
    terminate(&store, pid).await;
    assert!(tx.commit().await.is_err());
    assert!(store.read_stream("killed/a").await.unwrap().is_empty());
    assert_eq!(store.head_position().await.unwrap(), 0);
    let mut tailer = Tailer::new(
        store.clone(),
        store.start_cursor(),
        TailerOptions::default(),
    );
    assert!(tailer.poll().await.unwrap().is_empty());
    // The stream was never created.
    let mut tx = store.begin().await.unwrap();
    tx.append("killed/a", ExpectedVersion::NoStream, &[event(3)])
        .await
        .unwrap();
    tx.commit().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_killed_inside_the_append_statement_leaves_nothing() {
    let db = TestDb::postgres().await.unwrap();
    let store = db.pg_store(8).await.unwrap();
    let mut setup = store.begin().await.unwrap();
    setup
        .append("killed/b", ExpectedVersion::NoStream, &[event(0)])
        .await
        .unwrap();
    setup.commit().await.unwrap();

    // Another transaction holds version 2 of the stream, uncommitted, so the append (which
    // reads version 1 and takes 2 too) blocks inside its statement on the unique key.
    let mut holder = store.begin().await.unwrap();
    holder
        .append("killed/b", ExpectedVersion::Exact(1), &[event(100)])
        .await
        .unwrap();

    let mut victim = store.begin().await.unwrap();
    let victim_pid = pid(&mut victim).await;
    let append = tokio::spawn(async move {
        let r = victim
            .append(
                "killed/b",
                ExpectedVersion::Any,
                &(1..=50).map(event).collect::<Vec<_>>(),
            )
            .await;
        (r, victim)
    });
    // Wait until the victim is really waiting on the lock inside the statement.
    wait_until_waiting_on_a_lock(&store, victim_pid).await;
    terminate(&store, victim_pid).await;
    let (result, victim) = append.await.unwrap();
    assert!(result.is_err(), "the killed append must fail");
    assert!(victim.commit().await.is_err());
    holder.rollback().await.unwrap();

    let stream = store.read_stream("killed/b").await.unwrap();
    assert_eq!(stream.len(), 1, "only the setup event is visible");
    let mut tailer = Tailer::new(
        store.clone(),
        store.start_cursor(),
        TailerOptions::default(),
    );
    assert_eq!(tailer.poll().await.unwrap().len(), 1);
}

/// The pool hands out connections without pinging them first, so a connection that died while
/// idle (here: every idle one, as after a Postgres restart) must be replaced at BEGIN, not
/// fail the next command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_run_after_every_idle_connection_was_killed() {
    use sqlx::Connection;
    let db = TestDb::postgres().await.unwrap();
    let store = db.pg_store(4).await.unwrap();
    let mut open = Vec::new();
    for _ in 0..4 {
        open.push(store.begin().await.unwrap());
    }
    let mut pids = Vec::new();
    for tx in &mut open {
        pids.push(pid(tx).await);
    }
    for tx in open {
        tx.rollback().await.unwrap();
    }
    // Connections go back to the pool in the background.
    for _ in 0..500 {
        if store.pool().num_idle() == 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        store.pool().num_idle(),
        4,
        "four idle connections in the pool"
    );

    let mut admin = sqlx::PgConnection::connect(db.url()).await.unwrap();
    for pid in &pids {
        let killed: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
            .bind(pid)
            .fetch_one(&mut admin)
            .await
            .unwrap();
        assert!(killed);
    }
    for _ in 0..500 {
        let left: i64 =
            sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)")
                .bind(&pids)
                .fetch_one(&mut admin)
                .await
                .unwrap();
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    for n in 1..=3u32 {
        let expected = match n {
            1 => ExpectedVersion::NoStream,
            _ => ExpectedVersion::Exact(u64::from(n - 1)),
        };
        let mut tx = store
            .begin()
            .await
            .unwrap_or_else(|e| panic!("begin {n} after the kill: {e}"));
        tx.append("after/kill", expected, &[event(n)])
            .await
            .unwrap();
        tx.commit().await.unwrap();
    }
    assert_eq!(store.read_stream("after/kill").await.unwrap().len(), 3);
}

/// The two-stream form of the race above: the loser of a one-statement append to a fresh node
/// stream and a contended token stream, with no second connection to read versions on, reports
/// the stream the unique key named (the token's), not the first stream of its append. Before,
/// it named the node stream, whose version it never expected wrongly (seen under load in
/// `sixty_four_two_stream_appenders_one_wins_and_losers_land_nothing`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_stream_race_lost_while_the_pool_is_exhausted_names_the_contended_stream() {
    let db = TestDb::postgres().await.unwrap();
    let winner_store = db.pg_store(2).await.unwrap();
    let store = db.pg_store(2).await.unwrap();
    let mut setup = store.begin().await.unwrap();
    setup
        .append("token/t", ExpectedVersion::NoStream, &[event(0)])
        .await
        .unwrap();
    setup.commit().await.unwrap();

    let mut winner = winner_store.begin().await.unwrap();
    winner
        .append_streams(&[
            StreamAppend {
                stream: "node/winner",
                expected: ExpectedVersion::NoStream,
                events: &[event(10)],
            },
            StreamAppend {
                stream: "token/t",
                expected: ExpectedVersion::Exact(1),
                events: &[event(1)],
            },
        ])
        .await
        .unwrap();
    let idle = store.begin().await.unwrap();
    let mut loser = store.begin().await.unwrap();
    let loser_pid = pid(&mut loser).await;
    let race = tokio::spawn(async move {
        let node = [event(20)];
        let token = [event(2)];
        let r = loser
            .append_streams(&[
                StreamAppend {
                    stream: "node/loser",
                    expected: ExpectedVersion::NoStream,
                    events: &node,
                },
                StreamAppend {
                    stream: "token/t",
                    expected: ExpectedVersion::Exact(1),
                    events: &token,
                },
            ])
            .await;
        (r, loser)
    });
    wait_until_waiting_on_a_lock(&winner_store, loser_pid).await;
    winner.commit().await.unwrap();
    let (result, loser) = tokio::time::timeout(Duration::from_secs(20), race)
        .await
        .expect("the loser must not wait for the pool's acquire timeout")
        .unwrap();
    match result {
        Err(StoreError::Conflict {
            stream,
            expected,
            actual,
        }) => {
            assert_eq!(stream, "token/t");
            assert_eq!(expected, ExpectedVersion::Exact(1));
            assert_eq!(actual, 2);
        }
        other => panic!("expected a typed conflict, got {other:?}"),
    }
    drop(loser);
    drop(idle);
    assert!(store.read_stream("node/loser").await.unwrap().is_empty());
}

/// A tail step hands out a page in transaction-id order, numerically. The page is cut by
/// `ORDER BY ... LIMIT`, and its rows selected the id as text under the column's own name, so
/// an `ORDER BY tx_id` sorted the text: where the ids between the floor and the ceiling
/// straddle a power of ten, "10", "11" came before "7", and the next page, after (11, ...),
/// skipped 7, 8 and 9 for good. (The audit sequencer's "events not in any tree" under load: the
/// server's transaction ids crossed 10 000 or 100 000 while a page of 500 was behind. Before:
/// 3 of 6 delivered, ids 10 to 12.) The snapshots are given, so the server's own ids do not
/// matter.
#[tokio::test]
async fn a_page_straddling_a_power_of_ten_of_transaction_ids_skips_nothing() {
    let db = TestDb::postgres().await.unwrap();
    let store = db.pg_store(4).await.unwrap();
    let mut rewrites = Vec::new();
    for n in 0..6u32 {
        let mut tx = store.begin().await.unwrap();
        let position = tx
            .append(
                &format!("digits/{n}"),
                ExpectedVersion::NoStream,
                &[event(n)],
            )
            .await
            .unwrap()
            .positions[0];
        tx.commit().await.unwrap();
        rewrites.push((position, 7 + u64::from(n)));
    }
    events::store::testkit_tamper::rewrite_tx_ids(db.url(), &rewrites)
        .await
        .unwrap();

    // Everything from 1 on committed between the two snapshots; two events a page.
    let mut cursor = events::store::TailCursor::Postgres {
        floor: "1:1:".to_string(),
        ceiling: Some("100:100:".to_string()),
        after: (0, 0),
    };
    let mut delivered = Vec::new();
    for _ in 0..10 {
        let (page, next) = store.tail_step(&cursor, 2).await.unwrap();
        delivered.extend(page.iter().map(|e| (e.tx_id.unwrap(), e.position)));
        cursor = next;
        if matches!(
            cursor,
            events::store::TailCursor::Postgres { ceiling: None, .. }
        ) {
            break;
        }
    }
    let expected: Vec<(u64, i64)> = rewrites.iter().map(|&(p, tx)| (tx, p)).collect();
    assert_eq!(delivered, expected, "in transaction-id order, every one");
}
