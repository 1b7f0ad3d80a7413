//! Writing the domain's [`BatchEvent`]s on a batch's stream and applying the projections.

use domain::quorum::{BatchEvent, BatchId};
use events::store::{ExpectedVersion, StoreTx};
use events::NewEvent;

use crate::quorum::error::QuorumError;
use crate::quorum::stream::{batch_stream, new_event_id};
use crate::quorum::tables::projections;
use crate::run::append_and_project;

/// One decided batch event as the log stores it, under a fresh id, in `tenant` at `now_us`.
pub(crate) fn batch_new_event(event: &BatchEvent, tenant: &str, now_us: i64) -> NewEvent {
    let id = new_event_id();
    match event {
        BatchEvent::Created(p) => NewEvent::from_payload(id, tenant, now_us, p),
        BatchEvent::ApprovalRecorded(p) => NewEvent::from_payload(id, tenant, now_us, p),
        BatchEvent::Approved(p) => NewEvent::from_payload(id, tenant, now_us, p),
        BatchEvent::Cancelled(p) => NewEvent::from_payload(id, tenant, now_us, p),
        BatchEvent::Expired(p) => NewEvent::from_payload(id, tenant, now_us, p),
    }
}

/// Appends the decided events (if any) to the batch's stream as events of `tenant` at `now_us`.
pub(crate) async fn append_batch_events(
    tx: &mut StoreTx,
    batch_id: &BatchId,
    expected: ExpectedVersion,
    decided: &[BatchEvent],
    tenant: &str,
    now_us: i64,
) -> Result<(), QuorumError> {
    if decided.is_empty() {
        return Ok(());
    }
    let events: Vec<NewEvent> = decided
        .iter()
        .map(|event| batch_new_event(event, tenant, now_us))
        .collect();
    append_and_project(
        tx,
        &projections(),
        &batch_stream(batch_id),
        expected,
        &events,
    )
    .await?;
    Ok(())
}
