//! `bcctl command run`: enqueue one signed command. One transaction: load the node, its
//! certificates' allowed kinds, the batch and its scope leaves for (node id, kind), and the
//! published approver set; decide (`domain::command::queue::decide_enqueue`: the queue's rules,
//! the body signed with the worker key passed in, the event); append `command.enqueued` on
//! `command/<id>` and project it.

use async_trait::async_trait;
use domain::command::enqueue::{BatchFacts, EnqueueCommand, EnqueuePlan, EnqueueState, StoredLeaf};
use domain::command::queue::{decide_enqueue, Enqueue, EnqueueFailure, QueueEvent};
use domain::decision::Refused;
use domain::quorum::{BatchStatus, PayloadDigest, ScopeHash};
use events::schema::command_stream;
use events::store::{EventStore, ExpectedVersion, StoreTx};
use events::NewEvent;
use projections::commands::scope_leaves_for;
use projections::quorum::read_batch;

use super::dispatch::queue_event;
use super::error::{corrupt, CommandQueueError};
use super::node_facts::node_facts;
use super::worker::WorkerSigner;
use crate::clock::Clock;
use crate::quorum::bundle::load::current_set;
use crate::run::{append_and_project, run, At, Command, Decided};
use rand_core::CryptoRngCore;

/// What the operator asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnqueueRequest {
    /// The node.
    pub node_id: String,
    /// The kind (`node.reboot`).
    pub kind: String,
    /// The encoded payload (empty: the kind's empty message).
    pub payload: Vec<u8>,
    /// The batch (64 hex characters parsed), if any.
    pub batch_id: Option<domain::quorum::BatchId>,
    /// Who asks.
    pub caller: String,
    /// How long the command lives, µs (None: 24 hours, or the batch's end).
    pub lifetime_us: Option<i64>,
}

/// What enqueue answers.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct EnqueueAnswer {
    /// The new command's id (`cmd_…`).
    pub command_id: String,
    /// Held until its batch is approved.
    pub held: bool,
    /// Whether the kind is destructive.
    pub destructive: bool,
    /// The batch, hex.
    pub batch_id: Option<String>,
    /// The body's end, µs.
    pub not_after_us: i64,
}

/// A fresh command id: `cmd_` and 32 lower-case hex digits (a v4 UUID).
pub fn new_command_id() -> String {
    format!("cmd_{}", uuid::Uuid::new_v4().simple())
}

async fn batch_facts(
    tx: &mut StoreTx,
    batch_id: &domain::quorum::BatchId,
    node_id: &str,
    kind: &str,
) -> Result<Option<BatchFacts>, CommandQueueError> {
    let Some(row) = read_batch(tx, batch_id.as_bytes()).await? else {
        return Ok(None);
    };
    let status = BatchStatus::parse(&row.status)
        .ok_or_else(|| corrupt("command_batches.status", &row.status))?;
    let mut leaves = Vec::new();
    for leaf in scope_leaves_for(tx, batch_id.as_bytes(), node_id, kind).await? {
        leaves.push(StoredLeaf {
            payload_sha256: match leaf.payload_sha256 {
                Some(d) => {
                    Some(PayloadDigest::from_slice(&d).map_err(|e| corrupt("payload_sha256", e))?)
                }
                None => None,
            },
            leaf_hash: ScopeHash::from_slice(&leaf.leaf_hash)
                .map_err(|e| corrupt("leaf_hash", e))?,
        });
    }
    Ok(Some(BatchFacts {
        tenant_id: row.tenant_id,
        status,
        not_after_us: row.not_after_us,
        required_approvals: row.required_approvals,
        leaves,
    }))
}

/// Enqueues one command: decide (signed with `signer`), append `command.enqueued`.
pub async fn enqueue_command(
    store: &EventStore,
    clock: &dyn Clock,
    signer: &WorkerSigner,
    request: &EnqueueRequest,
) -> Result<EnqueueAnswer, CommandQueueError> {
    signer.ensure_fresh(store, clock).await?;
    let command = EnqueueCommand {
        node_id: request.node_id.clone(),
        kind: request.kind.clone(),
        payload: request.payload.clone(),
        batch_id: request.batch_id,
        lifetime_us: request.lifetime_us,
    };
    let enqueue = EnqueueRun {
        signer,
        request,
        command,
        command_id: new_command_id(),
    };
    run(store, clock, &enqueue).await
}

/// An enqueue, as the runner drives it.
struct EnqueueRun<'a> {
    signer: &'a WorkerSigner,
    request: &'a EnqueueRequest,
    command: EnqueueCommand,
    command_id: String,
}

#[async_trait]
impl Command for EnqueueRun<'_> {
    type State = EnqueueState;
    type Event = QueueEvent;
    type Outcome = EnqueuePlan;
    type Answer = EnqueueAnswer;
    type Error = CommandQueueError;

    async fn load(&self, tx: &mut StoreTx, at: &At) -> Result<EnqueueState, CommandQueueError> {
        let request = self.request;
        let node = node_facts(tx, &request.node_id, at.now_us).await?;
        let held_set = current_set(tx).await?;
        let batch = match &request.batch_id {
            Some(id) => batch_facts(tx, id, &request.node_id, &request.kind).await?,
            None => None,
        };
        Ok(EnqueueState {
            node,
            batch,
            approver_keys_published: !held_set.set.is_empty(),
            unbatched_per_hour: held_set.set.unbatched_per_hour(),
            now_us: at.now_us,
        })
    }

    fn decide(&self, state: &EnqueueState, _: &At, _: &mut dyn CryptoRngCore) -> Decided<Self> {
        let enqueue = Enqueue {
            command: &self.command,
            command_id: &self.command_id,
            caller: &self.request.caller,
        };
        decide_enqueue(&enqueue, state, |body| self.signer.sign_held(body)).map_err(|failure| {
            Refused::from(match failure {
                EnqueueFailure::Refused(refusal) => CommandQueueError::Refused(refusal),
                EnqueueFailure::Signer(e) => CommandQueueError::Worker(e),
            })
        })
    }

    async fn append(
        &self,
        tx: &mut StoreTx,
        _: &EnqueueState,
        events: Vec<QueueEvent>,
        at: &At,
    ) -> Result<(), CommandQueueError> {
        let tenant = match events.first() {
            Some(QueueEvent::Enqueued(e)) => e.tenant_id.clone(),
            _ => {
                return Err(CommandQueueError::Corrupt(
                    "enqueue decided no command".into(),
                ))
            }
        };
        let events: Vec<NewEvent> = events
            .iter()
            .map(|e| queue_event(e, &tenant, at.now_us))
            .collect();
        append_and_project(
            tx,
            &super::projections(),
            &command_stream(&self.command_id),
            ExpectedVersion::NoStream,
            &events,
        )
        .await?;
        Ok(())
    }

    async fn answer(
        &self,
        _: &mut StoreTx,
        _: EnqueueState,
        plan: EnqueuePlan,
        _: &At,
    ) -> Result<EnqueueAnswer, CommandQueueError> {
        Ok(EnqueueAnswer {
            command_id: self.command_id.clone(),
            held: plan.held,
            destructive: plan.destructive,
            batch_id: self.request.batch_id.map(|b| b.to_hex()),
            not_after_us: plan.not_after_us,
        })
    }
}
