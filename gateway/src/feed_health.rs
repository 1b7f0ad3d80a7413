//! Whether the revocation feed is caught up ([`FeedHealth`]): written by the feed
//! (`crate::feed`), read by the server (new sessions fail closed when it is stale), the health
//! service and the metrics. Its own file so that the feed and the metrics need not import each
//! other.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Whether the feed is caught up, shared with the server and the metrics.
#[derive(Debug)]
pub struct FeedHealth {
    started: Instant,
    /// Milliseconds since `started` at the last caught-up step.
    caught_up_ms: AtomicI64,
    max_lag: Duration,
    stale: AtomicBool,
}

impl FeedHealth {
    pub fn new(max_lag: Duration) -> Arc<Self> {
        Arc::new(FeedHealth {
            started: Instant::now(),
            caught_up_ms: AtomicI64::new(0),
            max_lag,
            stale: AtomicBool::new(false),
        })
    }

    pub(crate) fn mark_caught_up(&self) {
        let ms = i64::try_from(self.started.elapsed().as_millis()).unwrap_or(i64::MAX);
        self.caught_up_ms.store(ms, Ordering::Release);
    }

    /// Time since the feed was last caught up.
    pub fn lag(&self) -> Duration {
        let now = self.started.elapsed();
        let at = Duration::from_millis(
            u64::try_from(self.caught_up_ms.load(Ordering::Acquire)).unwrap_or(0),
        );
        now.saturating_sub(at)
    }

    /// Whether the feed has been behind for more than its limit (computed now).
    pub fn is_stale(&self) -> bool {
        self.lag() > self.max_lag
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
