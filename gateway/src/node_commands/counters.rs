//! Counters of the commands over node sessions, for `/metrics` ([`crate::node_commands::dispatch`]
//! counts, [`crate::metrics`] renders): commands sent, failed fetches or dispatch records, failed
//! polls, sessions woken, node results by outcome, and sessions cut off for results of commands
//! they were not sent. The log lines about results a node sent go through one limiter
//! ([`CommandCounters::result_line`]): a node flooding results costs at most a line per
//! [`WARN_EVERY`], with the count of those not written.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use commands::command_queue::CommandQueueError;

use crate::trust::reports::WarnLimiter;

/// One WARN line per this interval for repeated failures of the queue.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// Node results by outcome.
#[derive(Debug, Default)]
pub struct ResultCounts {
    /// Recorded (`command.result.recorded` or `command.rejected`).
    pub recorded: AtomicU64,
    /// Not recorded: another node's command, an unknown one, or one already answered.
    pub ignored: AtomicU64,
    /// Refused at the edge: no queue command id, or no outcome.
    pub invalid: AtomicU64,
    /// Not recorded: the store failed.
    pub error: AtomicU64,
    /// Not read from the store: a command this session did not send (or already had an answer
    /// for), past the session's [`crate::node_commands::dispatch::UNSOLICITED_READS`].
    pub unsolicited: AtomicU64,
}

impl ResultCounts {
    fn counter(&self, outcome: &str) -> Option<&AtomicU64> {
        match outcome {
            "recorded" => Some(&self.recorded),
            "ignored" => Some(&self.ignored),
            "invalid" => Some(&self.invalid),
            "error" => Some(&self.error),
            "unsolicited" => Some(&self.unsolicited),
            _ => None,
        }
    }

    /// Counts one result of `outcome` (recorded, ignored, invalid, error, unsolicited).
    pub fn inc(&self, outcome: &str) {
        if let Some(c) = self.counter(outcome) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Results of `outcome` so far (0 for an unknown outcome).
    pub fn get(&self, outcome: &str) -> u64 {
        self.counter(outcome)
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }
}

/// Counters of commands over sessions.
#[derive(Debug)]
pub struct CommandCounters {
    /// Commands sent to nodes.
    pub dispatched: AtomicU64,
    /// Fetches or dispatch records that failed (nothing was sent for them).
    pub dispatch_errors: AtomicU64,
    /// Node results by outcome.
    pub results: ResultCounts,
    /// Polls of the ready commands that failed.
    pub poll_errors: AtomicU64,
    /// Sessions the poller woke.
    pub wakes: AtomicU64,
    /// Sessions ended for sending results of commands they were not sent.
    pub sessions_cut: AtomicU64,
    /// Log lines written about node results (see [`CommandCounters::result_line`]).
    pub result_lines: AtomicU64,
    warn: WarnLimiter,
    results_warn: WarnLimiter,
}

impl Default for CommandCounters {
    fn default() -> Self {
        CommandCounters {
            dispatched: AtomicU64::new(0),
            dispatch_errors: AtomicU64::new(0),
            results: ResultCounts::default(),
            poll_errors: AtomicU64::new(0),
            wakes: AtomicU64::new(0),
            sessions_cut: AtomicU64::new(0),
            result_lines: AtomicU64::new(0),
            warn: WarnLimiter::new(WARN_EVERY),
            results_warn: WarnLimiter::new(WARN_EVERY),
        }
    }
}

impl CommandCounters {
    /// Logs a failure of the queue (an unimplemented queue or a store failure), one line per
    /// [`WARN_EVERY`] with how many were not logged since.
    pub fn failed(&self, what: &str, node: Option<&str>, e: &CommandQueueError) {
        if let Some(suppressed) = self.warn.check(Instant::now()) {
            tracing::warn!(node = node.unwrap_or(""), error = %e, suppressed_since_last_warning = suppressed, "{what} failed");
        }
    }

    /// Whether a log line about a node's result may be written now (one per [`WARN_EVERY`] for
    /// the whole process): `Some(suppressed)`, the lines not written since the last one.
    pub fn result_line(&self) -> Option<u64> {
        let due = self.results_warn.check(Instant::now());
        if due.is_some() {
            self.result_lines.fetch_add(1, Ordering::Relaxed);
        }
        due
    }

    /// Writes these counters in the Prometheus text format.
    pub fn render(&self, out: &mut String) {
        let family = |out: &mut String, name: &str, help: &str| {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} counter");
        };
        for (name, help, counter) in [
            (
                "bc_commands_dispatched_total",
                "Commands sent to nodes over their sessions (each recorded as command.dispatched).",
                &self.dispatched,
            ),
            (
                "bc_command_dispatch_errors_total",
                "Fetches or dispatch records that failed (nothing was sent for them; retried).",
                &self.dispatch_errors,
            ),
            (
                "bc_command_poll_errors_total",
                "Polls for newly runnable commands that failed.",
                &self.poll_errors,
            ),
            (
                "bc_command_wakes_total",
                "Sessions the command poller woke.",
                &self.wakes,
            ),
            (
                "bc_command_sessions_cut_total",
                "Sessions ended for sending results of commands they were not sent.",
                &self.sessions_cut,
            ),
        ] {
            family(out, name, help);
            let _ = writeln!(out, "{name} {}", counter.load(Ordering::Relaxed));
        }
        family(
            out,
            "bc_command_results_total",
            "Node command results, by outcome: recorded, ignored (another node's, unknown or already answered), invalid, error (the store failed), unsolicited (not sent to the session: dropped unread).",
        );
        for outcome in ["error", "ignored", "invalid", "recorded", "unsolicited"] {
            let _ = writeln!(
                out,
                "bc_command_results_total{{outcome=\"{outcome}\"}} {}",
                self.results.get(outcome)
            );
        }
    }
}
