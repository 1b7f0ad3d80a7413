//! Every event records who caused it: a store opened with `EventStore::acting_as` stamps its
//! actor on every event it appends (one event, several, several streams at once, a retry), the
//! plain store stamps none, and every read path (a stream, a batch, a pass over everything, the
//! tailer) gives the actor back. On both backends.

use events::store::testkit::TestDb;
use events::store::{EventStore, ExpectedVersion, LogStore, LogTx, StreamAppend, TailerOptions};
use events::{Actor, NewEvent, RecordedEvent};

fn event(n: u32) -> NewEvent {
    NewEvent::from_bytes(
        *uuid::Uuid::new_v4().as_bytes(),
        "test.happened",
        1,
        "t1",
        1_700_000_000_000_000 + i64::from(n),
        format!("payload-{n}").into_bytes(),
    )
}

fn events(count: u32) -> Vec<NewEvent> {
    (0..count).map(event).collect()
}

fn alice() -> Actor {
    Actor::new("spiffe://td.example/operator/alice", "operator").unwrap()
}

fn bob() -> Actor {
    Actor::new("local:bob@host-1", "admin").unwrap()
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
    acting_as_stamps_single_and_batch_appends,
    append_streams_stamps_every_stream,
    a_retry_through_an_acting_store_keeps_the_first_append,
    the_tailer_and_read_all_deliver_the_actor,
    a_row_with_half_an_actor_reads_as_corrupt,
);

fn actors(events: &[RecordedEvent]) -> Vec<Option<&str>> {
    events
        .iter()
        .map(|e| e.actor.as_ref().map(Actor::id))
        .collect()
}

async fn acting_as_stamps_single_and_batch_appends(db: &TestDb) {
    let plain = db.store().await.unwrap();
    let as_alice = plain.acting_as(alice());
    assert_eq!(plain.actor(), None, "the plain store stamps no actor");
    assert_eq!(as_alice.actor(), Some(&alice()));

    let one = event(0);
    let a = as_alice
        .append(
            "node/a",
            ExpectedVersion::NoStream,
            std::slice::from_ref(&one),
        )
        .await
        .unwrap();
    assert_eq!(a.actor, Some(alice()));
    let b = plain
        .append("node/a", ExpectedVersion::Exact(1), &events(2))
        .await
        .unwrap();
    assert_eq!(b.actor, None);
    let batch = events(3);
    let c = as_alice
        .acting_as(bob())
        .append("node/a", ExpectedVersion::Exact(3), &batch)
        .await
        .unwrap();
    assert_eq!(
        c.actor,
        Some(bob()),
        "acting as another actor replaces the first"
    );
    as_alice
        .append("node/a", ExpectedVersion::Any, &events(1))
        .await
        .unwrap();

    // Read back by the plain store: the actor is in the log, not in the store that reads.
    let stored = plain.read_stream("node/a").await.unwrap();
    let alice_id = Some("spiffe://td.example/operator/alice");
    let bob_id = Some("local:bob@host-1");
    assert_eq!(
        actors(&stored),
        vec![alice_id, None, None, bob_id, bob_id, bob_id, alice_id]
    );
    assert_eq!(stored[0].actor, Some(alice()));
    assert_eq!(stored[0].actor.as_ref().map(Actor::role), Some("operator"));
    assert_eq!(stored[3].actor.as_ref().map(Actor::role), Some("admin"));

    // What the command layer hands its inline projections matches what is stored.
    let mut tail: Vec<RecordedEvent> = stored[3..6].to_vec();
    for e in &mut tail {
        e.tx_id = None;
    }
    assert_eq!(c.recorded("node/a", &batch), tail);
    assert_eq!(
        plain.read_batch(0, 100).await.unwrap().len(),
        7,
        "read_batch sees every event"
    );
    assert_eq!(
        actors(&plain.read_batch(0, 100).await.unwrap()),
        actors(&stored)
    );
}

