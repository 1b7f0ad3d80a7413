//! Recording the bcd version and boot id a node's session reports in its Hello
//! (`node.runtime.reported`, decision 0105), off the session path.
//!
//! A session hands its first Hello's values to [`RuntimeReporter`], which queues them for one
//! worker; the worker runs [`commands::identity::runtime::report_node_runtime`], which writes an
//! event only when the values differ from the node's row, so a reconnect with the same bcd
//! and boot writes nothing. A session queues at most one report (its first Hello: bcd sends one
//! per session); a value over the join's bounds, or a boot id that is not a UUID, is dropped
//! at the session with a DEBUG line and never queued. A full queue drops the report and counts it, with one
//! WARN line per [`crate::trust::reports::WARN_EVERY`]: the node's next session reports again.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use commands::identity::runtime::{report_node_runtime, RuntimeReport, RuntimeReportError};
use commands::Clock;
use events::store::EventStore;
use tokio::sync::mpsc;

use crate::trust::reports::{Queued, WarnLimiter, QUEUE_CAPACITY, WARN_EVERY};

/// Counters of the runtime reports.
#[derive(Debug, Default)]
pub struct RuntimeCounters {
    /// Reports queued for the worker.
    pub queued: AtomicU64,
    /// Reports dropped at the session: over a bound or not a UUID.
    pub malformed: AtomicU64,
    /// Reports dropped because the queue was full.
    pub dropped: AtomicU64,
}

/// Appends the runtime reports sessions hand it, off the session path: one worker, in order.
#[derive(Clone)]
pub struct RuntimeReporter {
    tx: Option<mpsc::Sender<RuntimeReport>>,
    warn: Arc<WarnLimiter>,
    /// What this reporter did with the reports handed to it.
    pub counters: Arc<RuntimeCounters>,
}

impl RuntimeReporter {
    /// A reporter that records nothing (recording disabled by configuration).
    pub fn disabled() -> Self {
        RuntimeReporter {
            tx: None,
            warn: Arc::new(WarnLimiter::new(WARN_EVERY)),
            counters: Arc::default(),
        }
    }

    /// Starts the worker task on the current runtime.
    pub fn start(store: EventStore, clock: Arc<dyn Clock>) -> Self {
        let (tx, mut rx) = mpsc::channel::<RuntimeReport>(QUEUE_CAPACITY);
        tokio::spawn(async move {
            while let Some(report) = rx.recv().await {
                match report_node_runtime(&store, clock.as_ref(), &report).await {
                    Ok(_) => {}
                    Err(RuntimeReportError::Refused(why)) => {
                        tracing::info!(node = %report.node_id, refusal = why.label(), reason = %why, "a session's bcd version and boot id were not recorded");
                    }
                    Err(e) => {
                        tracing::warn!(node = %report.node_id, error = %e, "recording a node's bcd version and boot id failed");
                    }
                }
            }
        });
        RuntimeReporter {
            tx: Some(tx),
            warn: Arc::new(WarnLimiter::new(WARN_EVERY)),
            counters: Arc::default(),
        }
    }

    /// Hands a Hello's values over: checked against the bounds here, queued for the worker.
    pub fn report(&self, tenant_id: &str, node_id: &str, hello: &proto::Hello) -> Queued {
        let Some(tx) = &self.tx else {
            return Queued::Disabled;
        };
        if hello.agent_version.is_empty() && hello.boot_id.is_empty() {
            return Queued::Disabled;
        }
        if let Err(why) =
            domain::identity::runtime_report::check_runtime(&hello.agent_version, &hello.boot_id)
        {
            self.counters.malformed.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(
                node = node_id,
                refusal = why.label(),
                "a Hello's bcd version or boot id is not recorded"
            );
            return Queued::Disabled;
        }
        let report = RuntimeReport {
            tenant_id: tenant_id.to_owned(),
            node_id: node_id.to_owned(),
            agent_version: hello.agent_version.clone(),
            boot_id: hello.boot_id.clone(),
        };
        match tx.try_send(report) {
            Ok(()) => {
                self.counters.queued.fetch_add(1, Ordering::Relaxed);
                Queued::Queued
            }
            Err(e) => {
                self.counters.dropped.fetch_add(1, Ordering::Relaxed);
                let warned = match self.warn.check(Instant::now()) {
                    Some(suppressed) => {
                        tracing::warn!(error = %e, suppressed_since_last_warning = suppressed, "runtime report queue full; reports dropped");
                        true
                    }
                    None => false,
                };
                Queued::Dropped { warned }
            }
        }
    }
}
