//! [`commands::leadership::run_while_leading`] with two "replicas" on one Postgres database: only
//! the leader runs the work; when its backend is terminated the other one starts it and the old
//! one stops it (the times are printed); a stop ends both and reports the loss. On SQLite the
//! one process leads at once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use commands::leadership::{run_while_leading, Change};
use events::store::leader::terminate_leader;
use events::store::testkit::TestDb;
use events::store::{EventStore, LeaderLock};
use tokio::sync::watch;

/// How long a takeover may take before the test calls it broken (the printed figures are what
/// it takes).
const BOUND: Duration = Duration::from_secs(15);

/// One replica: whether its work runs, and the changes it reported.
struct Replica {
    running: Arc<AtomicBool>,
    changes: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

fn replica(store: &EventStore, task: &str, shutdown: watch::Receiver<bool>) -> Replica {
    let lock = LeaderLock::new(store, task).expect("lock");
    let running = Arc::new(AtomicBool::new(false));
    let changes = Arc::new(Mutex::new(Vec::new()));
    let (r, c) = (running.clone(), changes.clone());
    let task = tokio::spawn(run_while_leading(
        lock,
        shutdown,
        move |change| {
            let line = match change {
                Change::Taken { task } => format!("taken {task}"),
                Change::Lost { task, why } => format!("lost {task}: {why}"),
                Change::Failed { task, error, .. } => format!("failed {task}: {error}"),
            };
            c.lock().expect("changes").push(line);
        },
        move |mut stopped| {
            let running = r.clone();
            async move {
                running.store(true, Ordering::SeqCst);
                while !*stopped.borrow_and_update() {
                    if stopped.changed().await.is_err() {
                        break;
                    }
                }
                running.store(false, Ordering::SeqCst);
            }
        },
    ));
    Replica {
        running,
        changes,
        task,
    }
}

impl Replica {
    fn runs(&self) -> bool {
        self.running.load(Ordering::SeqCst)
    }

    fn changes(&self) -> Vec<String> {
        self.changes.lock().expect("changes").clone()
    }
}

/// Waits (up to [`BOUND`]) until `cond` holds; returns how long it took.
async fn until(what: &str, cond: impl Fn() -> bool) -> Duration {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < BOUND, "{what} not within {BOUND:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    start.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_runs_the_work_and_it_moves_when_the_leader_is_terminated() {
    let db = TestDb::postgres().await.expect("db");
    let store = db.store().await.expect("store");
    let task = "test-work";
    let (stop, shutdown) = watch::channel(false);
    let a = replica(&store, task, shutdown.clone());
    until("the first replica leads", || a.runs()).await;
    let b = replica(&store, task, shutdown.clone());
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(a.runs() && !b.runs(), "exactly one replica runs the work");
    assert_eq!(a.changes(), vec![format!("taken {task}")]);
    assert!(b.changes().is_empty(), "{:?}", b.changes());

    let pid = terminate_leader(&store, task).await.expect("terminate");
    assert!(pid.is_some(), "the leader's backend is found");
    let moved = until("the second replica takes over", || b.runs()).await;
    let stopped = until("the old leader stops its work", || !a.runs()).await;
    println!(
        "leader terminated: work started on the other replica after {} ms, stopped on the old \
         one after {} ms",
        moved.as_millis(),
        stopped.as_millis()
    );
    let a_changes = a.changes();
    assert_eq!(a_changes.len(), 2, "{a_changes:?}");
    assert!(
        a_changes[1].starts_with(&format!("lost {task}: leadership of {task} lost: ")),
        "{a_changes:?}"
    );
    assert_eq!(b.changes(), vec![format!("taken {task}")]);
    // The old leader waits as a follower now: it does not take the work back.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!a.runs() && b.runs());

    stop.send(true).expect("stop");
    for r in [&a, &b] {
        tokio::time::timeout(BOUND, async {
            while !r.task.is_finished() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("a replica stops");
    }
    assert!(!a.runs() && !b.runs());
    assert_eq!(
        b.changes(),
        vec![
            format!("taken {task}"),
            format!("lost {task}: this process is stopping")
        ]
    );
    assert_eq!(
        a.changes().len(),
        2,
        "a follower reports nothing more when it stops"
    );
}

#[tokio::test]
async fn on_sqlite_the_work_runs_at_once_and_stops_with_the_process() {
    let db = TestDb::sqlite().expect("db");
    let store = db.store().await.expect("store");
    let (stop, shutdown) = watch::channel(false);
    let only = replica(&store, "test-work", shutdown);
    until("the work runs", || only.runs()).await;
    stop.send(true).expect("stop");
    tokio::time::timeout(BOUND, only.task)
        .await
        .expect("stops")
        .expect("join");
    assert!(!only.running.load(Ordering::SeqCst));
    assert_eq!(
        only.changes.lock().expect("changes").clone(),
        vec![
            "taken test-work".to_string(),
            "lost test-work: this process is stopping".to_string()
        ]
    );
}
