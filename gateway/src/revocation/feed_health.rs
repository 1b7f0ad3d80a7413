//! Whether the revocation feed is caught up ([`FeedHealth`]): written by the feed
//! (`crate::revocation::feed`), read by the server (new sessions fail closed when it is stale), the
//! health service and the metrics. Its own file so that the feed and the metrics need not import
//! each other.
//!
//! Two ways to be unhealthy: behind (no caught-up step for more than `max_lag`; recovers by
//! itself at the next good step) and halted ([`FeedHealth::halt`]: the feed met a revocation it
//! cannot read and stopped; stale for good, with the reason, until the gateway restarts).
//!
//! What a node is told carries the true reason and a retry hint (`grpc-retry-pushback-ms`, which
//! bcd waits out before it reconnects): a session refused while the feed is stale
//! ([`FeedHealth::session_refusal_status`]), and a live session the feed ended because it stopped
//! ([`halted_end`]) or reloaded the revoked set after falling behind ([`reloaded_end`]). Each hint
//! is spread at random so that a fleet does not come back in the same second (issue 40: every
//! node used to be told "the gateway is shutting down; reconnect" and came straight back into
//! refusals).

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use tonic::Status;

use crate::edge::jitter::jitter;
use crate::renew::wire::with_pushback_ms;

/// The least a node is told to wait while the feed has stopped (plus up to half as much again,
/// at random): only an operator's restart of the gateway brings it back.
pub const HALTED_PUSHBACK: Duration = Duration::from_secs(60);

/// The least a node is told to wait while the feed is behind (plus up to as much again): it
/// recovers by itself.
pub const BEHIND_PUSHBACK: Duration = Duration::from_secs(5);

/// The longest wait a node is told after the feed reloaded the revoked set and ended every
/// session (from 1 s, at random): the nodes may come back at once, just not all together.
pub const RELOADED_SPREAD: Duration = Duration::from_secs(10);

/// `least` plus up to `spread` of it, at random, in milliseconds.
fn spread_ms(least: Duration, spread: f64) -> u64 {
    let ms = least.as_secs_f64() * 1000.0 * (1.0 + spread * jitter());
    ms as u64
}

/// The status a live session ends with when the feed stopped for good (`why`): the refusal
/// every new session gets, and a retry hint of [`HALTED_PUSHBACK`] and up to half more.
pub fn halted_end(why: &str) -> Status {
    with_pushback_ms(
        Status::unavailable(halted_message(why)),
        spread_ms(HALTED_PUSHBACK, 0.5),
    )
}

/// The status a live session ends with when the feed fell behind the log hub and reloaded the
/// revoked set: reconnect (the handshake checks the reloaded set), within [`RELOADED_SPREAD`].
pub fn reloaded_end() -> Status {
    let least = Duration::from_secs(1);
    let spread = RELOADED_SPREAD.as_secs_f64() / least.as_secs_f64() - 1.0;
    with_pushback_ms(
        Status::unavailable(
            "the gateway's revocation feed fell behind the log and reloaded the revoked set; every session was ended to be checked again: reconnect",
        ),
        spread_ms(least, spread),
    )
}

fn halted_message(why: &str) -> String {
    format!(
        "the gateway's revocation feed has stopped ({why}); every node session is refused until the gateway is fixed and restarted"
    )
}

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
            Some(why) => halted_message(why),
            None => "the gateway's revocation feed is behind; new sessions are refused until it catches up: retry".to_owned(),
        }
    }

    /// The status a session is refused with while the feed is stale: UNAVAILABLE with
    /// [`FeedHealth::session_refusal`] and a retry hint ([`HALTED_PUSHBACK`] once it stopped,
    /// [`BEHIND_PUSHBACK`] while it is behind, each spread at random).
    pub fn session_refusal_status(&self) -> Status {
        let wait = match self.halted() {
            Some(_) => spread_ms(HALTED_PUSHBACK, 0.5),
            None => spread_ms(BEHIND_PUSHBACK, 1.0),
        };
        with_pushback_ms(Status::unavailable(self.session_refusal()), wait)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn hint(status: &Status) -> u64 {
        status
            .metadata()
            .get(crate::renew::wire::PUSHBACK_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .expect("a retry hint")
    }

    /// Issue 40, item 13: what a node is told when the feed cannot vouch for its session says
    /// why, and tells it how long to stay away, spread so a fleet does not return at once.
    #[test]
    fn feed_ends_and_refusals_say_why_and_how_long_to_wait() {
        for _ in 0..50 {
            let halted = halted_end("the event at 7 does not decode");
            assert_eq!(halted.code(), tonic::Code::Unavailable);
            assert_eq!(
                halted.message(),
                "the gateway's revocation feed has stopped (the event at 7 does not decode); every node session is refused until the gateway is fixed and restarted"
            );
            assert!((60_000..=90_000).contains(&hint(&halted)));
            let reloaded = reloaded_end();
            assert_eq!(reloaded.code(), tonic::Code::Unavailable);
            assert!(reloaded.message().starts_with(
                "the gateway's revocation feed fell behind the log and reloaded the revoked set"
            ));
            assert!((1_000..=10_000).contains(&hint(&reloaded)));
        }
        let health = FeedHealth::new(Duration::ZERO);
        std::thread::sleep(Duration::from_millis(5));
        assert!(health.is_stale());
        let behind = health.session_refusal_status();
        assert_eq!(behind.message(), health.session_refusal());
        assert!((5_000..=10_000).contains(&hint(&behind)));
        health.halt("stopped".into());
        let refused = health.session_refusal_status();
        assert!(refused.message().contains("has stopped (stopped)"));
        assert!((60_000..=90_000).contains(&hint(&refused)));
    }
}
