//! When to renew and when to retry: pure functions of times (no clock, no randomness inside).
//!
//! * Renewal at 60% of the leaf's lifetime ([`renew_at`]).
//! * A failed renewal retries with backoff from 30 s, doubling, capped at 10 min, with jitter
//!   ([`renewal_retry_delay`]), or exactly when a busy gateway says ([`Pushback`]); never past
//!   the certificate's notAfter ([`next_renewal_attempt`]; [`renewal_retry_at`] is what
//!   `bcd node` waits for, a last attempt halfway to notAfter when no backoff fits).
//! * A failed join retries up to 20 attempts in all, backing off from 1 s doubling to 60 s with
//!   the same jitter, a gateway's `grpc-retry-pushback-ms` waited out exactly
//!   ([`join_retry`]).
//!
//! Jitter is an argument in `[0, 1)`; the delay is the nominal one scaled by `0.8 + 0.4 *
//! jitter` and then clamped to the bounds, so nodes that failed together spread out while no
//! delay leaves `[30 s, 10 min]` (renewal) or `[1 s, 60 s]` (join). [`jitter`] draws one.

use time::{Duration, OffsetDateTime};

/// Fraction of a certificate's lifetime after which it is renewed.
pub const RENEW_FRACTION: f64 = 0.6;
/// First renewal retry delay.
pub const RENEW_RETRY_MIN: Duration = Duration::seconds(30);
/// Longest renewal retry delay.
pub const RENEW_RETRY_MAX: Duration = Duration::minutes(10);
/// Most join attempts, the first one included.
pub const JOIN_MAX_ATTEMPTS: u32 = 20;
/// First join retry delay.
pub const JOIN_RETRY_MIN: Duration = Duration::seconds(1);
/// Longest join retry delay.
pub const JOIN_RETRY_MAX: Duration = Duration::seconds(60);

/// A server's retry hint (`grpc-retry-pushback-ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushback {
    /// Retry after exactly this long.
    After(Duration),
    /// Do not retry (a negative or malformed pushback, per gRPC's retry design).
    DoNotRetry,
}

impl Pushback {
    /// Reads a `grpc-retry-pushback-ms` value.
    pub fn from_header(value: &str) -> Pushback {
        match value.trim().parse::<i64>() {
            Ok(ms) if ms >= 0 => Pushback::After(Duration::milliseconds(ms)),
            _ => Pushback::DoNotRetry,
        }
    }
}

/// When a certificate valid from `not_before` to `not_after` is renewed.
pub fn renew_at(not_before: OffsetDateTime, not_after: OffsetDateTime) -> OffsetDateTime {
    let lifetime = (not_after - not_before).max(Duration::ZERO);
    not_before + lifetime * RENEW_FRACTION
}

fn backoff(attempt: u32, min: Duration, max: Duration, jitter: f64) -> Duration {
    let jitter = if jitter.is_finite() {
        jitter.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let doublings = attempt.saturating_sub(1).min(30);
    let nominal = (min * 2f64.powi(doublings as i32)).min(max);
    (nominal * (0.8 + 0.4 * jitter)).clamp(min, max)
}

/// The delay before the next renewal attempt after `failures` failed ones (1 for the first).
pub fn renewal_retry_delay(failures: u32, jitter: f64) -> Duration {
    backoff(failures, RENEW_RETRY_MIN, RENEW_RETRY_MAX, jitter)
}

/// When to try renewing again after `failures` failed attempts at `now`, or `None` when the
/// certificate has expired by then (it cannot be renewed: join again).
pub fn next_renewal_attempt(
    now: OffsetDateTime,
    not_after: OffsetDateTime,
    failures: u32,
    pushback: Option<Pushback>,
    jitter: f64,
) -> Option<OffsetDateTime> {
    let delay = match pushback {
        Some(Pushback::After(d)) => d,
        // A renewal is never given up while the certificate lives; the backoff applies.
        Some(Pushback::DoNotRetry) | None => renewal_retry_delay(failures, jitter),
    };
    let at = now + delay;
    (at < not_after).then_some(at)
}

/// The shortest time left before notAfter in which [`renewal_retry_at`] still tries once more.
pub const LAST_ATTEMPT_MIN_LEFT: Duration = Duration::seconds(2);

/// When `bcd node` tries again after `failures` failed renewals at `now`: the backoff (or the
/// pushback) when it fits before `not_after`; else, for a backoff and at least
/// [`LAST_ATTEMPT_MIN_LEFT`] left, halfway to `not_after` (a last chance while the certificate
/// lives); else `not_after` itself, where the node stops for the expiry (and re-joins by
/// x509pop). Never later than `not_after`.
pub fn renewal_retry_at(
    now: OffsetDateTime,
    not_after: OffsetDateTime,
    failures: u32,
    pushback: Option<Pushback>,
    jitter: f64,
) -> OffsetDateTime {
    if let Some(at) = next_renewal_attempt(now, not_after, failures, pushback, jitter) {
        return at;
    }
    let left = not_after - now;
    let exact_pushback = matches!(pushback, Some(Pushback::After(_)));
    if !exact_pushback && left >= LAST_ATTEMPT_MIN_LEFT {
        now + left / 2
    } else {
        not_after.max(now)
    }
}

/// What to do after a failed join attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinRetry {
    /// Wait this long, then attempt again.
    After(Duration),
    /// Stop: the attempts are spent, or the server said not to retry.
    GiveUp,
}

