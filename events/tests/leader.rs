//! The leader lock ([`events::store::leader`]) against a real Postgres: two contenders, one
//! leads; the leader's backend terminated, or the leader dropped, and the other takes over
//! (the takeover times are printed); what an idle leader and follower cost the database; and
//! SQLite, where the one process always leads.

use std::time::{Duration, Instant};

use events::store::leader::{leader_application_name, terminate_leader};
use events::store::testkit::{server_url, TestDb};
use events::store::{EventStore, LeaderError, LeaderLock, Leading};
use sqlx::Connection;

/// How long a takeover may take before the test calls it broken: far above what it takes (the
/// printed figures), far below "never".
const TAKEOVER_BOUND: Duration = Duration::from_secs(15);

/// The backends of `task`'s lock on the store's database: (granted, waiting).
async fn lock_holders(store: &EventStore, task: &str) -> (i64, i64) {
    let EventStore::Postgres(s) = store else {
        panic!("a Postgres store");
    };
    sqlx::query_as(
        "SELECT count(*) FILTER (WHERE l.granted), count(*) FILTER (WHERE NOT l.granted) \
         FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
         WHERE l.locktype = 'advisory' AND a.application_name = $1 \
         AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
    )
    .bind(leader_application_name(task))
    .fetch_one(s.pool())
    .await
    .expect("pg_locks")
}

/// Waits (up to 5 s) until the follower's backend waits on the lock.
async fn until_waiting(store: &EventStore, task: &str) {
    for _ in 0..500 {
        if lock_holders(store, task).await.1 == 1 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no follower waits for the lock of {task}");
}

async fn acquire(lock: &LeaderLock) -> Leading {
    tokio::time::timeout(Duration::from_secs(10), lock.acquire())
        .await
        .expect("the first contender leads at once")
        .expect("acquire")
}

#[tokio::test]
async fn two_contenders_one_leads_and_the_other_takes_over_when_its_backend_is_terminated() {
    let db = TestDb::postgres().await.expect("db");
    let store = db.store().await.expect("store");
    let task = "test-terminated";
    let first = LeaderLock::new(&store, task).expect("lock");
    let second = LeaderLock::new(&store, task).expect("lock");
    let mut leading = acquire(&first).await;
    let waiting = tokio::spawn(async move { second.acquire().await });
    until_waiting(&store, task).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiting.is_finished(), "the second contender must wait");
    assert_eq!(lock_holders(&store, task).await, (1, 1));

    let pid = terminate_leader(&store, task).await.expect("terminate");
    assert!(pid.is_some(), "the leader's backend is found by its lock");
    let ended = Instant::now();
    let taken = tokio::time::timeout(TAKEOVER_BOUND, waiting)
        .await
        .expect("the follower takes over within the bound")
        .expect("join")
        .expect("acquire");
    let takeover = ended.elapsed();
    let lost = tokio::time::timeout(TAKEOVER_BOUND, leading.lost())
        .await
        .expect("the old leader learns it lost within the bound");
    let noticed = ended.elapsed();
    println!(
        "leader backend terminated: follower took over in {} ms, old leader noticed in {} ms",
        takeover.as_millis(),
        noticed.as_millis()
    );
    assert!(
        matches!(&lost, LeaderError::Lost { task: t, .. } if t == task),
        "{lost}"
    );
    assert_eq!(taken.task(), task);
    assert_eq!(lock_holders(&store, task).await, (1, 0));
}

#[tokio::test]
async fn a_leader_dropped_or_released_hands_over_at_once() {
    let db = TestDb::postgres().await.expect("db");
    let store = db.store().await.expect("store");
    let task = "test-dropped";
    let locks: Vec<LeaderLock> = (0..3)
        .map(|_| LeaderLock::new(&store, task).expect("lock"))
        .collect();
    let leading = acquire(&locks[0]).await;
    let mut waiting: Vec<_> = locks[1..]
        .iter()
        .cloned()
        .map(|l| tokio::spawn(async move { l.acquire().await }))
        .collect();
    for _ in 0..500 {
        if lock_holders(&store, task).await == (1, 2) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(lock_holders(&store, task).await, (1, 2));

    // Dropped (the process died: its socket closes): one of the two followers takes over.
    drop(leading);
    let dropped = Instant::now();
    let (taken, _, rest) = tokio::time::timeout(
        TAKEOVER_BOUND,
        futures::future::select_all(waiting.drain(..)),
    )
    .await
    .expect("a follower takes over within the bound");
    let next = taken.expect("join").expect("acquire");
    println!(
        "leader dropped: taken over in {} ms",
        dropped.elapsed().as_millis()
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        lock_holders(&store, task).await,
        (1, 1),
        "one leads, one waits"
    );

    // Released: the last follower takes over.
    next.release().await;
    let released = Instant::now();
    let mut rest = rest;
    let last = tokio::time::timeout(TAKEOVER_BOUND, rest.remove(0))
        .await
        .expect("bound")
        .expect("join")
        .expect("acquire");
    println!(
        "leader released: taken over in {} ms",
        released.elapsed().as_millis()
    );
    assert_eq!(lock_holders(&store, task).await, (1, 0));
    drop(last);
}

#[tokio::test]
async fn tasks_do_not_contend_with_each_other() {
    let db = TestDb::postgres().await.expect("db");
    let store = db.store().await.expect("store");
    let a = acquire(&LeaderLock::new(&store, "audit-sequencer").expect("lock")).await;
    let b = acquire(&LeaderLock::new(&store, "maintenance").expect("lock")).await;
    let c = acquire(&LeaderLock::new(&store, "batch-expiry").expect("lock")).await;
    assert_eq!(lock_holders(&store, "maintenance").await, (1, 0));
    drop((a, b, c));
}

/// `xact_commit + xact_rollback` of database `name`, read from another database (so that the
/// reading itself is not counted).
async fn transactions(admin: &mut sqlx::PgConnection, name: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT (xact_commit + xact_rollback)::bigint FROM pg_stat_database WHERE datname = $1",
    )
    .bind(name)
    .fetch_one(admin)
    .await
    .expect("pg_stat_database")
}

