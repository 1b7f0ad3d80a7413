//! One leader at a time among the replicas, for work only one process may do (the audit
//! sequencer, identity maintenance, the batch expiry reconciler).
//!
//! [`LeaderLock`] names a task; [`LeaderLock::acquire`] returns once this process is that
//! task's leader, as a [`Leading`] whose [`Leading::lost`] resolves when it no longer is.
//!
//! **Postgres**: a session-level advisory lock, `pg_advisory_lock(LEADER_NAMESPACE, key)`,
//! held by a connection of its own (never one of the store's pool), whose `application_name`
//! is `bc-leader:<task>`. The key is the first four bytes (big-endian) of
//! SHA-256(`"bc-leader/" + task`), under the fixed namespace [`LEADER_NAMESPACE`] ("bcld"); the
//! two-number form of the lock never meets a one-number advisory lock, and no other lock of the
//! workspace uses this namespace. Advisory locks belong to one database: deployments in two
//! databases of one server do not contend.
//!
//! - A follower waits in `pg_advisory_lock` on its own connection: it costs the database no
//!   transaction while it waits, and takes over the moment the leader's backend ends (the server
//!   releases a session lock with its session). A waiting statement holds a snapshot, which
//!   would hold back vacuum's horizon for as long as it waits, so the wait is cut every
//!   [`FOLLOWER_WAIT`] (`lock_timeout`) and begun again: one rolled-back transaction per
//!   follower per [`FOLLOWER_WAIT`].
//! - The session sets server-side TCP keepalives ([`KEEPALIVE_IDLE_S`] idle, then a probe a
//!   second, [`KEEPALIVE_COUNT`] probes) and `tcp_user_timeout`, so that the server ends the
//!   session of a leader whose host died or was cut off within about ten seconds, and the next
//!   follower takes over. On Postgres 14 and later the session also sets
//!   `client_connection_check_interval`, so that a follower's process that went away is noticed
//!   while it waits, and `idle_session_timeout = 0`.
//! - The leader checks its connection every [`LEADER_CHECK_INTERVAL`] with a protocol-level
//!   `Sync` (no statement: no transaction, nothing in `pg_stat_statements`) and gives up
//!   leadership when it fails or gets no answer within [`LEADER_CHECK_TIMEOUT`]. That is sooner
//!   than the server's keepalives end the session, so a leader cut off from the database stops
//!   before another can take over. A leader whose backend was terminated learns it at its next
//!   check: for at most [`LEADER_CHECK_INTERVAL`] the new leader and the old one may both be
//!   working, which is why each task keeps a guard of its own (the sequencer's per-step
//!   transaction lock, exact expected versions for the sealer and the expiries).
//!
//! **SQLite**: a SQLite store is served by one process, which is always the leader:
//! [`LeaderLock::acquire`] returns at once and [`Leading::lost`] never resolves.

use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{ConnectOptions, Connection};

use super::postgres::CONNECT_TIMEOUT;
use super::EventStore;

/// The first number of every leader lock (`pg_advisory_lock(LEADER_NAMESPACE, key)`): "bcld".
pub const LEADER_NAMESPACE: i32 = 0x6263_6c64;

/// How long a follower's `pg_advisory_lock` waits before it is cut and begun again
/// (`lock_timeout`): the longest it holds a snapshot (see the module doc).
pub const FOLLOWER_WAIT: Duration = Duration::from_secs(30);

/// How often the leader checks that its connection, and so its lock, is still there.
pub const LEADER_CHECK_INTERVAL: Duration = Duration::from_secs(2);

/// How long the leader waits for the answer to a check before it takes the connection as lost.
pub const LEADER_CHECK_TIMEOUT: Duration = Duration::from_secs(3);

/// Seconds of silence before the server probes a leader connection (`tcp_keepalives_idle`).
pub const KEEPALIVE_IDLE_S: u32 = 5;

/// Unanswered probes, one a second, after which the server ends the session
/// (`tcp_keepalives_count`).
pub const KEEPALIVE_COUNT: u32 = 3;

/// How long data the server sent may stay unacknowledged before it ends the session
/// (`tcp_user_timeout`, milliseconds).
const USER_TIMEOUT_MS: u32 = 10_000;

/// The longest task name: `bc-leader:<task>` must fit Postgres' 63-byte `application_name`.
const MAX_TASK_LEN: usize = 48;

