//! The per-minute bound on refusal events: at most `limit` `security.*.refused` events per
//! (kind, refusal) and minute window; refusals over it are counted, and the count goes to the
//! log as one `security.refusals.suppressed` event per (kind, refusal, window, tenant) once its
//! minute is over. Nothing is lost: recorded plus suppressed is every refusal.

use events::schema::RefusalsSuppressed;

/// A minute, µs.
const WINDOW_US: i64 = 60_000_000;

/// The start of the minute window `now_us` falls in, µs.
pub fn window_start(now_us: i64) -> i64 {
    now_us - now_us.rem_euclid(WINDOW_US)
}

/// The key that serializes the refusals of one (kind, refusal) across replicas (the shell takes
/// a lock on it before reading the window's count, so the bound is exact).
pub fn refusal_lock_key(kind: &str, refusal: &str) -> i64 {
    let d = super::sha256(format!("{kind}\0{refusal}").as_bytes());
    i64::from_be_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]])
}

/// What to do with one refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalBound {
    /// Record it as its own `security.*.refused` event (after writing the counts of finished
    /// windows of its reason).
    Record,
    /// The window's bound is reached: count it as suppressed.
    Suppress,
}

/// Decides one refusal given how many of its (kind, refusal) the current window already
/// recorded one by one.
pub fn refusal_bound(recorded_in_window: i64, limit: u32) -> RefusalBound {
    if recorded_in_window >= i64::from(limit) {
        RefusalBound::Suppress
    } else {
        RefusalBound::Record
    }
}

/// The event that writes a finished window's suppressed count (`count` is never negative in a
/// sound table; a negative one is written as 0).
pub fn suppressed_event(
    kind: String,
    refusal: String,
    window_start_us: i64,
    count: i64,
) -> RefusalsSuppressed {
    RefusalsSuppressed {
        kind,
        refusal,
        window_start_us,
        count: u64::try_from(count).unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_minutes() {
        assert_eq!(window_start(0), 0);
        assert_eq!(window_start(59_999_999), 0);
        assert_eq!(window_start(60_000_000), 60_000_000);
        assert_eq!(window_start(-1), -60_000_000);
    }

    #[test]
    fn the_bound_suppresses_from_the_limit_on() {
        assert_eq!(refusal_bound(0, 2), RefusalBound::Record);
        assert_eq!(refusal_bound(1, 2), RefusalBound::Record);
        assert_eq!(refusal_bound(2, 2), RefusalBound::Suppress);
        assert_eq!(refusal_bound(0, 0), RefusalBound::Suppress);
    }

    #[test]
    fn lock_keys_differ_by_reason() {
        assert_ne!(
            refusal_lock_key("join", "join-token:expired"),
            refusal_lock_key("renew", "join-token:expired")
        );
    }
}
