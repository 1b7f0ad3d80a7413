//! The injected clock. Handlers read time only from here and pass it to the pure domain as a
//! value; tests run on [`SimClock`].

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use time::OffsetDateTime;

/// A source of the current time.
pub trait Clock: Send + Sync + 'static {
    /// Now, in microseconds since the Unix epoch.
    fn now_us(&self) -> i64;

    /// Now, as a date-time (UTC).
    fn now(&self) -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp_nanos(i128::from(self.now_us()) * 1000)
            .unwrap_or(OffsetDateTime::UNIX_EPOCH)
    }
}

/// The system's wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_us(&self) -> i64 {
        let now = OffsetDateTime::now_utc().unix_timestamp_nanos() / 1000;
        i64::try_from(now).unwrap_or(i64::MAX)
    }
}

/// A clock that moves only when told to; clones share the same time.
#[derive(Clone, Debug)]
pub struct SimClock(Arc<AtomicI64>);

impl SimClock {
    pub fn at_us(us: i64) -> Self {
        SimClock(Arc::new(AtomicI64::new(us)))
    }

    /// Starts at a fixed, recognisable moment: 2026-01-01T00:00:00Z.
    pub fn new() -> Self {
        Self::at_us(1_767_225_600_000_000)
    }

    pub fn advance_us(&self, us: i64) {
        self.0.fetch_add(us, Ordering::SeqCst);
    }

    pub fn advance_secs(&self, secs: i64) {
        self.advance_us(secs * 1_000_000);
    }

    pub fn set_us(&self, us: i64) {
        self.0.store(us, Ordering::SeqCst);
    }
}

impl Default for SimClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SimClock {
    fn now_us(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}
