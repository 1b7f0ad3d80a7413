//! Ending a batch other than by approval: an operator's cancel, and the reconciler that expires
//! pending batches past their end. The rules are `domain::quorum::lifecycle`'s. Either one
//! cancels the batch's commands not yet sent (`command.cancelled`) in the same transaction.

use domain::quorum::{decide_cancel_batch, decide_expire_batch, BatchId, CancelBatch};
use events::store::{EventStore, ExpectedVersion, LogStore, LogTx};
use projections::quorum::pending_past_end;

use crate::clock::Clock;
use crate::command_queue::cancel::cancel_held_commands;
use crate::quorum::batch::append::append_batch_events;
use crate::quorum::batch::view::{require_batch, row_batch_id, standing};
use crate::quorum::error::{QuorumError, QuorumRefusal};

/// Cancels a pending or approved batch.
pub async fn cancel_batch(
    store: &EventStore,
    clock: &dyn Clock,
    batch_id: &BatchId,
    reason: &str,
    cancelled_by: &str,
) -> Result<(), QuorumError> {
    let command = CancelBatch {
        reason: reason.to_string(),
        cancelled_by: cancelled_by.to_string(),
    };
    crate::transaction!(store, QuorumError, |tx| {
        let now_us = clock.now_us();
        let row = require_batch(tx, batch_id).await?;
        let decision =
            decide_cancel_batch(&command, &standing(&row)?).map_err(QuorumRefusal::from)?;
        append_batch_events(
            tx,
            batch_id,
            ExpectedVersion::Exact(row.stream_version),
            &decision.events,
            &row.tenant_id,
            now_us,
        )
        .await?;
        if !decision.events.is_empty() {
            let why = format!("batch {} was cancelled: {reason}", batch_id.to_hex());
            cancel_held_commands(tx, batch_id.as_bytes(), &why, now_us).await?;
        }
        Ok(())
    })
}

/// The reconciler: records `batch.expired` for pending batches past their end (at most `limit`
/// per call). Each batch commits on its own, so an approval racing it is re-read, not lost.
pub async fn expire_due_batches(
    store: &EventStore,
    clock: &dyn Clock,
    limit: u32,
) -> Result<Vec<BatchId>, QuorumError> {
    let due = {
        let mut tx = store.begin().await?;
        let rows = pending_past_end(&mut tx, clock.now_us(), limit).await;
        let _ = tx.rollback().await;
        rows?
    };
    let mut expired = Vec::new();
    for row in due {
        let batch_id = row_batch_id(&row)?;
        let done = crate::transaction!(store, QuorumError, |tx| {
            let now_us = clock.now_us();
            let row = require_batch(tx, &batch_id).await?;
            let decision = decide_expire_batch(&standing(&row)?, now_us);
            append_batch_events(
                tx,
                &batch_id,
                ExpectedVersion::Exact(row.stream_version),
                &decision.events,
                &row.tenant_id,
                now_us,
            )
            .await?;
            if decision.outcome {
                let why = format!("batch {} expired before it was approved", batch_id.to_hex());
                cancel_held_commands(tx, batch_id.as_bytes(), &why, now_us).await?;
            }
            Ok::<bool, QuorumError>(decision.outcome)
        })?;
        if done {
            expired.push(batch_id);
        }
    }
    Ok(expired)
}
