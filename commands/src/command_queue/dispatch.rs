//! What a gateway reads and records for a node's session: its runnable commands, which nodes
//! have newly runnable ones, dispatches, and the node's answers.
//!
//! Dispatches and answers append at the command stream's exact version read, so two gateways
//! recording answers for one command race safely: the loser re-reads, finds it answered, and
//! records nothing (first answer wins).

use domain::command::SignedCommand;
use domain::quorum::{BatchApproval, BatchId, ScopeHash, ScopeProof};
use events::schema::{command_stream, CommandDispatched, CommandRejected, CommandResultRecorded};
use events::store::{EventStore, ExpectedVersion, LogStore, LogTx};
use events::NewEvent;
use projections::commands::read::READY_LOOKBACK;
use projections::commands::{command_by_id, ready_nodes_since, runnable_of_node, CommandRow};

use super::CommandQueueError;
use crate::clock::Clock;
use crate::run::append_and_project;

/// The statuses of a command that was answered or will never be sent.
const FINAL: [&str; 4] = ["succeeded", "failed", "rejected", "cancelled"];

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

/// Records `command.dispatched` for each of `command_ids` sent to `node_id`.
/// A command of another node, or one already answered or cancelled, is skipped.
pub async fn record_dispatched(
    store: &EventStore,
    clock: &dyn Clock,
    node_id: &str,
    command_ids: &[String],
    cause: DispatchCause,
) -> Result<(), CommandQueueError> {
    let cause = match cause {
        DispatchCause::Ready => "ready",
        DispatchCause::Hello => "hello",
    };
    crate::transaction!(store, CommandQueueError, |tx| {
        let now_us = clock.now_us();
        for command_id in command_ids {
            let Some(row) = command_by_id(tx, command_id).await? else {
                continue;
            };
            if row.node_id != node_id || FINAL.contains(&row.stored_status.as_str()) {
                continue;
            }
            let event = CommandDispatched {
                command_id: command_id.clone(),
                node_id: node_id.to_string(),
                cause: cause.to_string(),
            };
            append_and_project(
                tx,
                &super::projections(),
                &command_stream(command_id),
                ExpectedVersion::Exact(row.stream_version.max(0) as u64),
                &[NewEvent::from_payload(
                    events::envelope::new_event_id(),
                    row.tenant_id.as_str(),
                    now_us,
                    &event,
                )],
            )
            .await?;
        }
        Ok(())
    })
}

/// What a node answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeAnswerOutcome {
    /// It ran and succeeded.
    Succeeded,
    /// It ran and failed.
    Failed,
    /// It refused before running anything; the reason is the wire enum's name
    /// (`BATCH_UNAPPROVED`).
    Rejected {
        /// `CommandRejectReason` name.
        reason: String,
    },
}

/// A node's `CommandResult`, as the gateway decoded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeAnswer {
    /// The command.
    pub command_id: String,
    /// What happened.
    pub outcome: NodeAnswerOutcome,
    /// The node's words.
    pub detail: String,
    /// The program's exit status.
    pub exit_code: Option<i32>,
    /// The output's tail (at most 4 KiB kept).
    pub output_tail: Vec<u8>,
    /// Node clock, Unix ms.
    pub started_at_ms: i64,
    /// Node clock, Unix ms.
    pub finished_at_ms: i64,
}

/// Records a node's answer (`command.result.recorded` or `command.rejected`). An answer for a
/// command of another node, or one already answered, records nothing and answers `false`.
/// An answer for an unknown command (a node cannot make the gateway fail) or a cancelled one
/// records nothing either.
pub async fn record_node_answer(
    store: &EventStore,
    clock: &dyn Clock,
    node_id: &str,
    answer: &NodeAnswer,
) -> Result<bool, CommandQueueError> {
    crate::transaction!(store, CommandQueueError, |tx| {
        let now_us = clock.now_us();
        let Some(row) = command_by_id(tx, &answer.command_id).await? else {
            return Ok(false);
        };
        if row.node_id != node_id
            || row.answered_at_us.is_some()
            || row.stored_status == "cancelled"
        {
            return Ok(false);
        }
        let id = events::envelope::new_event_id();
        let tenant = row.tenant_id.as_str();
        let event = match &answer.outcome {
            NodeAnswerOutcome::Rejected { reason } => NewEvent::from_payload(
                id,
                tenant,
                now_us,
                &CommandRejected {
                    command_id: answer.command_id.clone(),
                    node_id: node_id.to_string(),
                    reason: reason.clone(),
                    detail: answer.detail.clone(),
                },
            ),
            outcome => NewEvent::from_payload(
                id,
                tenant,
                now_us,
                &CommandResultRecorded {
                    command_id: answer.command_id.clone(),
                    node_id: node_id.to_string(),
                    outcome: if *outcome == NodeAnswerOutcome::Succeeded {
                        "succeeded"
                    } else {
                        "failed"
                    }
                    .to_string(),
                    has_exit_code: answer.exit_code.is_some(),
                    exit_code: answer.exit_code.unwrap_or_default(),
                    output_tail: answer.output_tail
                        [answer.output_tail.len().saturating_sub(OUTPUT_TAIL_MAX)..]
                        .to_vec(),
                    detail: answer.detail.clone(),
                    started_at_ms: answer.started_at_ms,
                    finished_at_ms: answer.finished_at_ms,
                },
            ),
        };
        append_and_project(
            tx,
            &super::projections(),
            &command_stream(&answer.command_id),
            ExpectedVersion::Exact(row.stream_version.max(0) as u64),
            &[event],
        )
        .await?;
        Ok(true)
    })
}

use projections::commands::OUTPUT_TAIL_MAX;
