//! The injected clock. Handlers read time only from here and pass it to the pure domain as a
//! value; tests run on [`SimClock`].
//!
//! A control-plane process runs on [`DatabaseClock`]: its decisions are judged at the
//! database's time (on Postgres the transaction's `now()`, read by [`crate::run::At::read`]),
//! so api replicas whose own clocks disagree decide the same request alike (spec 000:
//! `compute_now()`). Its `now_us` is the process clock, for what judges nothing (timers, logs),
//! and on SQLite (one process) for everything.

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

    /// Whether decisions are judged at the database's time rather than at [`Clock::now_us`]
    /// ([`DatabaseClock`]).
    fn decides_on_database_time(&self) -> bool {
        false
    }
}

/// The clock of a control-plane process: decisions at the database's time (see the module
/// docs), everything else at the process clock it is `over`.
#[derive(Clone)]
pub struct DatabaseClock {
    process: Arc<dyn Clock>,
}

impl std::fmt::Debug for DatabaseClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatabaseClock").finish_non_exhaustive()
    }
}

impl DatabaseClock {
    /// Over the system's wall clock: what `bcctl serve` and every verb that decides run on.
    pub fn system() -> Self {
        Self::over(Arc::new(SystemClock))
    }

    /// Over another process clock (a test's skewed [`SimClock`]).
    pub fn over(process: Arc<dyn Clock>) -> Self {
        DatabaseClock { process }
    }
}

impl Clock for DatabaseClock {
    fn now_us(&self) -> i64 {
        self.process.now_us()
    }

    fn decides_on_database_time(&self) -> bool {
        true
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
