//! Dropping finished test databases off the tests' path.
//!
//! On Postgres 15 every `DROP DATABASE` waits for a forced checkpoint (seconds on a busy server),
//! which a test used to wait for in its handle's `Drop`. Now the handle only marks its database
//! finished (`ALLOW_CONNECTIONS false`: a quick catalogue update), ends the connections still
//! open to it (their slots are wanted by the next tests) and hands the name to one
//! background thread per process, which drops up to [`AT_ONCE`] databases at a time (concurrent
//! drops share their checkpoints). A database still marked finished when its process exits is
//! dropped by the next process's sweep, whatever its age: a finished database is used by no one.

use std::sync::OnceLock;

use sqlx::Connection;
use tokio::sync::mpsc;

/// How many drops run at once.
pub const AT_ONCE: usize = 8;

/// A database to drop: the server's admin URL and the database's name.
type Job = (String, String);

static QUEUE: OnceLock<Option<mpsc::UnboundedSender<Job>>> = OnceLock::new();

/// Marks `name` finished on the server at `admin_url` and queues it to be dropped. Blocks only
/// for the mark; best effort (a failure leaves the database to the sweep of stale ones).
pub fn finish(admin_url: &str, name: &str) {
    let job = (admin_url.to_owned(), name.to_owned());
    // Drop runs outside any runtime guarantee, so the mark gets a runtime of its own.
    let mark = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .ok()?;
        rt.block_on(async {
            let mut admin = connect(&job.0).await?;
            let marked = sqlx::query(&format!(
                "ALTER DATABASE {} WITH ALLOW_CONNECTIONS false",
                job.1
            ))
            .execute(&mut admin)
            .await;
            // What is still connected goes now, as a `DROP .. WITH (FORCE)` here used to do: on a
            // server with few connection slots, a finished test must not hold any.
            let _ = sqlx::query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE datname = $1 AND pid <> pg_backend_pid()",
            )
            .bind(&job.1)
            .execute(&mut admin)
            .await;
            let _ = admin.close().await;
            marked.ok()
        })?;
        Some(job)
    });
    if let Ok(Some(job)) = mark.join() {
        if let Some(queue) = QUEUE.get_or_init(start) {
            let _ = queue.send(job);
        }
    }
}

/// A connection to the admin database, tried a few times: when the server's connection slots
/// are all taken (other tests, other checkouts), one is usually free again within moments.
async fn connect(admin_url: &str) -> Option<sqlx::PgConnection> {
    for _ in 0..10 {
        match sqlx::PgConnection::connect(admin_url).await {
            Ok(admin) => return Some(admin),
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(200)).await,
        }
    }
    None
}

/// Drops `name` on the server at `admin_url`, closing what is still connected to it.
pub async fn drop_now(admin_url: &str, name: &str) -> bool {
    let Some(mut admin) = connect(admin_url).await else {
        return false;
    };
    let gone = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .execute(&mut admin)
        .await
        .is_ok();
    let _ = admin.close().await;
    gone
}

/// Starts the background thread; `None` if it cannot run (then databases wait for the sweep).
fn start() -> Option<mpsc::UnboundedSender<Job>> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Job>();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    std::thread::Builder::new()
        .name("testdb-dropper".into())
        .spawn(move || {
            rt.block_on(async move {
                let mut running = tokio::task::JoinSet::new();
                while let Some((admin_url, name)) = rx.recv().await {
                    while running.len() >= AT_ONCE {
                        running.join_next().await;
                    }
                    running.spawn(async move { drop_now(&admin_url, &name).await });
                }
            });
        })
        .ok()?;
    Some(tx)
}
