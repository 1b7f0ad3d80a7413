//! Running singleton work only while this process leads it: [`run_while_leading`].
//!
//! Among any number of replicas on one database, the work of a task (the audit sequencer with
//! the sealer, identity maintenance, the batch expiry reconciler) runs in the one process that
//! holds the task's leader lock ([`events::store::leader`]). The others wait for the lock and
//! run nothing and poll nothing; when the leader dies its lock goes with its session and one of
//! them takes over. A leader that loses its lock (its connection failed a check) stops the
//! work and waits for the lock again like any follower.
//!
//! The work is a loop stopped by a `watch` flag, as every background loop of the serving
//! process already is: it is started when leadership is taken and told to stop when it is
//! lost, with [`STOP_GRACE`] to finish the step it is in before it is dropped.

use std::future::Future;
use std::time::Duration;

use events::store::{LeaderError, LeaderLock};
use tokio::sync::watch;

/// The audit sequencer and the sealer (sealing must be single too).
pub const AUDIT_SEQUENCER: &str = "audit-sequencer";
/// The log-wide identity housekeeping: expired evidence pruned, join requests expired.
pub const MAINTENANCE: &str = "maintenance";
/// The batch expiry reconciler.
pub const BATCH_EXPIRY: &str = "batch-expiry";

/// How long stopped work may take to finish its step before it is dropped.
pub const STOP_GRACE: Duration = Duration::from_secs(5);

/// The first pause after the lock could not be waited for (the database unreachable): doubled
/// after each failure up to [`MAX_RETRY_PAUSE`], back to this once leadership is taken.
pub const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// The longest pause between two tries to wait for the lock.
pub const MAX_RETRY_PAUSE: Duration = Duration::from_secs(10);

/// What [`run_while_leading`] tells its caller (the serving process logs each).
#[derive(Debug)]
pub enum Change<'a> {
    /// This process leads the task from now on; its work is started.
    Taken { task: &'a str },
    /// This process no longer leads the task; its work is stopped.
    Lost { task: &'a str, why: String },
    /// The lock could not be waited for; tried again after `retry_in`.
    Failed {
        task: &'a str,
        error: &'a LeaderError,
        retry_in: Duration,
    },
}

/// Runs `work` while this process holds `lock`, until `shutdown` turns true (or its sender is
/// dropped). Each time leadership is taken, `work` is called with a flag that turns true when
/// it is lost (or the process stops); the future it returns is awaited for at most
/// [`STOP_GRACE`] after that, then dropped. Work that ends by itself gives leadership up (after
/// [`RETRY_PAUSE`] it is waited for again). Every change goes to `report`.
pub async fn run_while_leading<W, F>(
    lock: LeaderLock,
    mut shutdown: watch::Receiver<bool>,
    mut report: impl FnMut(Change<'_>) + Send,
    mut work: W,
) where
    W: FnMut(watch::Receiver<bool>) -> F + Send,
    F: Future<Output = ()> + Send,
{
    let task = lock.task().to_string();
    let mut pause = RETRY_PAUSE;
    loop {
        if *shutdown.borrow() {
            return;
        }
        // The stop first: a lock freed by another replica's stop must not start the work here.
        let acquired = tokio::select! {
            biased;
            r = shutdown.changed() => {
                if r.is_err() { return }
                continue;
            }
            r = lock.acquire() => r,
        };
        let mut leading = match acquired {
            Ok(leading) => leading,
            Err(error) => {
                report(Change::Failed {
                    task: &task,
                    error: &error,
                    retry_in: pause,
                });
                if !wait_or_stop(pause, &mut shutdown).await {
                    return;
                }
                pause = (pause * 2).min(MAX_RETRY_PAUSE);
                continue;
            }
        };
        if *shutdown.borrow() {
            // The lock came with the stop (both ready at once): given back, the work not started.
            leading.release().await;
            return;
        }
        pause = RETRY_PAUSE;
        report(Change::Taken { task: &task });
        let (stop, stopped) = watch::channel(false);
        let running = work(stopped);
        tokio::pin!(running);
        let (why, finished, stopping) = tokio::select! {
            e = leading.lost() => (e.to_string(), false, false),
            _ = until_true(&mut shutdown) => ("this process is stopping".to_string(), false, true),
            _ = &mut running => ("its work ended by itself".to_string(), true, false),
        };
        let _ = stop.send(true);
        if !finished {
            let _ = tokio::time::timeout(STOP_GRACE, &mut running).await;
        }
        leading.release().await;
        report(Change::Lost { task: &task, why });
        if stopping || (finished && !wait_or_stop(RETRY_PAUSE, &mut shutdown).await) {
            return;
        }
    }
}

/// Resolves once `flag` is true or its sender is gone.
async fn until_true(flag: &mut watch::Receiver<bool>) {
    while !*flag.borrow_and_update() {
        if flag.changed().await.is_err() {
            return;
        }
    }
}

/// Sleeps `pause`; false when `shutdown` turned true (or was dropped) meanwhile.
async fn wait_or_stop(pause: Duration, shutdown: &mut watch::Receiver<bool>) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(pause) => !*shutdown.borrow(),
        _ = until_true(shutdown) => false,
    }
}
