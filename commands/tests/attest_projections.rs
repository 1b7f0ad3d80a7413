//! The `pools` and `join_requests` projections and their reads, on Postgres and SQLite: rows
//! as the events leave them whether the events come one transaction each or folded in one run,
//! the reads the join's admission step makes, and a rebuild from the log giving the same tables.

use commands::attest::{read, rows};
use domain::attest::{JoinRequestStatus, PoolState};
use domain::identity::IdentityEvent;
use events::schema::{
    JoinRequestApproved, JoinRequestConsumed, JoinRequestCreated, JoinRequestExpired,
    JoinRequestRejected, PoolCreated, PoolUpdated,
};
use events::store::testkit::TestDb;
use events::store::{EventStore, ExpectedVersion, LogStore, LogTx, StreamAppend};
use events::{new_event_id, NewEvent};
use projections::identity;

const T0: i64 = 1_800_000_000_000_000;

/// Appends `events` (each stream at `Any`) in one transaction at time `at`, applying every
/// identity projection.
pub async fn append(store: &EventStore, at: i64, events: Vec<IdentityEvent>) {
    let mut streams: Vec<(String, Vec<NewEvent>)> = Vec::new();
    for e in &events {
        let s = e.stream();
        let new = e.to_new_event(new_event_id(), "acme", at);
        match streams.iter_mut().find(|(n, _)| *n == s) {
            Some((_, list)) => list.push(new),
            None => streams.push((s, vec![new])),
        }
    }
    let appends: Vec<StreamAppend<'_>> = streams
        .iter()
        .map(|(stream, events)| StreamAppend {
            stream,
            expected: ExpectedVersion::Any,
            events,
        })
        .collect();
    let mut tx = store.begin().await.unwrap();
    commands::append_streams_and_project(&mut tx, &identity::all(), &appends)
        .await
        .unwrap();
    tx.commit().await.unwrap();
}

fn pool_created(id: &str, ids: &[&str]) -> IdentityEvent {
    IdentityEvent::PoolCreated(PoolCreated {
        pool_id: id.into(),
        tenant_id: "acme".into(),
        description: format!("pool {id}"),
        join_attestors: ids.iter().map(|s| s.to_string()).collect(),
    })
}

fn pool_updated(id: &str, text: &str, ids: &[&str]) -> IdentityEvent {
    IdentityEvent::PoolUpdated(PoolUpdated {
        pool_id: id.into(),
        description: text.into(),
        join_attestors: ids.iter().map(|s| s.to_string()).collect(),
    })
}

pub fn request_created(id: &str, subject: u8, at: i64) -> IdentityEvent {
    IdentityEvent::JoinRequestCreated(JoinRequestCreated {
        request_id: id.into(),
        tenant_id: "acme".into(),
        attestor: "join-token".into(),
        subject: vec![subject; 32],
        csr_sha256: vec![subject; 32],
        role: "node".into(),
        site_id: "site-1".into(),
        pool_id: "edge".into(),
        token_id: "tok_1".into(),
        summary: format!("request {id}"),
        expires_at_us: at + 1_000,
        ..Default::default()
    })
}

pub fn approved(id: &str) -> IdentityEvent {
    IdentityEvent::JoinRequestApproved(JoinRequestApproved {
        request_id: id.into(),
        actor: "alice".into(),
        reason: "known box".into(),
    })
}

fn rejected(id: &str) -> IdentityEvent {
    IdentityEvent::JoinRequestRejected(JoinRequestRejected {
        request_id: id.into(),
        actor: "bob".into(),
        reason: String::new(),
    })
}

pub fn consumed(id: &str) -> IdentityEvent {
    IdentityEvent::JoinRequestConsumed(JoinRequestConsumed {
        request_id: id.into(),
        node_id: "node_1".into(),
    })
}

fn expired(id: &str) -> IdentityEvent {
    IdentityEvent::JoinRequestExpired(JoinRequestExpired {
        request_id: id.into(),
    })
}

/// The history both ways of appending write: (time, events of one transaction).
fn history() -> Vec<(i64, Vec<IdentityEvent>)> {
    vec![
        (T0, vec![pool_created("edge", &["x509pop", "join-token"])]),
        (T0 + 1, vec![pool_created("any", &[])]),
        (T0 + 2, vec![pool_updated("edge", "racks", &["x509pop"])]),
        (
            T0 + 3,
            vec![pool_updated("any", "now strict", &["provisioned"])],
        ),
        (T0 + 4, vec![request_created("jr_a", 1, T0 + 4)]),
        (T0 + 5, vec![request_created("jr_b", 2, T0 + 5)]),
        (T0 + 6, vec![request_created("jr_c", 3, T0 + 6)]),
        (T0 + 7, vec![request_created("jr_d", 1, T0 + 7)]),
        (T0 + 8, vec![approved("jr_a")]),
        (T0 + 9, vec![consumed("jr_a")]),
        (T0 + 10, vec![rejected("jr_b")]),
        (T0 + 11, vec![expired("jr_c")]),
    ]
}

