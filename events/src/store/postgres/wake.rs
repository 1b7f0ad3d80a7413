//! Wake on commit across processes: a notification after every commit that appended events,
//! and a listener that turns the notifications of every process into the store's commit signal.
//!
//! The writer never notifies inside its transaction (a `NOTIFY` there takes a lock at commit
//! that serializes every notifying commit of the database). After its COMMIT returned, the
//! committing task sends `pg_notify` on the store's one notifier connection. Commits that land
//! while a notification is being sent are batched: they raise a flag and return at once, and
//! the sender sends one more notification for all of them before it lets go of the connection.
//! So a commit's caller returns after its notification went out or was handed to a send that
//! will cover it (a one-shot CLI process does not exit before its notification left), and a burst
//! of commits costs one notification per round trip, not one per commit.
//!
//! The payload is the primary's WAL flush position after the commit (`pg_current_wal_flush_lsn`),
//! so a reader on a streaming replica can tell whether what it was told about has been replayed.
//!
//! The listener (`LISTEN bc_events` on a connection of its own, started by the first
//! [`CommitWake::subscribe`] inside a Tokio runtime) bumps the same watch channel local commits
//! bump, except for the notifications this store's own notifier sent (told apart by the
//! sender's server process id): the commit they tell of woke this store's readers already. A
//! lost connection is reconnected with a backoff and also bumps it, since notifications sent
//! while it was away are gone: the readers then take a step and find what they missed.
//! Readers keep a slow safety poll besides, for what no signal can promise.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgConnection};
use tokio::sync::{watch, Mutex};

/// The notification channel every store of a database shares.
pub const CHANNEL: &str = "bc_events";

/// The listener's reconnect backoff: from this, doubling, to [`LISTEN_RETRY_MAX`].
const LISTEN_RETRY_MIN: Duration = Duration::from_millis(100);
const LISTEN_RETRY_MAX: Duration = Duration::from_secs(5);

/// How long a notification may take before the sender gives up on its connection.
const NOTIFY_TIMEOUT: Duration = Duration::from_secs(5);

/// The commit signal of one store (shared by its clones) and what feeds it.
#[derive(Debug)]
pub struct CommitWake {
    commits: watch::Sender<u64>,
    /// How to reach the database the notifications go to and come from (the primary).
    options: PgConnectOptions,
    /// The notifier connection, opened on first use; held while a notification is sent.
    sender: Mutex<Option<PgConnection>>,
    /// A commit wants a notification that no send has covered yet.
    pending: AtomicBool,
    /// The listener task, once started (aborted when the last clone of the store goes).
    listener: OnceLock<tokio::task::AbortHandle>,
    /// The listener's `LISTEN` is in place now.
    listening: AtomicBool,
    /// The highest WAL position a notification carried (0: none yet).
    notified_lsn: AtomicU64,
    /// The server process of the notifier connection (0: none yet), read when it connects. Its
    /// notifications come back to this store's listener after the commit already woke this
    /// store's readers; the listener records their position and does not wake them again.
    notifier_pid: AtomicU32,
    /// Notifications sent by this store, and received by its listener (its own among them).
    sent: AtomicU64,
    received: AtomicU64,
    /// Received notifications this store had sent itself.
    received_own: AtomicU64,
}

impl CommitWake {
    pub fn new(options: PgConnectOptions) -> Arc<Self> {
        Arc::new(CommitWake {
            commits: watch::channel(0).0,
            options,
            sender: Mutex::new(None),
            pending: AtomicBool::new(false),
            listener: OnceLock::new(),
            listening: AtomicBool::new(false),
            notified_lsn: AtomicU64::new(0),
            notifier_pid: AtomicU32::new(0),
            sent: AtomicU64::new(0),
            received: AtomicU64::new(0),
            received_own: AtomicU64::new(0),
        })
    }

    /// Wakes this process's readers (every commit) and, when the transaction appended events,
    /// the other processes' (see the module doc for the batching).
    pub async fn committed(&self, appended_events: bool) {
        self.bump();
        if !appended_events {
            return;
        }
        self.pending.store(true, Ordering::SeqCst);
        loop {
            let Ok(mut conn) = self.sender.try_lock() else {
                // The holder checks `pending` after its send and sends once more for us.
                return;
            };
            while self.pending.swap(false, Ordering::SeqCst) {
                self.send(&mut conn).await;
            }
            drop(conn);
            // A commit that raised the flag after our last check but found the lock held.
            if !self.pending.load(Ordering::SeqCst) {
                return;
            }
        }
    }

