//! The log hub (one tailer per process) and the commit notifications that wake it across
//! processes: what a subscriber receives, what waiting costs the database, and what a lost
//! listener connection costs.

use std::time::{Duration, Instant};

use events::store::hub::{HubOptions, HubRecv};
use events::store::testkit::TestDb;
use events::store::{EventStore, ExpectedVersion, HubReceiver, LogHub, LogStore};
use events::NewEvent;

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

/// A hub that never polls: on Postgres only notifications (or this store's commits) wake it.
fn never_polls(store: &EventStore) -> HubOptions {
    HubOptions {
        safety_poll: Duration::from_secs(3600),
        ..HubOptions::for_backend(store.backend())
    }
}

async fn next_positions(sub: &mut HubReceiver, within: Duration) -> Vec<i64> {
    match tokio::time::timeout(within, sub.recv()).await {
        Ok(Some(HubRecv::Events(batch))) => batch.iter().map(|e| e.position).collect(),
        Ok(other) => panic!("expected events, got {other:?}"),
        Err(_) => panic!("nothing handed out within {within:?}"),
    }
}

async fn wait_listening(store: &EventStore) {
    let Some(pg) = store.as_postgres() else {
        return;
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !pg.wake().is_listening() {
        assert!(
            Instant::now() < deadline,
            "the commit listener never listened"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Every subscriber gets every commit of another store (another process, on Postgres: another
/// pool and listener), once, in order; a subscriber made later gets only what follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_subscriber_gets_each_commit_of_another_store_once() {
    for db in TestDb::each().await.unwrap() {
        let writer = db.store().await.unwrap();
        let reader = EventStore::connect(db.url()).await.unwrap();
        let hub = LogHub::start(reader.clone(), HubOptions::for_backend(reader.backend()))
            .await
            .unwrap();
        wait_listening(&reader).await;
        let mut a = hub.subscribe();
        let mut b = hub.subscribe();
        let first = writer
            .append("hub/a", ExpectedVersion::NoStream, &[event(1), event(2)])
            .await
            .unwrap()
            .positions;
        assert_eq!(next_positions(&mut a, Duration::from_secs(5)).await, first);
        assert_eq!(next_positions(&mut b, Duration::from_secs(5)).await, first);
        let mut c = hub.subscribe();
        let second = writer
            .append("hub/b", ExpectedVersion::NoStream, &[event(3)])
            .await
            .unwrap()
            .positions;
        for sub in [&mut a, &mut b, &mut c] {
            assert_eq!(next_positions(sub, Duration::from_secs(5)).await, second);
            assert!(sub.is_drained(), "delivered twice");
        }
        assert!(hub.state().caught_up_at.is_some());
    }
}

/// Waits until `what` holds, for at most five seconds.
async fn eventually(what: &str, mut holds: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !holds() {
        assert!(Instant::now() < deadline, "{what} never happened");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A commit wakes the readers of its own store once: the notification it sends comes back to
/// its own listener marked as its own and wakes nobody again (it used to wake every reader of
/// the process a second time, a second tail step per commit). Another store's notification
/// wakes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_wakes_its_own_store_once_and_another_store_through_its_notification() {
    let db = TestDb::postgres().await.unwrap();
    let store = db.store().await.unwrap();
    let other = EventStore::connect(db.url()).await.unwrap();
    let signal = store.commit_signal();
    wait_listening(&store).await;
    // The listener bumps the signal once just after its LISTEN is in place.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let pg = store.as_postgres().expect("postgres");
    let (_, received_before) = pg.wake().counts();
    let before = *signal.borrow();

    store
        .append("wake/own", ExpectedVersion::NoStream, &[event(1)])
        .await
        .unwrap();
    eventually("our own notification's return", || {
        pg.wake().received_own() == 1
    })
    .await;
    assert_eq!(*signal.borrow() - before, 1, "wakes for one own commit");
    assert_eq!(pg.wake().counts().1 - received_before, 1);

    other
        .append("wake/other", ExpectedVersion::NoStream, &[event(2)])
        .await
        .unwrap();
    eventually("the other store's notification", || {
        pg.wake().counts().1 - received_before == 2
    })
    .await;
    assert_eq!(
        *signal.borrow() - before,
        2,
        "wakes after the other store's commit"
    );
    assert_eq!(pg.wake().received_own(), 1);
}

/// Transactions of one database over `window`, read from another database's connection.
async fn xacts(db: &TestDb) -> i64 {
    let admin = events::store::testkit::server_url();
    let name = db
        .url()
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .split('?')
        .next()
        .unwrap_or_default()
        .to_string();
    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&admin)
        .await
        .unwrap();
    sqlx::query("SELECT pg_stat_clear_snapshot()")
        .execute(&mut conn)
        .await
        .unwrap();
    sqlx::query_scalar::<_, i64>(
        "SELECT (xact_commit + xact_rollback)::bigint FROM pg_stat_database WHERE datname = $1",
    )
    .bind(name)
    .fetch_one(&mut conn)
    .await
    .unwrap()
}

/// A waiting hub on Postgres costs the database nothing between its safety polls (none over
/// three seconds), and still knows it is caught up: its caught-up moment keeps moving while it
/// waits, from the listener's state alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_hub_costs_no_transaction_and_stays_caught_up() {
    let db = TestDb::postgres().await.unwrap();
    let store = db.store().await.unwrap();
    let hub = LogHub::start(store.clone(), never_polls(&store))
        .await
        .unwrap();
    wait_listening(&store).await;
    let _sub = hub.subscribe();
    // Backends report their counts within a second of going idle: let the start's settle.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = xacts(&db).await;
    let seen = hub.state().caught_up_at.expect("caught up");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = xacts(&db).await;
    assert_eq!(after - before, 0, "transactions while idle");
    let now = hub.state().caught_up_at.expect("caught up");
    assert!(now > seen + Duration::from_secs(2), "{:?}", now - seen);
}

/// The listener's connection killed: a commit made while it is away is still handed out (the
/// reconnect wakes the hub), long before the hour-long safety poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_made_while_the_listener_is_away_is_delivered_after_it_reconnects() {
    let db = TestDb::postgres().await.unwrap();
    let writer = db.store().await.unwrap();
    let reader = EventStore::connect(db.url()).await.unwrap();
    let hub = LogHub::start(reader.clone(), never_polls(&reader))
        .await
        .unwrap();
    wait_listening(&reader).await;
    let mut sub = hub.subscribe();
    let Some(pg) = writer.as_postgres() else {
        unreachable!()
    };
    // Kill every listener of this database, then commit before it can be back.
    let killed: i64 = sqlx::query_scalar(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
         WHERE datname = current_database() AND application_name = 'bc-events-listen'",
    )
    .fetch_one(pg.pool())
    .await
    .unwrap();
    assert!(killed >= 1, "no listener found");
    let positions = writer
        .append("hub/lost", ExpectedVersion::NoStream, &[event(7)])
        .await
        .unwrap()
        .positions;
    assert_eq!(
        next_positions(&mut sub, Duration::from_secs(15)).await,
        positions
    );
}