/// What can go wrong taking or keeping leadership.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error("leader task name {task:?} is not allowed: use 1 to 48 of a-z, 0-9 and '-'")]
    BadTaskName { task: String },
    #[error("cannot open the leader connection for {task}: {why}; check that the database is reachable (the other replicas keep leading meanwhile)")]
    Connect { task: String, why: String },
    #[error(
        "waiting for the leader lock of {task} failed: {source}; the connection is opened again"
    )]
    Wait {
        task: String,
        #[source]
        source: sqlx::Error,
    },
    #[error("leadership of {task} lost: {why}; its work is stopped and another replica (or this one, once the database answers) takes over")]
    Lost { task: String, why: String },
}

/// A boxed `Send` future, what the lock's waits return.
pub type BoxedFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// The lock of one task: what [`LeaderLock::acquire`] waits for.
#[derive(Clone, Debug)]
pub struct LeaderLock {
    task: String,
    key: i32,
    postgres: Option<Arc<PgConnectOptions>>,
}

/// Leadership held: on Postgres, the connection that holds the lock. Dropping it (or
/// [`Leading::release`]) gives the lock up.
#[derive(Debug)]
pub struct Leading {
    task: String,
    conn: Option<PgConnection>,
}

/// The lock key of `task` under [`LEADER_NAMESPACE`] (see the module doc).
pub fn leader_key(task: &str) -> i32 {
    let digest = Sha256::digest(format!("bc-leader/{task}").as_bytes());
    i32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]])
}

/// The `application_name` of the connection that holds or waits for `task`'s lock.
pub fn leader_application_name(task: &str) -> String {
    format!("bc-leader:{task}")
}

impl LeaderLock {
    /// The lock of `task` (1 to 48 of `a-z`, `0-9`, `-`) on `store`'s database.
    pub fn new(store: &EventStore, task: &str) -> Result<Self, LeaderError> {
        let valid = !task.is_empty()
            && task.len() <= MAX_TASK_LEN
            && task
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !valid {
            return Err(LeaderError::BadTaskName {
                task: task.to_string(),
            });
        }
        let postgres = match store {
            EventStore::Postgres(s) => Some(s.pool().connect_options()),
            EventStore::Sqlite(_) => None,
        };
        Ok(LeaderLock {
            task: task.to_string(),
            key: leader_key(task),
            postgres,
        })
    }

    /// The task this lock is for.
    pub fn task(&self) -> &str {
        &self.task
    }

    /// Waits until this process leads the task. On Postgres: opens the lock's own connection
    /// and waits in `pg_advisory_lock` (see the module doc); an error (the database unreachable,
    /// the connection ended while waiting) is returned for the caller to retry after a pause.
    /// Dropping the future drops the connection, and with it the wait. (Boxed: a future that
    /// is plainly `Send`, which generic callers spawning it can see.)
    pub fn acquire(&self) -> BoxedFuture<'_, Result<Leading, LeaderError>> {
        Box::pin(self.acquire_now())
    }

    async fn acquire_now(&self) -> Result<Leading, LeaderError> {
        let Some(options) = &self.postgres else {
            return Ok(Leading {
                task: self.task.clone(),
                conn: None,
            });
        };
        let mut conn = self.connect(options).await?;
        if conn.server_version_num().is_some_and(|v| v >= 140_000) {
            let set = "SET client_connection_check_interval = '2s'; SET idle_session_timeout = 0";
            // No arguments: one simple-protocol query for both statements.
            sqlx::Executor::execute(&mut conn, set)
                .await
                .map_err(|source| self.wait_error(source))?;
        }
        loop {
            let taken = sqlx::query("SELECT pg_advisory_lock($1, $2)")
                .bind(LEADER_NAMESPACE)
                .bind(self.key)
                .execute(&mut conn)
                .await;
            match taken {
                Ok(_) => {
                    return Ok(Leading {
                        task: self.task.clone(),
                        conn: Some(conn),
                    })
                }
                // lock_not_available: FOLLOWER_WAIT passed; wait again with a fresh snapshot.
                Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some("55P03") => {}
                Err(source) => return Err(self.wait_error(source)),
            }
        }
    }

    async fn connect(&self, options: &PgConnectOptions) -> Result<PgConnection, LeaderError> {
        let options = options
            .clone()
            .application_name(&leader_application_name(&self.task))
            .options([
                ("tcp_keepalives_idle", KEEPALIVE_IDLE_S.to_string()),
                ("tcp_keepalives_interval", "1".to_string()),
                ("tcp_keepalives_count", KEEPALIVE_COUNT.to_string()),
                ("tcp_user_timeout", USER_TIMEOUT_MS.to_string()),
                ("lock_timeout", format!("{}ms", FOLLOWER_WAIT.as_millis())),
                ("statement_timeout", "0".to_string()),
            ])
            // A follower's wait is one long statement by design: not a "slow statement".
            .disable_statement_logging();
        match tokio::time::timeout(CONNECT_TIMEOUT, options.connect()).await {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(e)) => Err(LeaderError::Connect {
                task: self.task.clone(),
                why: e.to_string(),
            }),
            Err(_) => Err(LeaderError::Connect {
                task: self.task.clone(),
                why: format!("no answer within {} s", CONNECT_TIMEOUT.as_secs()),
            }),
        }
    }

    fn wait_error(&self, source: sqlx::Error) -> LeaderError {
        LeaderError::Wait {
            task: self.task.clone(),
            source,
        }
    }
}

