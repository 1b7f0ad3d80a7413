//! The singleton work of `bcctl serve` (roles `all` and `api`) run under leadership: each task
//! runs in the one replica holding its leader lock ([`commands::leadership`]), and these lines
//! say so on standard error, at INFO, with the field `task` (`audit-sequencer`, `maintenance`,
//! `batch-expiry`, written `task=audit-sequencer` in the text format): `leadership taken` when this process becomes the task's leader and starts
//! its work, `leadership lost` (with `reason`) when it stops being it (its lock's connection
//! failed, or the process is stopping) and has stopped the work. A replica that is not the
//! leader runs nothing of the task and polls nothing.

use std::future::Future;

use commands::leadership::{run_while_leading, Change};
use events::store::{EventStore, LeaderLock};
use tokio::sync::watch;

use crate::serve::error::ServeError;

/// Spawns `work` under the leadership of `task` on `store`'s database, until `stopped` turns
/// true. `work` is started each time this process takes leadership, with a flag that turns true
/// when it loses it.
pub(crate) fn lead<W, F>(
    store: &EventStore,
    task: &'static str,
    stopped: watch::Receiver<bool>,
    work: W,
) -> Result<(), ServeError>
where
    W: FnMut(watch::Receiver<bool>) -> F + Send + 'static,
    F: Future<Output = ()> + Send + 'static,
{
    let lock = LeaderLock::new(store, task)?;
    tokio::spawn(run_while_leading(lock, stopped, log_change, work));
    Ok(())
}

/// Logs one change of leadership (the contract other tests grep for: see the module doc).
fn log_change(change: Change<'_>) {
    match change {
        Change::Taken { task } => tracing::info!(task = %task, "leadership taken"),
        Change::Lost { task, why } => {
            tracing::info!(task = %task, reason = %why, "leadership lost")
        }
        Change::Failed {
            task,
            error,
            retry_in,
        } => tracing::warn!(
            task = %task,
            error = %error,
            retry_in_ms = retry_in.as_millis() as u64,
            "cannot wait for leadership; trying again"
        ),
    }
}
