//! Recording the trust versions and approver sets nodes report in their sessions
//! (`node.trust.reported`), bounded.
//!
//! A node's session says which trust bundle version and which approver set (epoch and digest) it
//! holds in its Hello and in every StatusReport. The set does not follow from the version: a
//! daemon can take a bundle's version while refusing its quorum part (spec 003 "Nodes that hold
//! another set"). What the log needs is a change of what the projection keeps. [`SessionReports`]
//! keeps, per session, what was last recorded and lets through only a change: the Hello (or the
//! first report), a Hello that reports another version or set, a StatusReport that raises the
//! version, a StatusReport with the same version above 0 and another set (the projection writes
//! the set of such a report; one with a lower version, or version 0, changes nothing there), and
//! the end of the session. A session records at most [`MAX_REPORTS_PER_SESSION`] events in all,
//! the end included; past that, reports are counted and dropped until the node reconnects.
//!
//! Reports are appended off the request path by one worker ([`TrustReporter`]); a full queue
//! drops the report and counts it, with one WARN line per [`WARN_EVERY`] carrying how many were
//! dropped since the last line ([`WarnLimiter`]).

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use commands::quorum::TrustReport;
use commands::Clock;
use events::store::EventStore;
use tokio::sync::mpsc;

/// Most `node.trust.reported` events one session records: the Hello, up to six changes of the
/// trust version, and the end.
pub const MAX_REPORTS_PER_SESSION: u32 = 8;

/// The queue between the sessions and the worker that appends their reports.
pub const QUEUE_CAPACITY: usize = 4096;

/// At most one "queue full" WARN line per this interval.
pub const WARN_EVERY: Duration = Duration::from_secs(10);

/// Rate-limits a warning: one line per interval, the next carrying how many were suppressed.
#[derive(Debug)]
pub struct WarnLimiter {
    every: Duration,
    state: Mutex<(Option<Instant>, u64)>,
}

impl WarnLimiter {
    pub fn new(every: Duration) -> Self {
        WarnLimiter {
            every,
            state: Mutex::new((None, 0)),
        }
    }

    /// Called for every occurrence at `now`: `Some(suppressed)` when a line is due (with how many
    /// occurrences since the last line were not written), `None` when this one is suppressed.
    pub fn check(&self, now: Instant) -> Option<u64> {
        let Ok(mut state) = self.state.lock() else {
            return None;
        };
        let (last, suppressed) = &mut *state;
        let due = last.is_none_or(|at| now.saturating_duration_since(at) >= self.every);
        if due {
            *last = Some(now);
            Some(std::mem::take(suppressed))
        } else {
            *suppressed += 1;
            None
        }
    }
}

/// What became of one report handed to the [`TrustReporter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Queued {
    /// Queued for the worker.
    Queued,
    /// Dropped: the queue was full. `warned` says whether this one wrote the WARN line.
    Dropped { warned: bool },
    /// Recording is disabled.
    Disabled,
}

/// Counters of the reports, for `/metrics`.
#[derive(Debug, Default)]
pub struct ReportCounters {
    /// Reports queued for recording.
    pub queued: AtomicU64,
    /// Reports a session did not record because nothing changed.
    pub unchanged: AtomicU64,
    /// Reports a session did not record because it reached [`MAX_REPORTS_PER_SESSION`].
    pub over_bound: AtomicU64,
    /// Reports dropped because the queue was full.
    pub dropped: AtomicU64,
    /// "Queue full" WARN lines written.
    pub warn_lines: AtomicU64,
}

/// Appends the reports sessions let through, off the request path: one worker task, in order.
#[derive(Clone)]
pub struct TrustReporter {
    tx: Option<mpsc::Sender<TrustReport>>,
    warn: Arc<WarnLimiter>,
}

impl TrustReporter {
    /// A reporter that records nothing (benchmarks, or when disabled by configuration).
    pub fn disabled() -> Self {
        TrustReporter {
            tx: None,
            warn: Arc::new(WarnLimiter::new(WARN_EVERY)),
        }
    }

    /// Starts the worker task on the current runtime.
    pub fn start(store: EventStore, clock: Arc<dyn Clock>) -> Self {
        let (tx, mut rx) = mpsc::channel::<TrustReport>(QUEUE_CAPACITY);
        tokio::spawn(async move {
            while let Some(report) = rx.recv().await {
                if let Err(e) =
                    commands::quorum::report_node_trust(&store, clock.as_ref(), &report).await
                {
                    tracing::warn!(node = %report.node_id, error = %e, "recording a node's trust version failed");
                }
            }
        });
        Self::over(tx)
    }

    /// A reporter feeding `tx` (the worker, or a test holding the receiver).
    pub fn over(tx: mpsc::Sender<TrustReport>) -> Self {
        TrustReporter {
            tx: Some(tx),
            warn: Arc::new(WarnLimiter::new(WARN_EVERY)),
        }
    }

