//! The log hub: one exact tailer per process, handing every committed event to every reader
//! that subscribed (the gateway's revocation feed, its command dispatcher, the admin listener's
//! revoked-operator set), so N readers cost the database one tail step per commit, not N.
//!
//! The hub tails from "now" ([`LogStore::now_cursor`] when it starts). A reader subscribes
//! ([`LogHub::subscribe`]) and only then loads whatever state it builds from tables: an event
//! that committed before the subscription is in the tables it loads, one after it is handed to
//! the subscription, none is missed. Readers that need their own stored cursor (the audit
//! sequencer, whose cursor commits with its trees) do their own steps, woken by the same commit
//! signal.
//!
//! Waiting costs nothing: the hub steps when the store's commit signal changes (a commit of this
//! process, or a notification from another one, `postgres::wake`), at most once per
//! [`MIN_STEP_SPACING`] (the commits of that window share the step), and otherwise only every
//! [`HubOptions::safety_poll`]. While it waits, it keeps knowing that it is caught up without a
//! query: as long as the listener's `LISTEN` is in place and no signal came, nothing committed
//! that it has not handed out (within a notification's round trip). So [`HubState::caught_up_at`]
//! stays fresh on an idle database, and goes stale when the store fails or the listener is lost.
//!
//! On a streaming replica ([`LogHub::start_on_replica`]) a notification can arrive before the
//! replica has replayed the commit it tells of. The hub then chases: it steps again at short,
//! doubling intervals until the replica's replay position reaches the WAL position the
//! notification carried, and only then calls itself caught up; the safety poll reads the
//! primary's flush position, so a replica that stops replaying goes stale even when no
//! notification came.
//!
//! A subscriber that falls more than [`HubOptions::capacity`] batches behind loses the oldest:
//! its next receive says how many ([`HubRecv::Missed`]) and it must rebuild from the tables.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::{broadcast, watch};

use super::{Backend, EventStore, LogStore, Result, TailCursor};
use crate::envelope::RecordedEvent;

/// How the hub pages and waits.
#[derive(Clone, Copy, Debug)]
pub struct HubOptions {
    /// Most events per tail step.
    pub batch: u32,
    /// How often to step when no commit signal came.
    pub safety_poll: Duration,
    /// Batches a subscriber may fall behind before it loses the oldest.
    pub capacity: usize,
}

/// The safety poll on Postgres, where other processes' commits are notified: a lost
/// notification costs at most this. On SQLite there is no notification, and a step is a read of
/// a local file, so the hub steps every [`SQLITE_POLL`].
pub const POSTGRES_SAFETY_POLL: Duration = Duration::from_secs(5);
pub const SQLITE_POLL: Duration = Duration::from_millis(20);

/// A commit signal that comes within this of the last step's start waits for the rest of it, so
/// a stream of commits costs at most one step per window (one per commit woke the hub at every
/// commit: a second query per command enqueued, C14) for at most this much more latency.
pub const MIN_STEP_SPACING: Duration = Duration::from_millis(5);

/// How often a waiting hub renews [`HubState::caught_up_at`] from the listener's state.
const REFRESH: Duration = Duration::from_millis(250);

/// The replica chase: first retry after this, doubling up to [`CHASE_MAX`].
const CHASE_MIN: Duration = Duration::from_millis(5);
const CHASE_MAX: Duration = Duration::from_millis(200);

/// Store errors: retried after this, doubling up to 5 s.
const RETRY_MIN: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(5);

impl HubOptions {
    /// The defaults for a store of `backend`.
    pub fn for_backend(backend: Backend) -> Self {
        HubOptions {
            batch: 1000,
            safety_poll: match backend {
                Backend::Postgres => POSTGRES_SAFETY_POLL,
                Backend::Sqlite => SQLITE_POLL,
            },
            capacity: 4096,
        }
    }
}

/// What the hub knows of itself, for readers' health.
#[derive(Clone, Copy, Debug, Default)]
pub struct HubState {
    /// The last moment the hub had handed out every event committed before it (`None` until
    /// its first step succeeded).
    pub caught_up_at: Option<Instant>,
    /// The last step failed (the store is unreachable, say); cleared by the next success.
    pub failing: bool,
    /// Tail steps taken so far.
    pub steps: u64,
}

/// The hub of one process. Cheap to clone; the tailing task stops when the last clone and the
/// last subscription go.
#[derive(Clone)]
pub struct LogHub {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for LogHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogHub")
            .field("state", &*self.shared.state.borrow())
            .field("subscribers", &self.shared.events.receiver_count())
            .finish()
    }
}

struct Shared {
    events: broadcast::Sender<Arc<[RecordedEvent]>>,
    state: watch::Sender<HubState>,
    task: OnceLock<tokio::task::AbortHandle>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let Some(task) = self.task.get() {
            task.abort();
        }
    }
}

