//! The batch expiry reconciler `bcctl serve` runs (roles `all` and `api`): every
//! `batch_expiry_interval` (default 60 s) a pending batch past its end is recorded `expired`
//! (`commands::quorum::expire_due_batches`), which cancels its held commands in the same
//! transaction. Every replica may run it: each expiry is one transaction at the batch stream's
//! exact version, so two replicas racing expire a batch once.

use std::sync::Arc;
use std::time::Duration;

use commands::quorum::expire_due_batches;
use commands::Clock;
use events::store::EventStore;

/// Batches expired per round at most (the rest wait for the next round).
pub const EXPIRY_BATCH: u32 = 500;

/// Starts the reconciler as a background task, stopped when `stopped` turns true.
pub fn start_batch_expiry(
    store: EventStore,
    clock: Arc<dyn Clock>,
    interval: Duration,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stopped.changed() => return,
            }
            if *stopped.borrow() {
                return;
            }
            match expire_due_batches(&store, clock.as_ref(), EXPIRY_BATCH).await {
                Ok(expired) if expired.is_empty() => {}
                Ok(expired) => tracing::info!(
                    expired = expired.len(),
                    first = %expired[0],
                    "pending batches past their end expired; their held commands cancelled"
                ),
                Err(e) => {
                    tracing::warn!(error = %e, "batch expiry failed; tried again next round")
                }
            }
        }
    });
}
