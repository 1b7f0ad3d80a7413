//! Renewals the edge refused at the TLS handshake (a revoked or expired node certificate),
//! recorded as `security.renew.refused` events (issue 40) through
//! [`commands::identity::EdgeRefusals`], which decides what each event says and bounds how many
//! are written.
//!
//! The client verifier runs inside rustls, synchronously, and must never wait on the store: it
//! hands each refusal (its reason and the presented leaf) to a queue of [`QUEUE`] places
//! ([`EdgeRefusalSink::refused`], never blocking) and one task ([`run_recorder`]) records them
//! one at a time, so refused handshakes cost the store at most one transaction at a time, and
//! none once the minute's bound per reason is known to be reached. A refusal that finds the
//! queue full is counted, and those counts are handed to the recorder's budget as suppressed
//! refusals every [`FLUSH_EVERY`] and when the task ends, then written with the other
//! suppressed counts: the log's count loses none. Counted by outcome on `/metrics`
//! (`bc_renew_edge_refusals_total`).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use commands::identity::EdgeRefusals;
use domain::identity::EdgeRenewRefusal;
use tokio::sync::mpsc;

use crate::trust::reports::WarnLimiter;

/// Refusals waiting for the recorder.
pub const QUEUE: usize = 64;

/// How often the recorder hands the queue-full counts over and writes the suppressed counts of
/// finished minutes.
pub const FLUSH_EVERY: Duration = Duration::from_secs(60);

/// What became of the handshake refusals handed to the recorder.
#[derive(Debug, Default)]
pub struct EdgeRefusalCounters {
    /// Written as a `security.renew.refused` event.
    pub recorded: AtomicU64,
    /// Counted as suppressed (over the minute's bound), written later as a count.
    pub suppressed: AtomicU64,
    /// Not queued (the queue was full): counted as suppressed at the next flush.
    pub queue_full: AtomicU64,
    /// Not recorded: the store failed (logged, at most a line per 10 s).
    pub error: AtomicU64,
}

impl EdgeRefusalCounters {
    /// Writes these counters in the Prometheus text format.
    pub fn render(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "# HELP bc_renew_edge_refusals_total Renewals refused at the TLS handshake (revoked or expired certificate), by what became of their security.renew.refused event: recorded, suppressed (counted under the per-minute bound), queue-full (counted as suppressed), error."
        );
        let _ = writeln!(out, "# TYPE bc_renew_edge_refusals_total counter");
        for (outcome, counter) in [
            ("error", &self.error),
            ("queue-full", &self.queue_full),
            ("recorded", &self.recorded),
            ("suppressed", &self.suppressed),
        ] {
            let _ = writeln!(
                out,
                "bc_renew_edge_refusals_total{{outcome=\"{outcome}\"}} {}",
                counter.load(Ordering::Relaxed)
            );
        }
    }
}

/// Refusals of each reason that found the queue full, not handed over yet.
#[derive(Debug, Default)]
struct Unqueued {
    revoked: AtomicU64,
    expired: AtomicU64,
}

impl Unqueued {
    fn of(&self, why: EdgeRenewRefusal) -> &AtomicU64 {
        match why {
            EdgeRenewRefusal::Revoked => &self.revoked,
            EdgeRenewRefusal::Expired => &self.expired,
        }
    }
}

/// Where the client verifier hands its refusals (cheap to clone).
#[derive(Debug, Clone)]
pub struct EdgeRefusalSink {
    tx: mpsc::Sender<(EdgeRenewRefusal, Vec<u8>)>,
    unqueued: Arc<Unqueued>,
    counters: Arc<EdgeRefusalCounters>,
}

impl EdgeRefusalSink {
    /// Hands the refusal `why` of the presented `leaf_der` to the recorder, never waiting.
    pub fn refused(&self, why: EdgeRenewRefusal, leaf_der: &[u8]) {
        if self.tx.try_send((why, leaf_der.to_vec())).is_err() {
            self.unqueued.of(why).fetch_add(1, Ordering::Relaxed);
            self.counters.queue_full.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A sink and the recorder task's future: run it (spawned) for as long as the edge serves.
pub fn recorder(
    refusals: EdgeRefusals,
    counters: Arc<EdgeRefusalCounters>,
) -> (
    EdgeRefusalSink,
    impl std::future::Future<Output = ()> + Send + 'static,
) {
    let (tx, rx) = mpsc::channel(QUEUE);
    let unqueued = Arc::new(Unqueued::default());
    let sink = EdgeRefusalSink {
        tx,
        unqueued: unqueued.clone(),
        counters: counters.clone(),
    };
    (sink, run_recorder(rx, unqueued, refusals, counters))
}

/// Records what the sink hands over, one refusal at a time, and flushes every
/// [`FLUSH_EVERY`]; when every sink is gone, flushes once more and ends.
async fn run_recorder(
    mut rx: mpsc::Receiver<(EdgeRenewRefusal, Vec<u8>)>,
    unqueued: Arc<Unqueued>,
    refusals: EdgeRefusals,
    counters: Arc<EdgeRefusalCounters>,
) {
    let warn = WarnLimiter::new(Duration::from_secs(10));
    let mut tick = tokio::time::interval(FLUSH_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            next = rx.recv() => {
                let Some((why, leaf)) = next else { break };
                let counter = match refusals.record(why, &leaf).await {
                    Ok(true) => &counters.recorded,
                    Ok(false) => &counters.suppressed,
                    Err(e) => {
                        if let Some(suppressed) = warn.check(Instant::now()) {
                            tracing::warn!(error = %e, suppressed_since_last_warning = suppressed, "a renewal refused at the handshake could not be recorded");
                        }
                        &counters.error
                    }
                };
                counter.fetch_add(1, Ordering::Relaxed);
            }
            _ = tick.tick() => flush(&unqueued, &refusals, false).await,
        }
    }
    flush(&unqueued, &refusals, true).await;
}

/// Hands the queue-full counts to the budget, then writes the suppressed counts of finished
/// minutes (every minute's when `all`, as the edge stops).
async fn flush(unqueued: &Unqueued, refusals: &EdgeRefusals, all: bool) {
    for why in [EdgeRenewRefusal::Revoked, EdgeRenewRefusal::Expired] {
        refusals.count_unrecorded(why, unqueued.of(why).swap(0, Ordering::Relaxed));
    }
    let maintenance = refusals.maintenance();
    let written = if all {
        maintenance.flush_all_suppressed_refusals().await
    } else {
        maintenance.flush_suppressed_refusals().await
    };
    if let Err(e) = written {
        tracing::warn!(error = %e, "the suppressed counts of renewals refused at the handshake could not be written; kept for the next flush");
    }
}