    /// Queues a report; a full queue drops it (the next change carries the same information),
    /// with one WARN line per [`WARN_EVERY`].
    pub fn report(&self, report: TrustReport) -> Queued {
        let Some(tx) = &self.tx else {
            return Queued::Disabled;
        };
        match tx.try_send(report) {
            Ok(()) => Queued::Queued,
            Err(e) => {
                let warned = match self.warn.check(Instant::now()) {
                    Some(suppressed) => {
                        tracing::warn!(error = %e, suppressed_since_last_warning = suppressed, "trust report queue full; reports dropped");
                        true
                    }
                    None => false,
                };
                Queued::Dropped { warned }
            }
        }
    }
}

/// What a node reports holding: its trust version and approver set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Held {
    /// The trust bundle version (0 when none).
    pub trust_version: u64,
    /// The approver set's epoch (0 without keys).
    pub approver_set_epoch: u64,
    /// SHA-256(approverSetInput) of the set (empty without keys).
    pub approver_set_sha256: Vec<u8>,
}

impl Held {
    /// A version with no approver set.
    pub fn version(trust_version: u64) -> Self {
        Held {
            trust_version,
            ..Held::default()
        }
    }

    fn same_set(&self, other: &Held) -> bool {
        self.approver_set_epoch == other.approver_set_epoch
            && self.approver_set_sha256 == other.approver_set_sha256
    }
}

impl From<&proto::Hello> for Held {
    fn from(hello: &proto::Hello) -> Self {
        Held {
            trust_version: hello.trust_version,
            approver_set_epoch: hello.approver_set_epoch,
            approver_set_sha256: hello.approver_set_sha256.clone(),
        }
    }
}

impl From<&proto::StatusReport> for Held {
    fn from(status: &proto::StatusReport) -> Self {
        Held {
            trust_version: status.trust_version,
            approver_set_epoch: status.approver_set_epoch,
            approver_set_sha256: status.approver_set_sha256.clone(),
        }
    }
}

/// What a session message asks to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// A Hello with what the node holds.
    Hello(Held),
    /// A StatusReport with what the node holds.
    Status(Held),
    /// The session ended.
    End,
}

/// A report a session lets through: (`session_start`, `connected`, what the node holds; nothing
/// for the end).
pub type Admitted = (bool, bool, Held);

/// Why a session did not record a report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skipped {
    /// Nothing changed.
    Unchanged,
    /// The session reached [`MAX_REPORTS_PER_SESSION`].
    OverBound,
}

/// One session's record of what it reported (see the module docs).
#[derive(Debug, Default)]
pub struct SessionReports {
    /// What was last recorded in this session.
    last: Option<Held>,
    /// Events recorded in this session.
    recorded: u32,
    /// The end was recorded: nothing more is.
    ended: bool,
}

impl SessionReports {
    /// Whether `seen` is to be recorded, as which (`session_start`, `connected`, held).
    pub fn admit(&mut self, seen: Seen) -> Result<Admitted, Skipped> {
        if self.ended {
            return Err(Skipped::Unchanged);
        }
        let changed = match (&seen, &self.last) {
            (Seen::Hello(h), last) => last.as_ref() != Some(h),
            (Seen::Status(_), None) => true,
            (Seen::Status(h), Some(l)) => {
                h.trust_version > l.trust_version
                    || (h.trust_version > 0 && h.trust_version == l.trust_version && !h.same_set(l))
            }
            // The end is recorded once, when anything was.
            (Seen::End, _) => self.recorded > 0,
        };
        if !changed {
            return Err(Skipped::Unchanged);
        }
        // The last slot is kept for the end.
        let room = match seen {
            Seen::End => self.recorded < MAX_REPORTS_PER_SESSION,
            _ => self.recorded + 1 < MAX_REPORTS_PER_SESSION,
        };
        if !room {
            return Err(Skipped::OverBound);
        }
        self.recorded += 1;
        Ok(match seen {
            Seen::Hello(h) => {
                self.last = Some(h.clone());
                (true, true, h)
            }
            Seen::Status(h) => {
                self.last = Some(h.clone());
                (false, true, h)
            }
            Seen::End => {
                self.ended = true;
                (false, false, Held::default())
            }
        })
    }

