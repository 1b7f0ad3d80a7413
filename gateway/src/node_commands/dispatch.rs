//! Commands over the node session (issue 21, spec 003 "Signed intent"): what a session sends its
//! node and records of its answers, and the one poller per gateway process that wakes the
//! sessions of nodes with newly runnable commands.
//!
//! - After its Welcome, a session fetches the node's pending commands
//!   ([`commands::command_queue::pending_for_node`], at most [`FETCH_LIMIT`]) and sends those it
//!   has not sent yet, each recorded first as `command.dispatched` (cause `hello` for one
//!   dispatched before, a resend after a reconnect; else `ready`). A command whose dispatch
//!   could not be recorded is not sent; the session retries after [`RETRY_AFTER`]. A session
//!   never sends the same command id twice. Only the commands the record answers are sent: one
//!   whose kind the node's role or newest live certificate no longer allows is cancelled there
//!   instead (issue 40 item 16).
//! - [`poll_ready`] asks [`commands::command_queue::ready_since`] which nodes have newly
//!   runnable commands and wakes their live sessions ([`Sessions::wake_nodes`]); a woken session
//!   fetches again. It asks when the process's log hub hands out a `command.enqueued` or
//!   `batch.approved` event (at once, whichever process committed it), and otherwise every poll
//!   interval (a safety net; 5 s by default).
//! - A node's `CommandResult` is checked at the edge ([`crate::node_commands::wire::node_answer`])
//!   and recorded inline ([`commands::command_queue::record_node_answer`]) under the node id of the
//!   connection's mTLS identity, never one from a message: a result for another node's command
//!   records nothing. Nothing is dropped silently: every result is counted by outcome (`recorded`,
//!   `ignored` for a duplicate or another node's command, `invalid`, `error`, `unsolicited`) and
//!   the failures logged, at most a line per 10 s for the process
//!   ([`CommandCounters::result_line`]). A result whose recording failed is not lost for good:
//!   the command stays unanswered, is resent after the node's next Hello, and bcd answers it from
//!   its journal.
//! - Results for commands the session did not send (or already had an answer for) are bounded
//!   (issue 40): the first [`UNSOLICITED_READS`] of a session are read from the store as any
//!   other (bcd's start-up reports the one command a crash interrupted, which may arrive before
//!   the gateway resends it); the rest are dropped unread, counted `unsolicited`. A session whose
//!   node sent [`UNSOLICITED_CUTOFF`] such results (invalid ones included) is ended with
//!   RESOURCE_EXHAUSTED and a retry hint of [`CUT_OFF_PUSHBACK`] (see decision 0079).
//!
//! A session reaches the queue through [`Queue`] ([`StoreQueue`] in the server), so its rules
//! are tested here against a fake.

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use commands::command_queue::{
    pending_for_node, ready_since, record_dispatched, record_node_answer, CommandQueueError,
    DispatchCause, NodeAnswer, RunnableCommand,
};
use commands::Clock;
use events::store::{EventStore, HubReceiver, LogStore};
use proto::{gateway_message, GatewayMessage};
use tokio::sync::mpsc;
use tonic::Status;

/// What a session's task sends to its response stream. The message is boxed: the channel's
/// first block holds 32 slots whatever its bound, and a slot of the message itself (216 bytes)
/// made that block 7 KiB of every live session (C17). (`Status` is a box already.)
pub type SessionItem = Result<Box<GatewayMessage>, Status>;
/// The sending half of a session's response channel.
pub type SessionSender = mpsc::Sender<SessionItem>;

pub use crate::node_commands::counters::CommandCounters;
use crate::node_commands::wire::{command_message, node_answer};
use crate::session::registry::Sessions;

/// Most commands one fetch reads.
pub const FETCH_LIMIT: u32 = 64;

/// Most nodes one poll of [`ready_since`] reads (a full page is followed at once).
pub const POLL_LIMIT: u32 = 1024;

/// How long a session waits before fetching again after the store failed.
pub const RETRY_AFTER: Duration = Duration::from_secs(2);

/// Results for commands a session did not send that are still read from the store. bcd runs
/// one command at a time and sweeps its journal once at start: one interrupted command per
/// restart, reported before the gateway resends it.
pub const UNSOLICITED_READS: u32 = 4;

