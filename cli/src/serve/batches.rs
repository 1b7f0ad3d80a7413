//! The batch expiry reconciler `bcctl serve` runs (roles `all` and `api`): every
//! `batch_expiry_interval` (default 60 s) a pending batch past its end is recorded `expired`
//! (`commands::quorum::expire_due_batches`), which cancels its held commands in the same
//! transaction. It runs in the one replica that leads the `batch-expiry` task
//! ([`crate::serve::leader`]); the others run nothing of it. Two replicas that both believe they
//! lead for a moment stay correct: each expiry is one transaction at the batch stream's exact
//! version, so two racing expire a batch once.

use std::sync::Arc;
use std::time::Duration;

use commands::quorum::expire_due_batches;
use commands::Clock;
use events::store::EventStore;

use crate::serve::error::ServeError;

/// Batches expired per round at most (the rest wait for the next round).
pub const EXPIRY_BATCH: u32 = 500;

/// Starts the reconciler as a background task under leadership, stopped when `stopped` turns
/// true.
pub fn start_batch_expiry(
    store: EventStore,
    clock: Arc<dyn Clock>,
    interval: Duration,
    stopped: tokio::sync::watch::Receiver<bool>,
) -> Result<(), ServeError> {
    let on = store.clone();
    crate::serve::leader::lead(
        &on,
        commands::leadership::BATCH_EXPIRY,
        stopped,
        move |leading| expire_while(store.clone(), clock.clone(), interval, leading),
    )
}

/// Expires due batches every `interval` (the first round at once) until `stopped` turns true.
async fn expire_while(
    store: EventStore,
    clock: Arc<dyn Clock>,
    interval: Duration,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) {
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
}