impl Leading {
    /// The task led.
    pub fn task(&self) -> &str {
        &self.task
    }

    /// Resolves when leadership is lost: the lock's connection failed a check, or did not answer
    /// one within [`LEADER_CHECK_TIMEOUT`]; checks run every [`LEADER_CHECK_INTERVAL`]. Never
    /// resolves on SQLite. Cancel-safe in the sense that matters: a check cut short leaves the
    /// connection unusable, so a caller that drops this future should give leadership up
    /// ([`Leading::release`]) rather than call it again.
    pub fn lost(&mut self) -> BoxedFuture<'_, LeaderError> {
        Box::pin(self.lost_now())
    }

    async fn lost_now(&mut self) -> LeaderError {
        let Some(conn) = self.conn.as_mut() else {
            return std::future::pending().await;
        };
        loop {
            tokio::time::sleep(LEADER_CHECK_INTERVAL).await;
            let why = match tokio::time::timeout(LEADER_CHECK_TIMEOUT, conn.ping()).await {
                Ok(Ok(())) => continue,
                Ok(Err(e)) => format!("the lock's connection failed its check: {e}"),
                Err(_) => format!(
                    "the lock's connection did not answer its check within {} s",
                    LEADER_CHECK_TIMEOUT.as_secs()
                ),
            };
            self.conn = None;
            return LeaderError::Lost {
                task: self.task.clone(),
                why,
            };
        }
    }

    /// Gives leadership up: closes the lock's connection, which ends the session and with it
    /// the lock (a waiting follower takes over at once).
    pub fn release(mut self) -> BoxedFuture<'static, ()> {
        let conn = self.conn.take();
        Box::pin(async move {
            if let Some(conn) = conn {
                let _ = tokio::time::timeout(LEADER_CHECK_TIMEOUT, conn.close()).await;
            }
        })
    }
}

/// Ends the session holding `task`'s leader lock on `store`'s database (found in `pg_locks`),
/// as an operator's `pg_terminate_backend` would: for tests of takeover. Returns the backend
/// ended, if one held it (always `None` on SQLite).
#[cfg(feature = "testkit")]
pub async fn terminate_leader(store: &EventStore, task: &str) -> super::Result<Option<i32>> {
    let EventStore::Postgres(s) = store else {
        return Ok(None);
    };
    let pid: Option<i32> = sqlx::query_scalar(
        "SELECT l.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
         WHERE l.locktype = 'advisory' AND l.granted AND l.database = \
         (SELECT oid FROM pg_database WHERE datname = current_database()) \
         AND l.classid = $1::oid AND l.objid = $2::oid AND l.objsubid = 2 \
         AND a.application_name = $3",
    )
    .bind(i64::from(LEADER_NAMESPACE as u32))
    .bind(i64::from(leader_key(task) as u32))
    .bind(leader_application_name(task))
    .fetch_optional(s.pool())
    .await?;
    if let Some(pid) = pid {
        sqlx::query("SELECT pg_terminate_backend($1)")
            .bind(pid)
            .execute(s.pool())
            .await?;
    }
    Ok(pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_fixed_per_task_and_differ_between_tasks() {
        let tasks = ["audit-sequencer", "maintenance", "batch-expiry"];
        let keys: Vec<i32> = tasks.iter().map(|t| leader_key(t)).collect();
        assert_eq!(
            keys,
            tasks.iter().map(|t| leader_key(t)).collect::<Vec<_>>()
        );
        assert_ne!(keys[0], keys[1]);
        assert_ne!(keys[1], keys[2]);
        assert_ne!(keys[0], keys[2]);
        assert_eq!(
            leader_application_name("audit-sequencer"),
            "bc-leader:audit-sequencer"
        );
    }
}
