//! Whether the revocation feed is caught up ([`FeedHealth`]): written by the feed
//! (`crate::revocation::feed`), read by the server (new sessions fail closed when it is stale), the
//! health service and the metrics. Its own file so that the feed and the metrics need not import
//! each other.
//!
//! Two ways to be unhealthy: behind (no caught-up step for more than `max_lag`; recovers by
//! itself at the next good step) and halted ([`FeedHealth::halt`]: the feed met a revocation it
//! cannot read and stopped; stale for good, with the reason, until the gateway restarts).

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Whether the feed is caught up, shared with the server and the metrics.
#[derive(Debug)]
pub struct FeedHealth {
    started: Instant,
    /// Milliseconds since `started` at the last caught-up step.
    caught_up_ms: AtomicI64,
    max_lag: Duration,
    stale: AtomicBool,
    /// Why the feed stopped, once it has.
    halted: OnceLock<String>,
}

impl FeedHealth {
    pub fn new(max_lag: Duration) -> Arc<Self> {
        Arc::new(FeedHealth {
            started: Instant::now(),
            caught_up_ms: AtomicI64::new(0),
            max_lag,
            stale: AtomicBool::new(false),
            halted: OnceLock::new(),
        })
    }

    /// The feed stopped for good (`why` says where and what to do): stale from now on, whatever
    /// a later step says. The first reason is kept; returns whether this call set it.
    pub(crate) fn halt(&self, why: String) -> bool {
        self.halted.set(why).is_ok()
    }

    /// Why the feed stopped, when it has.
    pub fn halted(&self) -> Option<&str> {
        self.halted.get().map(String::as_str)
    }

    /// The message a refused session gets while the feed is stale.
    pub fn session_refusal(&self) -> String {
        match self.halted() {
            Some(why) => format!(
                "the gateway's revocation feed has stopped ({why}); every node session is refused until the gateway is fixed and restarted"
            ),
            None => "the gateway's revocation feed is behind; new sessions are refused until it catches up: retry".to_owned(),
        }
    }

    pub(crate) fn mark_caught_up(&self) {
        self.mark_caught_up_at(Instant::now());
    }

    /// The feed had applied every revocation committed before `at` (never moves back).
    pub(crate) fn mark_caught_up_at(&self, at: Instant) {
        let since = at.saturating_duration_since(self.started);
        let ms = i64::try_from(since.as_millis()).unwrap_or(i64::MAX);
        self.caught_up_ms.fetch_max(ms, Ordering::AcqRel);
    }

    /// Time since the feed was last caught up.
    pub fn lag(&self) -> Duration {
        let now = self.started.elapsed();
        let at = Duration::from_millis(
            u64::try_from(self.caught_up_ms.load(Ordering::Acquire)).unwrap_or(0),
        );
        now.saturating_sub(at)
    }

    /// Whether the feed has stopped, or has been behind for more than its limit (computed now).
    pub fn is_stale(&self) -> bool {
        self.halted.get().is_some() || self.lag() > self.max_lag
    }

    /// Updates the remembered state; returns `Some(new)` when it changed.
    pub fn transition(&self) -> Option<bool> {
        let now = self.is_stale();
        let before = self.stale.swap(now, Ordering::AcqRel);
        (before != now).then_some(now)
    }

    pub fn max_lag(&self) -> Duration {
        self.max_lag
    }
}