/// After attempt number `attempt` (1-based) failed retryably: wait, or give up at
/// [`JOIN_MAX_ATTEMPTS`]. A pushback is waited out exactly.
pub fn join_retry(attempt: u32, pushback: Option<Pushback>, jitter: f64) -> JoinRetry {
    if attempt >= JOIN_MAX_ATTEMPTS {
        return JoinRetry::GiveUp;
    }
    match pushback {
        Some(Pushback::After(d)) => JoinRetry::After(d),
        Some(Pushback::DoNotRetry) => JoinRetry::GiveUp,
        None => JoinRetry::After(backoff(attempt, JOIN_RETRY_MIN, JOIN_RETRY_MAX, jitter)),
    }
}

/// A jitter value in `[0, 1)` from the standard library's per-process random hash keys.
pub fn jitter() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    #[test]
    fn renews_at_sixty_percent() {
        let nb = datetime!(2026-01-01 00:00 UTC);
        assert_eq!(
            renew_at(nb, nb + Duration::hours(24)),
            nb + Duration::minutes(864)
        );
        assert_eq!(
            renew_at(nb, nb + Duration::seconds(100)),
            nb + Duration::seconds(60)
        );
    }

    #[test]
    fn renewal_backoff_bounds() {
        assert_eq!(renewal_retry_delay(1, 0.0), Duration::seconds(30));
        assert_eq!(renewal_retry_delay(2, 0.5), Duration::seconds(60));
        assert_eq!(renewal_retry_delay(3, 0.0), Duration::seconds(96));
        for attempt in 1..50 {
            for j in [0.0, 0.3, 0.999, f64::NAN, 7.0] {
                let d = renewal_retry_delay(attempt, j);
                assert!(
                    d >= RENEW_RETRY_MIN && d <= RENEW_RETRY_MAX,
                    "{attempt} {j}"
                );
            }
        }
        assert_eq!(renewal_retry_delay(10, 0.0), Duration::seconds(480));
        assert_eq!(renewal_retry_delay(10, 0.99), RENEW_RETRY_MAX);
    }

    #[test]
    fn renewal_never_past_expiry_and_honours_pushback() {
        let now = datetime!(2026-01-01 00:00 UTC);
        let na = now + Duration::seconds(45);
        assert_eq!(
            next_renewal_attempt(now, na, 1, None, 0.5),
            Some(now + Duration::seconds(30))
        );
        assert_eq!(next_renewal_attempt(now, na, 2, None, 0.5), None);
        assert_eq!(
            next_renewal_attempt(now, na, 5, Some(Pushback::After(Duration::seconds(7))), 0.5),
            Some(now + Duration::seconds(7))
        );
    }

    /// Regression (issue 22): `bcd node` used to fall back to `now + 30 s` when no backoff fit
    /// before notAfter, scheduling a retry past the expiry.
    #[test]
    fn a_renewal_retry_is_never_scheduled_past_not_after() {
        let now = datetime!(2026-01-01 00:00 UTC);
        for left_s in [0, 1, 2, 3, 10, 29, 31, 45, 100, 700] {
            let na = now + Duration::seconds(left_s);
            for failures in [1, 2, 5, 30] {
                for pushback in [
                    None,
                    Some(Pushback::DoNotRetry),
                    Some(Pushback::After(Duration::seconds(7))),
                    Some(Pushback::After(Duration::minutes(20))),
                ] {
                    for j in [0.0, 0.5, 0.99] {
                        let at = renewal_retry_at(now, na, failures, pushback, j);
                        assert!(at <= na, "{left_s} s left, {failures}, {pushback:?}: {at}");
                        assert!(at >= now);
                    }
                }
            }
        }
        let na = now + Duration::seconds(10);
        // The first retry's 30 s do not fit: halfway, a last chance.
        assert_eq!(
            renewal_retry_at(now, na, 1, None, 0.5),
            now + Duration::seconds(5)
        );
        // A pushback past notAfter is honoured: no attempt before the expiry.
        assert_eq!(
            renewal_retry_at(
                now,
                na,
                1,
                Some(Pushback::After(Duration::seconds(60))),
                0.5
            ),
            na
        );
        // Under 2 s left: wait for the expiry.
        let na = now + Duration::seconds(1);
        assert_eq!(renewal_retry_at(now, na, 1, None, 0.5), na);
        // Fits: the backoff.
        let na = now + Duration::seconds(100);
        assert_eq!(
            renewal_retry_at(now, na, 1, None, 0.5),
            now + Duration::seconds(30)
        );
    }

    #[test]
    fn join_twenty_attempts_and_pushback() {
        assert_eq!(
            join_retry(1, None, 0.5),
            JoinRetry::After(Duration::seconds(1))
        );
        assert_eq!(join_retry(19, None, 0.5), JoinRetry::After(JOIN_RETRY_MAX));
        assert_eq!(join_retry(20, None, 0.5), JoinRetry::GiveUp);
        assert_eq!(
            join_retry(3, Some(Pushback::from_header("2500")), 0.9),
            JoinRetry::After(Duration::milliseconds(2500))
        );
        assert_eq!(
            join_retry(3, Some(Pushback::from_header("-1")), 0.9),
            JoinRetry::GiveUp
        );
        assert_eq!(Pushback::from_header("x"), Pushback::DoNotRetry);
        let j = jitter();
        assert!((0.0..1.0).contains(&j));
    }
}
