//! Creating a batch. Creation appends with "no stream", so two creates with one idempotency key
//! race safely: the loser re-reads and finds a retry (same request) or a CONFLICT (another
//! request).
//!
//! A new batch's subjects must each name a machine of the batch's own tenant (decided by
//! `domain::quorum::decide_batch_creation` on the tenants of the subjects' nodes this handler
//! loads): NOT_FOUND for an unknown node or another tenant's, INVALID_INPUT for a subject that
//! names no machine.

use std::collections::BTreeMap;

use async_trait::async_trait;
use domain::quorum::{
    decide_batch_creation, subject_node, BatchApprovalState, BatchEvent, BatchId, CreateBatch,
    CreatedBatch, ExistingBatch, HeldApproverSet, RequestDigest,
};
use events::store::{EventStore, ExpectedVersion, StoreTx};
use projections::commands::tenants_of_nodes;
use projections::quorum::read_batch;
use rand_core::CryptoRngCore;

use crate::clock::Clock;
use crate::quorum::batch::append::append_batch_events;
use crate::quorum::batch::view::load_view;
use crate::quorum::bundle::load::current_set;
use crate::quorum::error::{corrupt, QuorumError, QuorumRefusal};
use crate::run::{run, At, Command, Decided};

/// Creates a batch (or answers the retry of the request that created it).
pub async fn create_batch(
    store: &EventStore,
    clock: &dyn Clock,
    command: &CreateBatch,
) -> Result<CreatedBatch, QuorumError> {
    let batch_id = BatchId::derive(&command.tenant, &command.caller, &command.idempotency_key)
        .map_err(|e| QuorumRefusal::Batch(e.into()))?;
    run(store, clock, &Create { batch_id, command }).await
}

/// A create, as the runner drives it.
struct Create<'a> {
    batch_id: BatchId,
    command: &'a CreateBatch,
}

/// What a create reads: the batch stored under the derived id, the published set, and the
/// tenant of every node the subjects name.
struct Loaded {
    existing: Option<(RequestDigest, BatchApprovalState)>,
    held: HeldApproverSet,
    subject_tenants: BTreeMap<String, String>,
}

#[async_trait]
impl Command for Create<'_> {
    type State = Loaded;
    type Event = BatchEvent;
    type Outcome = CreatedBatch;
    type Answer = CreatedBatch;
    type Error = QuorumError;

    async fn load(&self, tx: &mut StoreTx, _: &At) -> Result<Loaded, QuorumError> {
        let existing = match read_batch(tx, self.batch_id.as_bytes()).await? {
            Some(row) => {
                let digest = RequestDigest::from_slice(&row.request_digest)
                    .map_err(|e| corrupt("request_digest", e))?;
                Some((digest, load_view(tx, row).await?.state))
            }
            None => None,
        };
        let held = current_set(tx).await?;
        // Only a new batch's subjects are checked (a retry answers the stored batch).
        let mut subject_tenants = BTreeMap::new();
        if existing.is_none() {
            let nodes: Vec<String> = self
                .command
                .leaves
                .iter()
                .filter_map(|leaf| subject_node(&leaf.subject).map(str::to_string))
                .collect();
            subject_tenants.extend(tenants_of_nodes(tx, &nodes).await?);
        }
        Ok(Loaded {
            existing,
            held,
            subject_tenants,
        })
    }

    fn decide(&self, loaded: &Loaded, at: &At, _: &mut dyn CryptoRngCore) -> Decided<Self> {
        let existing = loaded
            .existing
            .as_ref()
            .map(|(request_digest, state)| ExistingBatch {
                request_digest,
                state,
            });
        decide_batch_creation(
            self.command,
            existing,
            &loaded.held,
            &loaded.subject_tenants,
            at.now_us,
        )
        .map_err(|r| QuorumError::from(QuorumRefusal::Batch(r)).into())
    }

    async fn append(
        &self,
        tx: &mut StoreTx,
        _: &Loaded,
        events: Vec<BatchEvent>,
        at: &At,
    ) -> Result<(), QuorumError> {
        append_batch_events(
            tx,
            &self.batch_id,
            ExpectedVersion::NoStream,
            &events,
            &self.command.tenant,
            at.now_us,
        )
        .await
    }

    async fn answer(
        &self,
        _: &mut StoreTx,
        _: Loaded,
        created: CreatedBatch,
        _: &At,
    ) -> Result<CreatedBatch, QuorumError> {
        Ok(created)
    }
}