async fn append_streams_stamps_every_stream(db: &TestDb) {
    let plain = db.store().await.unwrap();
    let store = plain.acting_as(alice());
    // Both streams expect a version: one statement on Postgres.
    let (node, token) = (events(2), events(1));
    let mut tx = store.begin().await.unwrap();
    let done = tx
        .append_streams(&[
            StreamAppend {
                stream: "node/n",
                expected: ExpectedVersion::NoStream,
                events: &node,
            },
            StreamAppend {
                stream: "token/t",
                expected: ExpectedVersion::NoStream,
                events: &token,
            },
        ])
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert!(done.iter().all(|d| d.actor == Some(alice())));
    // One stream expects Any: appended one after the other.
    let (more, tenant) = (events(1), events(2));
    let mut tx = store.acting_as(bob()).begin().await.unwrap();
    tx.append_streams(&[
        StreamAppend {
            stream: "node/n",
            expected: ExpectedVersion::Exact(2),
            events: &more,
        },
        StreamAppend {
            stream: "tenant/t1",
            expected: ExpectedVersion::Any,
            events: &tenant,
        },
    ])
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let alice_id = Some("spiffe://td.example/operator/alice");
    let bob_id = Some("local:bob@host-1");
    assert_eq!(
        actors(&plain.read_stream("node/n").await.unwrap()),
        vec![alice_id, alice_id, bob_id]
    );
    assert_eq!(
        actors(&plain.read_stream("token/t").await.unwrap()),
        vec![alice_id]
    );
    assert_eq!(
        actors(&plain.read_stream("tenant/t1").await.unwrap()),
        vec![bob_id, bob_id]
    );
    // The plain store's multi-stream append stamps nothing.
    let other = events(1);
    let mut tx = plain.begin().await.unwrap();
    tx.append_streams(&[
        StreamAppend {
            stream: "node/m",
            expected: ExpectedVersion::NoStream,
            events: &other,
        },
        StreamAppend {
            stream: "token/u",
            expected: ExpectedVersion::NoStream,
            events: &events(1),
        },
    ])
    .await
    .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(
        actors(&plain.read_stream("node/m").await.unwrap()),
        vec![None]
    );
}

async fn a_retry_through_an_acting_store_keeps_the_first_append(db: &TestDb) {
    let plain = db.store().await.unwrap();
    let batch = events(2);
    plain
        .acting_as(alice())
        .append("node/r", ExpectedVersion::NoStream, &batch)
        .await
        .unwrap();
    let again = plain
        .acting_as(bob())
        .append("node/r", ExpectedVersion::NoStream, &batch)
        .await
        .unwrap();
    assert!(again.already_appended);
    let stored = plain.read_stream("node/r").await.unwrap();
    assert_eq!(stored.len(), 2);
    assert!(
        stored.iter().all(|e| e.actor == Some(alice())),
        "a retry writes nothing, so the first actor stays"
    );
}

async fn the_tailer_and_read_all_deliver_the_actor(db: &TestDb) {
    let plain = db.store().await.unwrap();
    let options = TailerOptions {
        batch: 2,
        poll_interval: std::time::Duration::from_millis(5),
    };
    let mut tailer = plain.tailer(plain.start_cursor(), options);
    plain
        .acting_as(alice())
        .append("n/1", ExpectedVersion::NoStream, &events(3))
        .await
        .unwrap();
    plain
        .append("n/2", ExpectedVersion::NoStream, &events(1))
        .await
        .unwrap();
    let mut seen = Vec::new();
    while seen.len() < 4 {
        let batch = tokio::time::timeout(std::time::Duration::from_secs(10), tailer.next_batch())
            .await
            .expect("tailer delivered in time")
            .unwrap();
        seen.extend(batch);
    }
    let alice_id = Some("spiffe://td.example/operator/alice");
    assert_eq!(actors(&seen), vec![alice_id, alice_id, alice_id, None]);

    let mut all = plain.read_all(0, 3);
    let mut read = Vec::new();
    while let Some(batch) = all.next_batch().await.unwrap() {
        read.extend(batch);
    }
    assert_eq!(actors(&read), vec![alice_id, alice_id, alice_id, None]);
}

/// Sets one half of the actor on the event at `position`, behind the log's back.
async fn half_an_actor(db: &TestDb, store: &EventStore, position: i64) {
    let sql = format!("UPDATE events SET actor_id = 'x' WHERE position = {position}");
    match store {
        EventStore::Postgres(s) => {
            let mut c = s.pool().acquire().await.unwrap();
            sqlx::query("ALTER TABLE events DISABLE TRIGGER events_append_only")
                .execute(&mut *c)
                .await
                .unwrap();
            sqlx::query(&sql).execute(&mut *c).await.unwrap();
        }
        EventStore::Sqlite(_) => {
            use sqlx::Connection;
            let mut c = sqlx::SqliteConnection::connect(db.url()).await.unwrap();
            sqlx::query("DROP TRIGGER events_no_update")
                .execute(&mut c)
                .await
                .unwrap();
            // SQLite's CHECK refuses it first; the read check is for what gets past it.
            let refused = sqlx::query(&sql).execute(&mut c).await.unwrap_err();
            assert!(
                refused.to_string().contains("CHECK constraint failed"),
                "{refused}"
            );
            sqlx::query("PRAGMA ignore_check_constraints = ON")
                .execute(&mut c)
                .await
                .unwrap();
            sqlx::query(&sql).execute(&mut c).await.unwrap();
        }
    }
}

async fn a_row_with_half_an_actor_reads_as_corrupt(db: &TestDb) {
    let store = db.store().await.unwrap();
    let a = store
        .append("n/1", ExpectedVersion::NoStream, &events(1))
        .await
        .unwrap();
    half_an_actor(db, &store, a.positions[0]).await;
    let err = store.read_stream("n/1").await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "stored event at position {} is malformed: actor_id is set without actor_role",
            a.positions[0]
        )
    );
}