    /// Events recorded in this session so far.
    pub fn recorded(&self) -> u32 {
        self.recorded
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unchanged_reports_are_not_recorded() {
        let v = Held::version;
        let mut s = SessionReports::default();
        assert_eq!(s.admit(Seen::Hello(v(3))), Ok((true, true, v(3))));
        for _ in 0..20_000 {
            assert_eq!(s.admit(Seen::Status(v(3))), Err(Skipped::Unchanged));
            assert_eq!(s.admit(Seen::Status(v(2))), Err(Skipped::Unchanged));
            assert_eq!(s.admit(Seen::Hello(v(3))), Err(Skipped::Unchanged));
        }
        assert_eq!(s.admit(Seen::Status(v(4))), Ok((false, true, v(4))));
        assert_eq!(s.admit(Seen::Hello(v(1))), Ok((true, true, v(1))));
        assert_eq!(s.admit(Seen::End), Ok((false, false, Held::default())));
        assert_eq!(s.admit(Seen::End), Err(Skipped::Unchanged));
        assert_eq!(s.admit(Seen::Status(v(9))), Err(Skipped::Unchanged));
        assert_eq!(s.recorded(), 4);
    }

    #[test]
    fn a_change_of_the_reported_set_at_the_same_version_is_recorded() {
        let set = |version, epoch, byte| Held {
            trust_version: version,
            approver_set_epoch: epoch,
            approver_set_sha256: vec![byte; 32],
        };
        let mut s = SessionReports::default();
        assert_eq!(
            s.admit(Seen::Hello(set(3, 1, 1))),
            Ok((true, true, set(3, 1, 1)))
        );
        assert_eq!(s.admit(Seen::Status(set(3, 1, 1))), Err(Skipped::Unchanged));
        // Same version, the set taken at epoch 2: recorded.
        assert_eq!(
            s.admit(Seen::Status(set(3, 2, 2))),
            Ok((false, true, set(3, 2, 2)))
        );
        assert_eq!(s.admit(Seen::Status(set(3, 2, 2))), Err(Skipped::Unchanged));
        // An older version with another set changes nothing the projection keeps.
        assert_eq!(s.admit(Seen::Status(set(2, 1, 1))), Err(Skipped::Unchanged));
        // A Hello with another set at the same version is recorded.
        assert_eq!(
            s.admit(Seen::Hello(set(3, 3, 3))),
            Ok((true, true, set(3, 3, 3)))
        );
        // Version 0 acknowledges no bundle: its set is not written, so not recorded.
        let mut z = SessionReports::default();
        assert_eq!(
            z.admit(Seen::Hello(set(0, 0, 0))),
            Ok((true, true, set(0, 0, 0)))
        );
        assert_eq!(z.admit(Seen::Status(set(0, 1, 1))), Err(Skipped::Unchanged));
        assert_eq!(s.recorded(), 3);
    }

    #[test]
    fn a_session_records_at_most_the_bound_and_always_its_end() {
        let mut s = SessionReports::default();
        let mut recorded = 0;
        for v in 0..20_000u64 {
            if s.admit(Seen::Status(Held::version(v))).is_ok() {
                recorded += 1;
            }
        }
        assert_eq!(recorded, MAX_REPORTS_PER_SESSION - 1);
        assert_eq!(
            s.admit(Seen::Status(Held::version(1_000_000))),
            Err(Skipped::OverBound)
        );
        assert_eq!(s.admit(Seen::End), Ok((false, false, Held::default())));
        // A session that recorded nothing records no end.
        assert_eq!(
            SessionReports::default().admit(Seen::End),
            Err(Skipped::Unchanged)
        );
    }

    #[test]
    fn the_warning_is_written_once_per_interval_with_the_suppressed_count() {
        let limiter = WarnLimiter::new(Duration::from_secs(10));
        let t0 = Instant::now();
        let lines: Vec<u64> = (0..20_000u64)
            .filter_map(|i| limiter.check(t0 + Duration::from_micros(i)))
            .collect();
        assert_eq!(lines, vec![0]);
        assert_eq!(limiter.check(t0 + Duration::from_secs(10)), Some(19_999));
        assert_eq!(limiter.check(t0 + Duration::from_secs(11)), None);
    }

    #[tokio::test]
    async fn a_full_queue_drops_reports_with_few_warnings() {
        // A queue of one that nobody drains: every report after the first is dropped.
        let (tx, _rx) = mpsc::channel(1);
        let reporter = TrustReporter::over(tx);
        let report = TrustReport {
            tenant_id: "t1".into(),
            node_id: "n1".into(),
            trust_version: 1,
            session_start: false,
            connected: true,
            approver_set_epoch: 0,
            approver_set_sha256: Vec::new(),
        };
        let outcomes: Vec<Queued> = (0..20_000)
            .map(|_| reporter.report(report.clone()))
            .collect();
        assert_eq!(outcomes[0], Queued::Queued);
        let dropped = outcomes
            .iter()
            .filter(|o| matches!(o, Queued::Dropped { .. }))
            .count();
        let warned = outcomes
            .iter()
            .filter(|o| matches!(o, Queued::Dropped { warned: true }))
            .count();
        assert_eq!(dropped, 19_999);
        assert_eq!(warned, 1);
    }
}