/// Results for commands a session did not send (invalid ones included) after which the session
/// is ended: far more than any bcd sends, few enough that a node flooding them costs a
/// reconnect (a TLS handshake and a session open) every so many.
pub const UNSOLICITED_CUTOFF: u32 = 64;

/// The retry hint of a session ended for them (`grpc-retry-pushback-ms`).
pub const CUT_OFF_PUSHBACK: Duration = Duration::from_secs(60);

/// The default interval of [`poll_ready`]'s safety poll (it is woken by the log hub otherwise).
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(5);

/// The least time between two of [`poll_ready`]'s asks when the hub wakes it. Each ask reads
/// the commands released in the last `READY_LOOKBACK` positions (`projections::commands::read`),
/// so with a backlog queued for offline nodes it costs milliseconds; asked once per enqueue it
/// made `enqueue_command` 5–9× slower (C14, issue 25). A burst of enqueues within this is one
/// ask; a lone command waits at most this much longer.
const MIN_ASK_SPACING: Duration = Duration::from_millis(50);

/// The events after which [`poll_ready`] asks at once: a command became runnable.
const READY_EVENTS: [&str; 2] = ["command.enqueued", "batch.approved"];

/// A boxed future of the queue's calls.
pub type QueueFuture<'a, T> =
    Pin<Box<dyn Future<Output = Result<T, CommandQueueError>> + Send + 'a>>;

/// What a session asks of the command queue.
pub trait Queue: Send + Sync {
    /// [`pending_for_node`].
    fn pending<'a>(&'a self, node_id: &'a str, limit: u32)
        -> QueueFuture<'a, Vec<RunnableCommand>>;
    /// [`record_dispatched`]: the ids recorded, the only ones to send.
    fn dispatched<'a>(
        &'a self,
        node_id: &'a str,
        ids: &'a [String],
        cause: DispatchCause,
    ) -> QueueFuture<'a, Vec<String>>;
    /// [`record_node_answer`].
    fn answer<'a>(&'a self, node_id: &'a str, answer: &'a NodeAnswer) -> QueueFuture<'a, bool>;
    /// [`ready_since`] (the poller's).
    fn ready(&self, after: i64, limit: u32) -> QueueFuture<'_, (Vec<String>, i64)>;
}

/// The queue in the store.
pub struct StoreQueue {
    pub store: EventStore,
    pub clock: Arc<dyn Clock>,
}

impl Queue for StoreQueue {
    fn pending<'a>(
        &'a self,
        node_id: &'a str,
        limit: u32,
    ) -> QueueFuture<'a, Vec<RunnableCommand>> {
        Box::pin(pending_for_node(&self.store, node_id, limit))
    }

    fn dispatched<'a>(
        &'a self,
        node_id: &'a str,
        ids: &'a [String],
        cause: DispatchCause,
    ) -> QueueFuture<'a, Vec<String>> {
        Box::pin(record_dispatched(
            &self.store,
            self.clock.as_ref(),
            node_id,
            ids,
            cause,
        ))
    }

    fn answer<'a>(&'a self, node_id: &'a str, answer: &'a NodeAnswer) -> QueueFuture<'a, bool> {
        Box::pin(record_node_answer(
            &self.store,
            self.clock.as_ref(),
            node_id,
            answer,
        ))
    }

    fn ready(&self, after: i64, limit: u32) -> QueueFuture<'_, (Vec<String>, i64)> {
        Box::pin(ready_since(&self.store, after, limit))
    }
}

/// The session's channel was closed (the node went away).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionClosed;

/// One session's command state: what it sent, whether a fetch was full, when to retry.
pub struct SessionCommands {
    queue: Arc<dyn Queue>,
    node_id: String,
    counters: Arc<CommandCounters>,
    /// Sent in this session and not answered yet (an answered one is dropped from it: it is
    /// never pending again).
    sent: HashSet<String>,
    /// The last fetch was full: an answer may make room for more.
    more: bool,
    /// The Welcome was sent: commands may follow.
    welcomed: bool,
    retry_at: Option<tokio::time::Instant>,
    /// Results the node sent for commands not in `sent` (invalid ones included).
    unsolicited: u32,
}

impl SessionCommands {
    pub fn new(queue: Arc<dyn Queue>, node_id: String, counters: Arc<CommandCounters>) -> Self {
        SessionCommands {
            queue,
            node_id,
            counters,
            sent: HashSet::new(),
            more: false,
            welcomed: false,
            retry_at: None,
            unsolicited: 0,
        }
    }