async fn check_rows(store: &EventStore) {
    let mut tx = store.begin().await.unwrap();
    let edge = read::pool(&mut tx, "edge").await.unwrap().expect("edge");
    assert_eq!(
        rows::pool_state(&edge),
        PoolState {
            pool_id: "edge".into(),
            tenant_id: "acme".into(),
            description: "racks".into(),
            join_attestors: Some(vec!["x509pop".into()]),
        }
    );
    assert_eq!(
        (edge.version, edge.created_at_us, edge.updated_at_us),
        (2, T0, T0 + 2)
    );
    let any = read::pool(&mut tx, "any").await.unwrap().expect("any");
    assert_eq!(any.join_attestors.as_deref(), Some("provisioned"));
    assert!(read::pool(&mut tx, "nope").await.unwrap().is_none());
    let all: Vec<String> = read::pools(&mut tx, Some("acme"))
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.pool_id)
        .collect();
    assert_eq!(all, ["any", "edge"]);
    assert!(read::pools(&mut tx, Some("other"))
        .await
        .unwrap()
        .is_empty());

    let a = read::join_request(&mut tx, "jr_a")
        .await
        .unwrap()
        .expect("a");
    assert_eq!(a.status, "consumed");
    assert_eq!(a.decided_by.as_deref(), Some("alice"));
    assert_eq!(a.decision_reason.as_deref(), Some("known box"));
    assert_eq!(a.joined_node_id.as_deref(), Some("node_1"));
    assert_eq!((a.version, a.updated_at_us), (3, T0 + 9));
    assert_eq!(a.token_id.as_deref(), Some("tok_1"));
    assert_eq!(a.node_id, None);
    let s = rows::join_request_state(&a).unwrap();
    assert_eq!(
        (s.status, s.version, s.subject),
        (JoinRequestStatus::Consumed, 3, [1; 32])
    );
    let b = read::join_request(&mut tx, "jr_b")
        .await
        .unwrap()
        .expect("b");
    assert_eq!(
        (
            b.status.as_str(),
            b.decided_by.as_deref(),
            b.decision_reason
        ),
        ("rejected", Some("bob"), None)
    );
    // The newest request of a subject is the retry's.
    let latest = read::latest_join_request(&mut tx, "join-token", &[1; 32])
        .await
        .unwrap()
        .expect("latest");
    assert_eq!(latest.request_id, "jr_d");
    assert!(read::latest_join_request(&mut tx, "x509pop", &[1; 32])
        .await
        .unwrap()
        .is_none());
    let pending: Vec<String> = read::join_requests(&mut tx, None, Some("pending"))
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.request_id)
        .collect();
    assert_eq!(pending, ["jr_d"]);
    let every = read::join_requests(&mut tx, Some("acme"), None)
        .await
        .unwrap();
    assert_eq!(every.len(), 4);
    // jr_d expires at T0 + 1007: not before, then it is the one to expire.
    assert!(read::expired_join_requests(&mut tx, T0 + 1_006, 10)
        .await
        .unwrap()
        .is_empty());
    let due = read::expired_join_requests(&mut tx, T0 + 1_007, 10)
        .await
        .unwrap();
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].request_id, "jr_d");
    tx.rollback().await.unwrap();
    let outside = read::join_requests_in_store(store, None, Some("expired"))
        .await
        .unwrap();
    assert_eq!(outside.len(), 1);
    assert_eq!(read::pools_in_store(store, None).await.unwrap().len(), 2);
}

async fn digest(store: &EventStore) -> String {
    let tables = identity::tables();
    projections::digest_tables(store, &tables).await.unwrap()
}

#[tokio::test]
async fn rows_follow_the_events_one_transaction_each_or_in_one_run_and_rebuild_the_same() {
    for db in TestDb::each().await.unwrap() {
        let store = db.store().await.unwrap();
        for (at, events) in history() {
            append(&store, at, events).await;
        }
        check_rows(&store).await;
        let inline = digest(&store).await;
        projections::rebuild(&store, &identity::all(), None, 1000, |_| {})
            .await
            .unwrap();
        assert_eq!(inline, digest(&store).await);
        // A rebuild in runs of 3 folds creations and later changes across run boundaries.
        projections::rebuild(&store, &identity::all(), None, 3, |_| {})
            .await
            .unwrap();
        assert_eq!(inline, digest(&store).await);
        check_rows(&store).await;
    }
}

#[tokio::test]
async fn an_update_of_a_request_no_event_created_is_inapplicable() {
    for db in TestDb::each().await.unwrap() {
        let store = db.store().await.unwrap();
        let e = approved("jr_ghost");
        let new = e.to_new_event(new_event_id(), "acme", T0);
        let mut tx = store.begin().await.unwrap();
        let err = commands::append_and_project(
            &mut tx,
            &identity::all(),
            &e.stream(),
            ExpectedVersion::Any,
            &[new],
        )
        .await
        .expect_err("inapplicable");
        assert!(
            err.to_string().contains("without a join_request.created"),
            "{err}"
        );
    }
}
