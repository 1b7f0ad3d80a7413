//! bcd's clocks: the machine's own ([`now`]), and the time a signed command and a batch
//! approval are judged at ([`TrustedClock`]).
//!
//! [`now`] is the one place bcd reads the wall clock. In a debug build (the test profile; never
//! a release build) `BCD_TEST_CLOCK_OFFSET_MS=<signed ms>` moves it, so a test can run a real
//! `bcd` whose clock is wrong, as a machine's can be.
//!
//! [`TrustedClock`] is the later of the own clock and the highest signed time bcd has seen (the
//! JoinService's signed server time of a join or a renewal answer, a verified command's issue
//! time), that time advanced by the monotonic clock since bcd saw it. Every time it is made of
//! is either signed or bcd's own: a `Welcome`'s server time is not signed, so it never enters (it
//! is reported only: the session's log, `bcd doctor`). A gateway therefore cannot move it back
//! to revive an expired command or approval, nor forward to stop every command
//! (docs/DECISIONS.md "Issue 40: the time a node judges signed things at").

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use time::{Duration, OffsetDateTime};

/// Moves [`now`] by this many milliseconds (debug builds only).
pub const CLOCK_OFFSET_ENV: &str = "BCD_TEST_CLOCK_OFFSET_MS";

/// The machine's clock (see the module docs).
pub fn now() -> OffsetDateTime {
    OffsetDateTime::now_utc() + offset()
}

/// [`now`] in Unix milliseconds (saturating).
pub fn now_ms() -> i64 {
    unix_ms(now())
}

/// `t` in Unix milliseconds (saturating).
pub fn unix_ms(t: OffsetDateTime) -> i64 {
    i64::try_from(t.unix_timestamp_nanos() / 1_000_000).unwrap_or(i64::MAX)
}

#[cfg(debug_assertions)]
fn offset() -> Duration {
    std::env::var(CLOCK_OFFSET_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<i64>().ok())
        .map(Duration::milliseconds)
        .unwrap_or(Duration::ZERO)
}

#[cfg(not(debug_assertions))]
fn offset() -> Duration {
    Duration::ZERO
}

/// The time signed things are judged at (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct TrustedClock {
    /// The highest signed time seen (Unix ms), and the monotonic instant it was first seen at.
    anchor: Option<(i64, Instant)>,
}

impl TrustedClock {
    /// A clock that has seen no signed time: the own clock alone.
    pub fn new() -> TrustedClock {
        TrustedClock::default()
    }

    /// Notes a signed time seen now (or before): the real time is at least `signed_ms` from
    /// now on. A time no higher than the held one changes nothing.
    pub fn observe(&mut self, signed_ms: i64) {
        self.observe_at(signed_ms, Instant::now());
    }

    /// [`TrustedClock::observe`] at the monotonic instant `at`.
    pub fn observe_at(&mut self, signed_ms: i64, at: Instant) {
        if self.anchor.is_none_or(|(held, _)| signed_ms > held) {
            self.anchor = Some((signed_ms, at));
        }
    }

    /// The highest signed time seen (Unix ms), if any.
    pub fn highest_signed_ms(&self) -> Option<i64> {
        self.anchor.map(|(ms, _)| ms)
    }

    /// The trusted time when the own clock reads `local_now_ms`.
    pub fn now_ms(&self, local_now_ms: i64) -> i64 {
        self.now_ms_at(local_now_ms, Instant::now())
    }

    /// [`TrustedClock::now_ms`] at the monotonic instant `at`: the later of `local_now_ms` and
    /// the highest signed time plus the monotonic time since it was seen.
    pub fn now_ms_at(&self, local_now_ms: i64, at: Instant) -> i64 {
        match self.anchor {
            Some((signed, seen)) => {
                let since = at.saturating_duration_since(seen).as_millis();
                let since = i64::try_from(since).unwrap_or(i64::MAX);
                local_now_ms.max(signed.saturating_add(since))
            }
            None => local_now_ms,
        }
    }
}

/// The highest signed time the command runner has seen, shared with the session so each
/// `Welcome` mirrors it into `identity.json` (`serverTime`).
#[derive(Debug, Clone)]
pub struct SignedTimeMark(Arc<AtomicI64>);

impl Default for SignedTimeMark {
    fn default() -> Self {
        SignedTimeMark(Arc::new(AtomicI64::new(i64::MIN)))
    }
}

impl SignedTimeMark {
    /// Raises the mark to `ms` (never lowers it).
    pub fn raise(&self, ms: i64) {
        self.0.fetch_max(ms, Ordering::SeqCst);
    }

    /// The mark, Unix ms, if any time was seen.
    pub fn get(&self) -> Option<i64> {
        let ms = self.0.load(Ordering::SeqCst);
        (ms != i64::MIN).then_some(ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trusted_time_is_the_own_clock_until_a_signed_time_is_ahead_of_it() {
        let t0 = Instant::now();
        let mut clock = TrustedClock::new();
        assert_eq!(clock.now_ms_at(1_000, t0), 1_000);
        // A signed time behind the own clock changes nothing.
        clock.observe_at(500, t0);
        assert_eq!(clock.now_ms_at(1_000, t0), 1_000);
        // One ahead of it holds the time up, and runs on with the monotonic clock.
        clock.observe_at(5_000, t0);
        assert_eq!(clock.now_ms_at(1_000, t0), 5_000);
        assert_eq!(
            clock.now_ms_at(1_000, t0 + std::time::Duration::from_millis(250)),
            5_250
        );
        // A lower signed time never moves it back.
        clock.observe_at(4_000, t0 + std::time::Duration::from_millis(10));
        assert_eq!(clock.highest_signed_ms(), Some(5_000));
        assert_eq!(clock.now_ms_at(1_000, t0), 5_000);
        // The own clock past it wins.
        assert_eq!(clock.now_ms_at(9_000, t0), 9_000);
    }
}