/// One receive of a subscription.
#[derive(Debug)]
pub enum HubRecv {
    /// Events in the order the exact tailer handed them out.
    Events(Arc<[RecordedEvent]>),
    /// This many batches were lost (the subscriber fell behind): rebuild from the tables.
    Missed(u64),
}

/// What [`HubReceiver::recv_or_state`] woke on.
#[derive(Debug)]
pub enum HubWake {
    Recv(HubRecv),
    /// The hub's state changed (a step, a caught-up moment).
    State,
}

/// A reader's subscription. It keeps the hub running: the tailing task stops when the last
/// [`LogHub`] clone and the last subscription are gone.
pub struct HubReceiver {
    events: broadcast::Receiver<Arc<[RecordedEvent]>>,
    state: watch::Receiver<HubState>,
    _hub: Arc<Shared>,
}

impl HubReceiver {
    /// The next batch (waits for one). `None` once the hub is gone.
    pub async fn recv(&mut self) -> Option<HubRecv> {
        match self.events.recv().await {
            Ok(batch) => Some(HubRecv::Events(batch)),
            Err(broadcast::error::RecvError::Lagged(n)) => Some(HubRecv::Missed(n)),
            Err(broadcast::error::RecvError::Closed) => None,
        }
    }

    /// The next batch, or a change of the hub's state, whichever comes first. `None` once the
    /// hub is gone.
    pub async fn recv_or_state(&mut self) -> Option<HubWake> {
        tokio::select! {
            got = self.events.recv() => match got {
                Ok(batch) => Some(HubWake::Recv(HubRecv::Events(batch))),
                Err(broadcast::error::RecvError::Lagged(n)) => Some(HubWake::Recv(HubRecv::Missed(n))),
                Err(broadcast::error::RecvError::Closed) => None,
            },
            changed = self.state.changed() => changed.ok().map(|()| HubWake::State),
        }
    }

    /// Waits for a batch holding an event of one of `event_types`, or for lost batches (which
    /// may have held one): `true`; `false` once the hub is gone.
    pub async fn wait_for_any(&mut self, event_types: &[&str]) -> bool {
        loop {
            match self.recv().await {
                None => return false,
                Some(HubRecv::Missed(_)) => return true,
                Some(HubRecv::Events(batch)) => {
                    if batch
                        .iter()
                        .any(|e| event_types.contains(&e.event_type.as_str()))
                    {
                        return true;
                    }
                }
            }
        }
    }

    /// Every batch handed out so far has been received.
    pub fn is_drained(&self) -> bool {
        self.events.is_empty()
    }

    /// The hub's state now.
    pub fn state(&self) -> HubState {
        *self.state.borrow()
    }

    /// Resolves when the hub's state changes (`Err` once the hub is gone).
    pub async fn state_changed(&mut self) -> std::result::Result<(), watch::error::RecvError> {
        self.state.changed().await
    }
}

impl LogHub {
    /// Starts tailing `store` from now.
    pub async fn start(store: EventStore, options: HubOptions) -> Result<LogHub> {
        Self::spawn(store, None, options).await
    }

    /// Starts tailing the replica `replica` (made by [`EventStore::replica`] of `primary`) from
    /// now: readers see what the replica has replayed; `primary` is asked only for its WAL
    /// position at each safety poll.
    pub async fn start_on_replica(
        replica: EventStore,
        primary: EventStore,
        options: HubOptions,
    ) -> Result<LogHub> {
        Self::spawn(replica, Some(primary), options).await
    }

    async fn spawn(
        store: EventStore,
        primary: Option<EventStore>,
        options: HubOptions,
    ) -> Result<LogHub> {
        let cursor = store.now_cursor().await?;
        let (events, _) = broadcast::channel(options.capacity.max(1));
        let hub = LogHub {
            shared: Arc::new(Shared {
                events,
                state: watch::channel(HubState::default()).0,
                task: OnceLock::new(),
            }),
        };
        let tail = Tail {
            store,
            primary,
            options,
            cursor,
            events: hub.shared.events.clone(),
            state: hub.shared.state.clone(),
        };
        let task = tokio::spawn(tail.run());
        let _ = hub.shared.task.set(task.abort_handle());
        Ok(hub)
    }

    /// A subscription to every batch handed out from now on.
    pub fn subscribe(&self) -> HubReceiver {
        HubReceiver {
            events: self.shared.events.subscribe(),
            state: self.shared.state.subscribe(),
            _hub: self.shared.clone(),
        }
    }

    /// The hub's state now.
    pub fn state(&self) -> HubState {
        *self.shared.state.borrow()
    }
}

/// The tailing task's own state.
struct Tail {
    store: EventStore,
    primary: Option<EventStore>,
    options: HubOptions,
    cursor: TailCursor,
    events: broadcast::Sender<Arc<[RecordedEvent]>>,
    state: watch::Sender<HubState>,
}

