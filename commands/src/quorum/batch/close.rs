//! Ending a batch other than by approval: an operator's cancel, and the reconciler that expires
//! pending batches past their end. The rules are `domain::quorum::lifecycle`'s. Either one
//! cancels the batch's commands not yet sent (`command.cancelled`) in the same transaction.

use async_trait::async_trait;
use domain::decision::Refused;
use domain::quorum::{decide_cancel_batch, decide_expire_batch, BatchEvent, BatchId, CancelBatch};
use events::store::{EventStore, ExpectedVersion, LogStore, LogTx, StoreTx};
use projections::quorum::{pending_past_end, BatchRow};
use rand_core::CryptoRngCore;

use crate::clock::Clock;
use crate::command_queue::cancel::cancel_held_commands;
use crate::quorum::batch::append::append_batch_events;
use crate::quorum::batch::view::{require_batch, row_batch_id, standing};
use crate::quorum::error::{QuorumError, QuorumRefusal};
use crate::run::{run, At, Command, Decided};

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
    let cancel = Close {
        batch_id,
        end: End::Cancel(&command),
    };
    run(store, clock, &cancel).await?;
    Ok(())
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
        let expire = Close {
            batch_id: &batch_id,
            end: End::Expire,
        };
        if run(store, clock, &expire).await? {
            expired.push(batch_id);
        }
    }
    Ok(expired)
}

/// How a batch ends here.
enum End<'a> {
    Cancel(&'a CancelBatch),
    Expire,
}

/// A cancel or an expiry, as the runner drives it: the batch's event, then the cancellation
/// of its commands not yet sent.
struct Close<'a> {
    batch_id: &'a BatchId,
    end: End<'a>,
}

#[async_trait]
impl Command for Close<'_> {
    type State = BatchRow;
    type Event = BatchEvent;
    type Outcome = bool;
    type Answer = bool;
    type Error = QuorumError;

    async fn load(&self, tx: &mut StoreTx, _: &At) -> Result<BatchRow, QuorumError> {
        require_batch(tx, self.batch_id).await
    }

    fn decide(&self, row: &BatchRow, at: &At, _: &mut dyn CryptoRngCore) -> Decided<Self> {
        let standing = standing(row).map_err(Refused::from)?;
        match self.end {
            End::Cancel(command) => decide_cancel_batch(command, &standing)
                .map(|d| d.map_outcome(|()| true))
                .map_err(|r| QuorumError::from(QuorumRefusal::from(r)).into()),
            End::Expire => {
                decide_expire_batch(&standing, at.now_us).map_err(|never| match never {})
            }
        }
    }

    async fn append(
        &self,
        tx: &mut StoreTx,
        row: &BatchRow,
        events: Vec<BatchEvent>,
        at: &At,
    ) -> Result<(), QuorumError> {
        append_batch_events(
            tx,
            self.batch_id,
            ExpectedVersion::Exact(row.stream_version),
            &events,
            &row.tenant_id,
            at.now_us,
        )
        .await?;
        let hex = self.batch_id.to_hex();
        let why = match self.end {
            End::Cancel(command) => format!("batch {hex} was cancelled: {}", command.reason),
            End::Expire => format!("batch {hex} expired before it was approved"),
        };
        cancel_held_commands(tx, self.batch_id.as_bytes(), &why, at.now_us).await?;
        Ok(())
    }

    async fn answer(
        &self,
        _: &mut StoreTx,
        _: BatchRow,
        ended: bool,
        _: &At,
    ) -> Result<bool, QuorumError> {
        Ok(ended)
    }
}