    async fn send(&self, conn: &mut Option<PgConnection>) {
        let sent = tokio::time::timeout(NOTIFY_TIMEOUT, async {
            if conn.is_none() {
                // The notification's own transaction need not be durable (a lost one costs a
                // safety poll), and waiting for its WAL flush doubled the fsyncs of every
                // notifying commit: asynchronous commit still delivers at commit.
                let options = self
                    .options
                    .clone()
                    .application_name("bc-events-notify")
                    .options([("synchronous_commit", "off")]);
                let mut fresh = options.connect().await?;
                // Known before its first notification, so the listener can tell that one too.
                let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
                    .fetch_one(&mut fresh)
                    .await?;
                self.notifier_pid
                    .store(u32::try_from(pid).unwrap_or(0), Ordering::Relaxed);
                *conn = Some(fresh);
            }
            match conn.as_mut() {
                Some(c) => sqlx::query("SELECT pg_notify($1, pg_current_wal_flush_lsn()::text)")
                    .bind(CHANNEL)
                    .execute(&mut *c)
                    .await
                    .map(|_| ()),
                None => Ok(()),
            }
        })
        .await;
        match sent {
            Ok(Ok(())) => {
                self.sent.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "commit notification failed; other processes see this commit at their next safety poll");
                if let Some(c) = conn.take() {
                    let _ = c.close().await;
                }
            }
            Err(_) => {
                tracing::warn!(timeout_s = NOTIFY_TIMEOUT.as_secs(), "commit notification timed out; other processes see this commit at their next safety poll");
                *conn = None;
            }
        }
    }

    fn bump(&self) {
        self.commits.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// The commit signal: changes on every commit of this process and, once the listener is up,
    /// on every notification from any process. Starts the listener on first use inside a Tokio
    /// runtime (outside one the signal is this process's commits only).
    pub fn subscribe(self: &Arc<Self>) -> watch::Receiver<u64> {
        let rx = self.commits.subscribe();
        if tokio::runtime::Handle::try_current().is_ok() {
            self.listener
                .get_or_init(|| tokio::spawn(listen(Arc::downgrade(self))).abort_handle());
        }
        rx
    }

    /// Whether the listener's `LISTEN` is in place, so that other processes' commits wake this
    /// one within a round trip.
    pub fn is_listening(&self) -> bool {
        self.listening.load(Ordering::Relaxed)
    }

    /// The highest WAL position a notification carried (0 when none has come).
    pub fn notified_lsn(&self) -> u64 {
        self.notified_lsn.load(Ordering::Relaxed)
    }

    /// Raises the WAL position readers must reach (a safety poll's reading of the primary).
    pub fn raise_notified_lsn(&self, lsn: u64) {
        self.notified_lsn.fetch_max(lsn, Ordering::Relaxed);
    }

    /// (notifications sent, notifications received) by this store so far.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.sent.load(Ordering::Relaxed),
            self.received.load(Ordering::Relaxed),
        )
    }

    /// Received notifications that this store's own notifier had sent (they wake no reader).
    pub fn received_own(&self) -> u64 {
        self.received_own.load(Ordering::Relaxed)
    }
}

impl Drop for CommitWake {
    fn drop(&mut self) {
        if let Some(listener) = self.listener.get() {
            listener.abort();
        }
    }
}

/// Parses a `pg_lsn` text (`16/B374D848`) into its 64-bit position.
pub fn parse_lsn(text: &str) -> Option<u64> {
    let (hi, lo) = text.trim().split_once('/')?;
    let hi = u64::from_str_radix(hi, 16).ok()?;
    let lo = u64::from_str_radix(lo, 16).ok()?;
    if hi > u64::from(u32::MAX) || lo > u64::from(u32::MAX) {
        return None;
    }
    Some(hi << 32 | lo)
}

/// The listener task: runs while any clone of the store is alive.
async fn listen(wake: Weak<CommitWake>) {
    let mut backoff = LISTEN_RETRY_MIN;
    loop {
        let Some(options) = wake.upgrade().map(|w| w.options.clone()) else {
            return;
        };
        let options = options.application_name("bc-events-listen");
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .min_connections(0)
            .idle_timeout(None)
            .max_lifetime(None)
            .acquire_timeout(LISTEN_RETRY_MAX)
            .connect_lazy_with(options);
        let mut listener = match PgListener::connect_with(&pool).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, retry_in_ms = backoff.as_millis() as u64, "commit listener cannot connect; readers fall back to their safety poll");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(LISTEN_RETRY_MAX);
                continue;
            }
        };
        listener.ignore_pool_close_event(true);
        if let Err(e) = listener.listen(CHANNEL).await {
            tracing::warn!(error = %e, "commit listener: LISTEN failed");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(LISTEN_RETRY_MAX);
            continue;
        }
        match wake.upgrade() {
            Some(w) => {
                w.listening.store(true, Ordering::Relaxed);
                // What committed before LISTEN took effect was not notified to us.
                w.bump();
            }
            None => return,
        }
        backoff = LISTEN_RETRY_MIN;
        loop {
            let got = listener.try_recv().await;
            let Some(w) = wake.upgrade() else { return };
            match got {
                Ok(Some(n)) => {
                    w.received.fetch_add(1, Ordering::Relaxed);
                    if let Some(lsn) = parse_lsn(n.payload()) {
                        w.notified_lsn.fetch_max(lsn, Ordering::Relaxed);
                    }
                    if n.process_id() == w.notifier_pid.load(Ordering::Relaxed) {
                        // Ours: the commit it tells of bumped the signal before it was sent.
                        w.received_own.fetch_add(1, Ordering::Relaxed);
                    } else {
                        w.bump();
                    }
                }
                Ok(None) => {
                    // Reconnected (sqlx re-LISTENs): anything sent meanwhile is lost.
                    tracing::info!("commit listener reconnected");
                    w.bump();
                }
                Err(e) => {
                    w.listening.store(false, Ordering::Relaxed);
                    w.bump();
                    tracing::warn!(error = %e, retry_in_ms = backoff.as_millis() as u64, "commit listener lost its connection; readers fall back to their safety poll until it is back");
                    break;
                }
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(LISTEN_RETRY_MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::parse_lsn;

    #[test]
    fn lsn_text_parses_to_its_position() {
        assert_eq!(parse_lsn("0/0"), Some(0));
        assert_eq!(parse_lsn("16/B374D848"), Some(0x16_B374_D848));
        assert_eq!(parse_lsn("FFFFFFFF/FFFFFFFF"), Some(u64::MAX));
        assert_eq!(parse_lsn("1/"), None);
        assert_eq!(parse_lsn("x/1"), None);
        assert_eq!(parse_lsn("100000000/0"), None);
    }
}