    /// Marks the Welcome sent: from now on the session dispatches.
    pub fn welcomed(&mut self) {
        self.welcomed = true;
    }

    /// Whether the Welcome was sent.
    pub fn is_welcomed(&self) -> bool {
        self.welcomed
    }

    /// When the session should fetch again after a failure, if it should.
    pub fn retry_at(&self) -> Option<tokio::time::Instant> {
        self.retry_at
    }

    /// Commands sent in this session and not answered yet.
    pub fn unanswered(&self) -> usize {
        self.sent.len()
    }

    /// Fetches the node's pending commands and sends those not sent yet in this session, each
    /// recorded as dispatched before it is sent. Errors of the store are logged and retried
    /// later; only a closed session is an error.
    pub async fn dispatch(&mut self, tx: &SessionSender) -> Result<(), SessionClosed> {
        if !self.welcomed {
            return Ok(());
        }
        self.retry_at = None;
        let pending = match self.queue.pending(&self.node_id, FETCH_LIMIT).await {
            Ok(p) => p,
            Err(e) => {
                self.failure("reading the node's pending commands", &e);
                return Ok(());
            }
        };
        self.more = pending.len() >= FETCH_LIMIT as usize;
        let (resends, first): (Vec<RunnableCommand>, Vec<RunnableCommand>) = pending
            .into_iter()
            .filter(|c| !self.sent.contains(&c.command_id))
            .partition(|c| c.dispatched_before);
        for (cause, group) in [
            (DispatchCause::Hello, resends),
            (DispatchCause::Ready, first),
        ] {
            if group.is_empty() {
                continue;
            }
            let ids: Vec<String> = group.iter().map(|c| c.command_id.clone()).collect();
            let recorded = match self.queue.dispatched(&self.node_id, &ids, cause).await {
                Ok(recorded) => recorded,
                Err(e) => {
                    self.failure("recording a dispatch (the commands were not sent)", &e);
                    continue;
                }
            };
            for command in group.iter().filter(|c| recorded.contains(&c.command_id)) {
                self.sent.insert(command.command_id.clone());
                let message = GatewayMessage {
                    body: Some(gateway_message::Body::Command(command_message(command))),
                };
                tx.send(Ok(Box::new(message)))
                    .await
                    .map_err(|_| SessionClosed)?;
                self.counters.dispatched.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(node = %self.node_id, command = %command.command_id, ?cause, "command sent");
            }
        }
        Ok(())
    }

    /// Records the node's `result` (see the module docs). Answers whether the session should
    /// fetch again (the answer was recorded and the last fetch was full), or the status to end
    /// the session with: its node sent [`UNSOLICITED_CUTOFF`] results for commands it was not
    /// sent.
    pub async fn answer(&mut self, result: &proto::CommandResult) -> Result<bool, Status> {
        let results = &self.counters.results;
        let answer = match node_answer(result) {
            Ok(a) => a,
            Err(e) => {
                results.inc("invalid");
                if let Some(suppressed) = self.counters.result_line() {
                    tracing::warn!(node = %self.node_id, error = %e, suppressed_since_last_line = suppressed, "a command result was not recorded");
                }
                return self.unsolicited();
            }
        };
        if !self.sent.contains(&answer.command_id) {
            self.unsolicited = self.unsolicited.saturating_add(1);
            if self.unsolicited > UNSOLICITED_READS {
                results.inc("unsolicited");
                if let Some(suppressed) = self.counters.result_line() {
                    tracing::info!(node = %self.node_id, command = %answer.command_id, suppressed_since_last_line = suppressed, "a command result for a command this session did not send was dropped unread");
                }
                return self.unsolicited();
            }
        }
        match self.queue.answer(&self.node_id, &answer).await {
            Ok(true) => {
                results.inc("recorded");
                self.sent.remove(&answer.command_id);
                tracing::debug!(node = %self.node_id, command = %answer.command_id, outcome = ?answer.outcome, "command result recorded");
                Ok(self.more)
            }
            Ok(false) => {
                results.inc("ignored");
                self.sent.remove(&answer.command_id);
                if let Some(suppressed) = self.counters.result_line() {
                    tracing::info!(node = %self.node_id, command = %answer.command_id, suppressed_since_last_line = suppressed, "a command result was not recorded: the command is another node's, unknown, or already answered");
                }
                self.unsolicited()
            }
            Err(e) => {
                results.inc("error");
                if let Some(suppressed) = self.counters.result_line() {
                    tracing::warn!(node = %self.node_id, command = %answer.command_id, error = %e, suppressed_since_last_line = suppressed, "recording a command result failed; the command is resent after the node's next Hello and bcd answers it from its journal");
                }
                Ok(false)
            }
        }
    }