/// What one round of the task found.
enum Round {
    /// More is visible now (a full page, or a snapshot being paged through): step again.
    More,
    /// Handed out everything visible; `behind` when the replica has not replayed what it was
    /// told of.
    Done { behind: bool },
}

impl Tail {
    async fn run(mut self) {
        let mut wake = self.store.commit_signal();
        let mut retry = RETRY_MIN;
        let mut chase = CHASE_MIN;
        let mut primary_read: Option<Instant> = None;
        loop {
            let step_started = tokio::time::Instant::now();
            wake.borrow_and_update();
            if self.primary.is_some()
                && primary_read.is_none_or(|t| t.elapsed() >= self.options.safety_poll)
            {
                self.read_primary_position().await;
                primary_read = Some(Instant::now());
            }
            let behind = match self.round().await {
                Ok(Round::More) => continue,
                Ok(Round::Done { behind }) => {
                    retry = RETRY_MIN;
                    behind
                }
                Err(e) => {
                    tracing::warn!(error = %e, retry_in_ms = retry.as_millis() as u64, "log hub: tail step failed");
                    self.state.send_modify(|s| s.failing = true);
                    tokio::time::sleep(retry).await;
                    retry = (retry * 2).min(RETRY_MAX);
                    continue;
                }
            };
            if behind {
                // The replica has not replayed what it was told of: look again soon.
                tokio::select! {
                    _ = wake.changed() => {}
                    _ = tokio::time::sleep(chase) => {}
                }
                chase = (chase * 2).min(CHASE_MAX);
                continue;
            }
            chase = CHASE_MIN;
            // The hub never goes longer than the safety poll without a step.
            self.wait(
                &mut wake,
                tokio::time::Instant::now() + self.options.safety_poll,
            )
            .await;
            tokio::time::sleep_until(step_started + MIN_STEP_SPACING).await;
        }
    }

    /// Waits for a commit signal or `deadline`, renewing `caught_up_at` meanwhile while the
    /// listener is in place.
    async fn wait(&self, wake: &mut watch::Receiver<u64>, deadline: tokio::time::Instant) {
        loop {
            let refresh = tokio::time::Instant::now() + REFRESH;
            tokio::select! {
                _ = wake.changed() => return,
                _ = tokio::time::sleep_until(deadline.min(refresh)) => {}
            }
            if tokio::time::Instant::now() >= deadline {
                return;
            }
            if self.listening() {
                self.state
                    .send_modify(|s| s.caught_up_at = Some(Instant::now()));
            }
        }
    }

    /// Whether other processes' commits reach this hub's signal now.
    fn listening(&self) -> bool {
        let target = self.primary.as_ref().unwrap_or(&self.store);
        target
            .as_postgres()
            .is_some_and(|s| s.wake().is_listening())
    }

    /// One tail step (and, on a replica, the replay position read before it).
    async fn round(&mut self) -> Result<Round> {
        let started = Instant::now();
        let replay = match (&self.primary, self.store.as_postgres()) {
            (Some(_), Some(replica)) => Some(replica.replay_lsn().await?.unwrap_or(0)),
            _ => None,
        };
        let (events, next) = self
            .store
            .tail_step(&self.cursor, self.options.batch)
            .await?;
        let full = events.len() as u64 >= u64::from(self.options.batch);
        let mid_snapshot = matches!(
            next,
            TailCursor::Postgres {
                ceiling: Some(_),
                ..
            }
        );
        self.cursor = next;
        if !events.is_empty() {
            // No subscriber is not an error: the events are in the tables for later ones.
            let _ = self.events.send(Arc::from(events));
        }
        self.state.send_modify(|s| {
            s.steps += 1;
            s.failing = false;
        });
        if full || mid_snapshot {
            return Ok(Round::More);
        }
        let behind = match (replay, self.store.as_postgres()) {
            (Some(replayed), Some(replica)) => replayed < replica.wake().notified_lsn(),
            _ => false,
        };
        if !behind {
            self.state.send_modify(|s| s.caught_up_at = Some(started));
        }
        Ok(Round::Done { behind })
    }

    /// The safety poll on a replica: the primary's flush position becomes the position the
    /// replica must reach, so a replica that stopped replaying goes stale without any
    /// notification. A failure is logged; the hub goes on with what it was told.
    async fn read_primary_position(&self) {
        let (Some(primary), Some(replica)) = (
            self.primary.as_ref().and_then(EventStore::as_postgres),
            self.store.as_postgres(),
        ) else {
            return;
        };
        match primary.wal_flush_lsn().await {
            Ok(lsn) => replica.wake().raise_notified_lsn(lsn),
            Err(e) => {
                tracing::warn!(error = %e, "log hub: the primary's WAL position could not be read")
            }
        }
    }
}