/// The client sessions on database `name`. Only clients: an autovacuum worker visiting the
/// database shows in `pg_stat_activity` too, and is not one of ours.
/// The backends on database `name`: (client sessions, others). Only the clients are ours: an
/// autovacuum worker visiting the database shows in `pg_stat_activity` too.
async fn backends(admin: &mut sqlx::PgConnection, name: &str) -> (i64, i64) {
    sqlx::query_as(
        "SELECT count(*) FILTER (WHERE backend_type = 'client backend'), \
         count(*) FILTER (WHERE backend_type <> 'client backend') \
         FROM pg_stat_activity WHERE datname = $1",
    )
    .bind(name)
    .fetch_one(admin)
    .await
    .expect("pg_stat_activity")
}

#[tokio::test]
async fn an_idle_leader_and_follower_cost_the_database_almost_nothing() {
    let db = TestDb::postgres().await.expect("db");
    let store = db.store().await.expect("store");
    let EventStore::Postgres(pg) = &store else {
        panic!("a Postgres store");
    };
    let name: String = sqlx::query_scalar("SELECT current_database()::text")
        .fetch_one(pg.pool())
        .await
        .expect("name");
    let task = "test-idle";
    let leader = LeaderLock::new(&store, task).expect("lock");
    let follower = LeaderLock::new(&store, task).expect("lock");
    // Autovacuum off on the database's tables: a worker analysing the tables the migrations
    // filled would count its transactions in the window, on a busy host where it comes late.
    sqlx::query(
        "DO $$ DECLARE t record; BEGIN \
         FOR t IN SELECT schemaname, tablename FROM pg_tables \
         WHERE schemaname NOT IN ('pg_catalog', 'information_schema') LOOP \
         EXECUTE format('ALTER TABLE %I.%I SET (autovacuum_enabled = false)', \
         t.schemaname, t.tablename); END LOOP; END $$",
    )
    .execute(pg.pool())
    .await
    .expect("autovacuum off");
    // Nothing else on the database from here on: the store's own connections end.
    pg.pool().close().await;
    let mut admin = sqlx::PgConnection::connect(&server_url())
        .await
        .expect("admin");
    let leading = acquire(&leader).await;
    let waiting = tokio::spawn(async move { follower.acquire().await });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // A worker that was already at work when autovacuum was turned off finishes first.
    for _ in 0..600 {
        if backends(&mut admin, &name).await.1 == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let before = transactions(&mut admin, &name).await;
    let window = Duration::from_secs(5);
    tokio::time::sleep(window).await;
    assert!(!waiting.is_finished(), "the follower still waits");
    // Both end, so that every count they hold is flushed (a backend reports at exit).
    waiting.abort();
    drop(leading);
    for _ in 0..200 {
        if backends(&mut admin, &name).await.0 == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        backends(&mut admin, &name).await.0,
        0,
        "both sessions ended"
    );
    let spent = transactions(&mut admin, &name).await - before;
    println!(
        "one leader and one follower idle for {} s: {spent} transactions on their database",
        window.as_secs()
    );
    assert!(spent < 10, "{spent} transactions in {} s", window.as_secs());
}

#[tokio::test]
async fn on_sqlite_the_one_process_always_leads() {
    let db = TestDb::sqlite().expect("db");
    let store = db.store().await.expect("store");
    let lock = LeaderLock::new(&store, "audit-sequencer").expect("lock");
    let mut first = acquire(&lock).await;
    let second = acquire(&lock).await;
    assert_eq!(second.task(), "audit-sequencer");
    let never = tokio::time::timeout(Duration::from_millis(200), first.lost()).await;
    assert!(never.is_err(), "a SQLite leader never loses leadership");
}

#[tokio::test]
async fn task_names_are_checked() {
    let db = TestDb::sqlite().expect("db");
    let store = db.store().await.expect("store");
    let long = "a".repeat(49);
    for bad in ["", "Audit", "audit sequencer", "audit/seq", long.as_str()] {
        let err = LeaderLock::new(&store, bad).expect_err(bad);
        assert!(matches!(err, LeaderError::BadTaskName { ref task } if task == bad));
        assert_eq!(
            err.to_string(),
            format!("leader task name {bad:?} is not allowed: use 1 to 48 of a-z, 0-9 and '-'")
        );
    }
    assert!(LeaderLock::new(&store, &"a".repeat(48)).is_ok());
}
