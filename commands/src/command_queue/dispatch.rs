//! What a gateway reads and records for a node's session: its runnable commands, which nodes
//! have newly runnable ones, dispatches, and the node's answers.
//!
//! A dispatch checks the node's role and its newest live certificate's allowed kinds again, as
//! enqueue did (issue 40 item 16): a command they no longer admit (the node re-joined with
//! narrower allowed kinds) is cancelled (`command.cancelled`) and not handed to the gateway.
//!
//! Dispatches and answers append at the command stream's exact version read, so two gateways
//! recording answers for one command race safely: the loser re-reads, finds it answered, and
//! records nothing (first answer wins).

use async_trait::async_trait;
use domain::command::enqueue::NodeFacts;
use domain::command::queue::{decide_dispatched, decide_node_answer, QueueEvent, StoredCommand};
pub use domain::command::queue::{NodeAnswer, NodeAnswerOutcome};
use domain::command::SignedCommand;
use domain::quorum::{BatchApproval, BatchId, ScopeHash, ScopeProof};
use events::schema::command_stream;
use events::store::{EventStore, ExpectedVersion, LogStore, LogTx, StoreTx};
use events::NewEvent;
use projections::commands::read::READY_LOOKBACK;
use projections::commands::{command_by_id, ready_nodes_since, runnable_of_node, CommandRow};
use rand_core::CryptoRngCore;

use super::node_facts::node_facts;
use super::CommandQueueError;
use crate::clock::Clock;
use crate::run::{append_and_project, run, At, Command, Decided};

/// The approvals of the batches one fetch has read (a batch's commands all carry its one
/// approval, so a fetch reads each batch once).
type Approvals = std::collections::HashMap<BatchId, Option<BatchApproval>>;

async fn runnable(
    store: &EventStore,
    row: CommandRow,
    approvals: &mut Approvals,
) -> Result<RunnableCommand, CommandQueueError> {
    // The gateway relays what the log holds and the machine judges it: a row whose batch or
    // leaf does not resolve (written around enqueue's checks) goes out with what does resolve,
    // and never holds up the node's other commands.
    let batch_id = row
        .batch_id
        .as_deref()
        .and_then(|b| BatchId::from_slice(b).ok());
    let leaf = row
        .leaf_hash
        .as_deref()
        .and_then(|l| ScopeHash::from_slice(l).ok());
    let (approval, proof) = match batch_id {
        Some(batch_id) => {
            let approval = match approvals.get(&batch_id) {
                Some(known) => known.clone(),
                None => {
                    let read = crate::quorum::batch_view(store, &batch_id)
                        .await?
                        .map(|view| view.approval());
                    approvals.insert(batch_id, read.clone());
                    read
                }
            };
            let proof = match leaf {
                Some(leaf) => crate::quorum::leaf_proof(store, &batch_id, &leaf).await?,
                None => None,
            };
            (approval, proof)
        }
        None => (None, None),
    };
    Ok(RunnableCommand {
        command_id: row.command_id,
        signed: SignedCommand {
            body: row.body,
            signature: row.signature,
            worker_chain: vec![row.worker_certificate],
        },
        approval,
        proof,
        dispatched_before: row.dispatch_count > 0,
    })
}

/// A command ready to send, exactly as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunnableCommand {
    /// Its id.
    pub command_id: String,
    /// The signed body, signature and worker certificate.
    pub signed: SignedCommand,
    /// For a batched command: the batch's approval (its recorded signatures).
    pub approval: Option<BatchApproval>,
    /// For a batched command: the proof of its own leaf, decoded from the stored bytes.
    pub proof: Option<ScopeProof>,
    /// Whether it was dispatched before (a resend after a reconnect).
    pub dispatched_before: bool,
}

/// Every command `node_id` may run now that has no answer yet, oldest first, at most `limit`:
/// queued ones, ones dispatched before without an answer, and held ones whose batch is approved.
pub async fn pending_for_node(
    store: &EventStore,
    node_id: &str,
    limit: u32,
) -> Result<Vec<RunnableCommand>, CommandQueueError> {
    // The rows first, in a transaction of their own; then each batched one's approval and
    // proof through the batch reads (which open theirs: SQLite has one writer connection).
    let rows = {
        let mut tx = store.begin().await?;
        let rows = runnable_of_node(&mut tx, node_id, limit).await;
        let _ = tx.rollback().await;
        rows?
    };
    let mut out = Vec::with_capacity(rows.len());
    let mut approvals = Approvals::new();
    for row in rows {
        out.push(runnable(store, row, &mut approvals).await?);
    }
    Ok(out)
}

