//! Creating a batch. Creation appends with "no stream", so two creates with one idempotency key
//! race safely: the loser re-reads and finds a retry (same request) or a CONFLICT (another
//! request).
//!
//! A new batch's subjects must each name a machine of the batch's own tenant
//! (`domain::quorum::check_batch_subjects`): NOT_FOUND for an unknown node or another tenant's,
//! INVALID_INPUT for a subject that names no machine.

use std::collections::BTreeMap;

use domain::quorum::{
    check_batch_subjects, decide_batch_creation, subject_nodes, BatchId, CreateBatch, CreatedBatch,
    ExistingBatch, RequestDigest,
};
use events::store::{EventStore, ExpectedVersion};
use projections::commands::tenants_of_nodes;
use projections::quorum::read_batch;

use crate::clock::Clock;
use crate::quorum::batch::append::append_batch_events;
use crate::quorum::batch::view::load_view;
use crate::quorum::bundle::load::current_set;
use crate::quorum::error::{corrupt, QuorumError, QuorumRefusal};

/// Creates a batch (or answers the retry of the request that created it).
pub async fn create_batch(
    store: &EventStore,
    clock: &dyn Clock,
    command: &CreateBatch,
) -> Result<CreatedBatch, QuorumError> {
    let batch_id = BatchId::derive(&command.tenant, &command.caller, &command.idempotency_key)
        .map_err(|e| QuorumRefusal::Batch(e.into()))?;
    crate::transaction!(store, QuorumError, |tx| {
        let now_us = clock.now_us();
        let existing = match read_batch(tx, batch_id.as_bytes()).await? {
            Some(row) => {
                let digest = RequestDigest::from_slice(&row.request_digest)
                    .map_err(|e| corrupt("request_digest", e))?;
                Some((digest, load_view(tx, row).await?.state))
            }
            None => None,
        };
        let held = current_set(tx).await?;
        let decision = decide_batch_creation(
            command,
            existing
                .as_ref()
                .map(|(request_digest, state)| ExistingBatch {
                    request_digest,
                    state,
                }),
            &held,
            now_us,
        )
        .map_err(QuorumRefusal::Batch)?;
        if !decision.events.is_empty() {
            // A new batch (a retry appends nothing): the request is otherwise valid, now its
            // subjects must name machines of its own tenant.
            let nodes = subject_nodes(&command.leaves).map_err(QuorumRefusal::Batch)?;
            let tenants: BTreeMap<String, String> =
                tenants_of_nodes(tx, &nodes).await?.into_iter().collect();
            check_batch_subjects(&command.leaves, &command.tenant, &tenants)
                .map_err(QuorumRefusal::Batch)?;
        }
        append_batch_events(
            tx,
            &batch_id,
            ExpectedVersion::NoStream,
            &decision.events,
            &command.tenant,
            now_us,
        )
        .await?;
        Ok(decision.outcome)
    })
}