    /// After a result that answered no command of this session: go on (`Ok(false)`), or end
    /// the session once its node sent [`UNSOLICITED_CUTOFF`] of them.
    fn unsolicited(&mut self) -> Result<bool, Status> {
        if self.unsolicited < UNSOLICITED_CUTOFF {
            return Ok(false);
        }
        self.counters.sessions_cut.fetch_add(1, Ordering::Relaxed);
        if let Some(suppressed) = self.counters.result_line() {
            tracing::warn!(node = %self.node_id, results = self.unsolicited, suppressed_since_last_line = suppressed, "session ended: its node sent results for commands it was not sent");
        }
        Err(cut_off_status(self.unsolicited))
    }

    fn failure(&mut self, what: &str, e: &CommandQueueError) {
        self.counters
            .dispatch_errors
            .fetch_add(1, Ordering::Relaxed);
        self.counters.failed(what, Some(&self.node_id), e);
        self.retry_at = Some(tokio::time::Instant::now() + RETRY_AFTER);
    }
}

/// The status a session cut off for results of commands it was not sent ends with: retry in
/// [`CUT_OFF_PUSHBACK`] (`grpc-retry-pushback-ms`; bcd waits at least that long).
pub fn cut_off_status(results: u32) -> Status {
    crate::renew::wire::with_pushback_ms(
        Status::resource_exhausted(format!(
            "this session sent {results} results for commands it was not sent; the gateway ended it: reconnect in {} s",
            CUT_OFF_PUSHBACK.as_secs()
        )),
        u64::try_from(CUT_OFF_PUSHBACK.as_millis()).unwrap_or(u64::MAX),
    )
}

/// The poller: from the log's head at start, asks which nodes have newly runnable commands and
/// wakes their live sessions, whenever `hub` hands out an event that makes a command runnable,
/// and every `interval`. Runs until aborted; store failures are counted, logged (rate-limited)
/// and retried at the next wake.
pub async fn poll_ready(
    store: EventStore,
    queue: Arc<dyn Queue>,
    sessions: Arc<Sessions>,
    interval: Duration,
    counters: Arc<CommandCounters>,
    mut hub: Option<HubReceiver>,
) {
    let mut cursor = loop {
        match store.head_position().await {
            Ok(p) => break p,
            Err(e) => {
                counters.poll_errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, "the command poller cannot read the log's head; retrying");
                tokio::time::sleep(RETRY_AFTER).await;
            }
        }
    };
    let mut tick = tokio::time::interval(interval.max(Duration::from_millis(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_ask: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            woke = next_ready_event(&mut hub) => {
                if !woke {
                    hub = None;
                    continue;
                }
                // A burst of enqueues is one ask, not one each (see MIN_ASK_SPACING).
                if let Some(at) = last_ask {
                    tokio::time::sleep_until(at + MIN_ASK_SPACING).await;
                }
            }
        }
        last_ask = Some(tokio::time::Instant::now());
        loop {
            match queue.ready(cursor, POLL_LIMIT).await {
                Ok((nodes, next)) => {
                    let woken = sessions.wake_nodes(&nodes);
                    counters.wakes.fetch_add(woken as u64, Ordering::Relaxed);
                    let progressed = next > cursor;
                    cursor = cursor.max(next);
                    if nodes.len() < POLL_LIMIT as usize || !progressed {
                        break;
                    }
                }
                Err(e) => {
                    counters.poll_errors.fetch_add(1, Ordering::Relaxed);
                    counters.failed("polling for runnable commands", None, &e);
                    break;
                }
            }
        }
    }
}

/// Waits for a batch from the hub holding one of [`READY_EVENTS`] (a lost batch counts: it may
/// have held one). `false` once the hub is gone; never resolves without a hub.
async fn next_ready_event(hub: &mut Option<HubReceiver>) -> bool {
    match hub {
        Some(hub) => hub.wait_for_any(&READY_EVENTS).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
#[path = "dispatch_tests.rs"]
mod tests;