/// The nodes with commands that became runnable (enqueued unheld, or released by their batch's
/// approval) at a log position after `after`, and the position to ask from next time. One query
/// a gateway runs on a timer to wake the sessions of those nodes.
///
/// The answer may name a node more than once over calls: it looks back
/// [`projections::commands::read::READY_LOOKBACK`] positions behind `after` for commits that
/// took an earlier position (Postgres), and keeps naming a node while its released commands are
/// undispatched. Waking a session twice is harmless (a session never sends a command twice).
pub async fn ready_since(
    store: &EventStore,
    after: i64,
    limit: u32,
) -> Result<(Vec<String>, i64), CommandQueueError> {
    // New releases advance the cursor; the look-back window behind it only adds wake-ups, so
    // old undispatched commands (an offline node's) never crowd new ones out of `limit`.
    let fresh = ready_nodes_since(store, after, i64::MAX, limit).await?;
    let next = fresh
        .iter()
        .map(|(_, p)| *p)
        .max()
        .unwrap_or(after)
        .max(after);
    let behind =
        ready_nodes_since(store, after.saturating_sub(READY_LOOKBACK), after, limit).await?;
    let mut nodes: Vec<String> = fresh.into_iter().chain(behind).map(|(n, _)| n).collect();
    nodes.sort_unstable();
    nodes.dedup();
    Ok((nodes, next))
}

/// Why a gateway sent a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DispatchCause {
    /// Its first send.
    Ready,
    /// Again after a reconnect's Hello.
    Hello,
}

/// Records `command.dispatched` for each of `command_ids` to be sent to `node_id`, and answers
/// the ids recorded: only those may be sent. A command of another node, or one already answered
/// or cancelled, is skipped; one the node's role or newest live certificate no longer allows is
/// cancelled instead (`domain::command::queue::decide_dispatched`).
pub async fn record_dispatched(
    store: &EventStore,
    clock: &dyn Clock,
    node_id: &str,
    command_ids: &[String],
    cause: DispatchCause,
) -> Result<Vec<String>, CommandQueueError> {
    let cause = match cause {
        DispatchCause::Ready => "ready",
        DispatchCause::Hello => "hello",
    };
    let dispatch = Dispatch {
        node_id,
        command_ids,
        cause,
    };
    run(store, clock, &dispatch).await
}

/// Records a node's answer (`command.result.recorded` or `command.rejected`). An answer for a
/// command of another node, or one already answered, records nothing and answers `false`.
/// An answer for an unknown command (a node cannot make the gateway fail) or a cancelled one
/// records nothing either (`domain::command::queue::decide_node_answer`).
pub async fn record_node_answer(
    store: &EventStore,
    clock: &dyn Clock,
    node_id: &str,
    answer: &NodeAnswer,
) -> Result<bool, CommandQueueError> {
    run(store, clock, &Answer { node_id, answer }).await
}

/// What the log holds of a command, for the queue's deciders.
fn stored(row: &CommandRow) -> StoredCommand {
    StoredCommand {
        node_id: row.node_id.clone(),
        kind: row.kind.clone(),
        status: row.stored_status.clone(),
        answered: row.answered_at_us.is_some(),
    }
}

/// Appends each decided event to its command's stream at the version `rows` were read at.
async fn append_on_commands(
    tx: &mut StoreTx,
    rows: &[&CommandRow],
    events: Vec<QueueEvent>,
    now_us: i64,
) -> Result<(), CommandQueueError> {
    for event in events {
        let row = rows
            .iter()
            .find(|r| r.command_id == event.command_id())
            .ok_or_else(|| CommandQueueError::Corrupt("an event for a command not read".into()))?;
        append_and_project(
            tx,
            &super::projections(),
            &command_stream(&row.command_id),
            ExpectedVersion::Exact(row.stream_version.max(0) as u64),
            &[queue_event(&event, &row.tenant_id, now_us)],
        )
        .await?;
    }
    Ok(())
}

/// A queue event as a log event of `tenant` at `now_us`.
pub(crate) fn queue_event(event: &QueueEvent, tenant: &str, now_us: i64) -> NewEvent {
    let id = events::envelope::new_event_id();
    match event {
        QueueEvent::Enqueued(p) => NewEvent::from_payload(id, tenant, now_us, p),
        QueueEvent::Dispatched(p) => NewEvent::from_payload(id, tenant, now_us, p),
        QueueEvent::ResultRecorded(p) => NewEvent::from_payload(id, tenant, now_us, p),
        QueueEvent::Rejected(p) => NewEvent::from_payload(id, tenant, now_us, p),
        QueueEvent::Cancelled(p) => NewEvent::from_payload(id, tenant, now_us, p),
    }
}

/// Dispatches, as the runner drives them.
struct Dispatch<'a> {
    node_id: &'a str,
    command_ids: &'a [String],
    cause: &'a str,
}

/// What a dispatch reads: each command as stored, and the node as enqueue checks it.
struct DispatchState {
    rows: Vec<(String, Option<CommandRow>)>,
    node: Option<NodeFacts>,
}

#[async_trait]
impl Command for Dispatch<'_> {
    type State = DispatchState;
    type Event = QueueEvent;
    type Outcome = Vec<String>;
    type Answer = Vec<String>;
    type Error = CommandQueueError;

    async fn load(&self, tx: &mut StoreTx, at: &At) -> Result<DispatchState, CommandQueueError> {
        let mut rows = Vec::with_capacity(self.command_ids.len());
        for command_id in self.command_ids {
            rows.push((command_id.clone(), command_by_id(tx, command_id).await?));
        }
        let node = node_facts(tx, self.node_id, at.now_us).await?;
        Ok(DispatchState { rows, node })
    }

    fn decide(&self, state: &DispatchState, _: &At, _: &mut dyn CryptoRngCore) -> Decided<Self> {
        let commands: Vec<(String, Option<StoredCommand>)> = state
            .rows
            .iter()
            .map(|(id, row)| (id.clone(), row.as_ref().map(stored)))
            .collect();
        decide_dispatched(self.node_id, self.cause, state.node.as_ref(), &commands)
            .map_err(|never| match never {})
    }

    async fn append(
        &self,
        tx: &mut StoreTx,
        state: &DispatchState,
        events: Vec<QueueEvent>,
        at: &At,
    ) -> Result<(), CommandQueueError> {
        let rows: Vec<&CommandRow> = state.rows.iter().filter_map(|(_, r)| r.as_ref()).collect();
        append_on_commands(tx, &rows, events, at.now_us).await
    }

    async fn answer(
        &self,
        _: &mut StoreTx,
        _: DispatchState,
        sent: Vec<String>,
        _: &At,
    ) -> Result<Vec<String>, CommandQueueError> {
        Ok(sent)
    }
}

/// A node's answer, as the runner drives it.
struct Answer<'a> {
    node_id: &'a str,
    answer: &'a NodeAnswer,
}

#[async_trait]
impl Command for Answer<'_> {
    type State = Option<CommandRow>;
    type Event = QueueEvent;
    type Outcome = bool;
    type Answer = bool;
    type Error = CommandQueueError;

    async fn load(&self, tx: &mut StoreTx, _: &At) -> Result<Self::State, CommandQueueError> {
        Ok(command_by_id(tx, &self.answer.command_id).await?)
    }

    fn decide(&self, row: &Self::State, _: &At, _: &mut dyn CryptoRngCore) -> Decided<Self> {
        let stored = row.as_ref().map(stored);
        decide_node_answer(self.node_id, self.answer, stored.as_ref())
            .map_err(|never| match never {})
    }

    async fn append(
        &self,
        tx: &mut StoreTx,
        row: &Self::State,
        events: Vec<QueueEvent>,
        at: &At,
    ) -> Result<(), CommandQueueError> {
        let rows: Vec<&CommandRow> = row.iter().collect();
        append_on_commands(tx, &rows, events, at.now_us).await
    }

    async fn answer(
        &self,
        _: &mut StoreTx,
        _: Self::State,
        recorded: bool,
        _: &At,
    ) -> Result<bool, CommandQueueError> {
        Ok(recorded)
    }
}
