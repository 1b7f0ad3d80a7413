//! The boot server's rate bound per client ([`ClientLimiter`]): each peer address may ask
//! [`CLIENT_BURST`] requests at once, then one every [`REFILL_EVERY`]; over it the answer is
//! 429 and nothing is asked of the control plane. At most [`MAX_CLIENTS`] addresses are
//! remembered: when that many are tracked and none has a full bucket to forget, a new address
//! is answered 429 too (a flood from many addresses cannot grow the table without bound).
//!
//! Pure apart from the [`Instant`] passed in, so the tests drive it with their own clock.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration as StdDuration, Instant};

/// How many requests a client may make at once.
pub const CLIENT_BURST: u32 = 20;
/// How often a client earns one more request.
pub const REFILL_EVERY: StdDuration = StdDuration::from_secs(1);
/// How many client addresses are remembered.
pub const MAX_CLIENTS: usize = 4096;

/// The 429 answer's text.
pub const TOO_MANY: &str =
    "too many requests from this client: at most 20 at once, then 1 a second\n";

#[derive(Debug, Clone, Copy)]
struct Bucket {
    /// Requests left, in thousandths (so a partial refill is kept).
    milli: u64,
    /// When it was last topped up.
    at: Instant,
}

const FULL_MILLI: u64 = CLIENT_BURST as u64 * 1_000;

impl Bucket {
    fn topped_up(self, now: Instant) -> Bucket {
        let elapsed = now.saturating_duration_since(self.at);
        let earned = elapsed.as_millis() * 1_000 / REFILL_EVERY.as_millis().max(1);
        let earned = u64::try_from(earned).unwrap_or(u64::MAX);
        Bucket {
            milli: self.milli.saturating_add(earned).min(FULL_MILLI),
            at: now,
        }
    }
}

/// Requests per client address, bounded.
#[derive(Debug, Default)]
pub struct ClientLimiter {
    buckets: Mutex<HashMap<IpAddr, Bucket>>,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock cannot leave the plain data inconsistent.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl ClientLimiter {
    /// Whether `peer` may make a request at `now` (and counts it when it may).
    pub fn allow(&self, peer: IpAddr, now: Instant) -> bool {
        let peer = peer.to_canonical();
        let mut buckets = locked(&self.buckets);
        if !buckets.contains_key(&peer) && buckets.len() >= MAX_CLIENTS {
            buckets.retain(|_, b| b.topped_up(now).milli < FULL_MILLI);
            if buckets.len() >= MAX_CLIENTS {
                return false;
            }
        }
        let bucket = buckets.entry(peer).or_insert(Bucket {
            milli: FULL_MILLI,
            at: now,
        });
        let topped = bucket.topped_up(now);
        if topped.milli < 1_000 {
            *bucket = topped;
            return false;
        }
        *bucket = Bucket {
            milli: topped.milli - 1_000,
            at: now,
        };
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_one_a_second_per_client() {
        let limiter = ClientLimiter::default();
        let t0 = Instant::now();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        for _ in 0..CLIENT_BURST {
            assert!(limiter.allow(a, t0));
        }
        assert!(!limiter.allow(a, t0));
        assert!(limiter.allow(b, t0), "another client is served");
        assert!(!limiter.allow(a, t0 + REFILL_EVERY / 2));
        assert!(limiter.allow(a, t0 + REFILL_EVERY));
        assert!(!limiter.allow(a, t0 + REFILL_EVERY));
    }

    #[test]
    fn the_table_is_bounded() {
        let limiter = ClientLimiter::default();
        let t0 = Instant::now();
        for i in 0..MAX_CLIENTS as u32 {
            let ip = IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + i));
            assert!(limiter.allow(ip, t0));
        }
        let new: IpAddr = "192.0.2.1".parse().unwrap();
        assert!(!limiter.allow(new, t0), "full of busy clients: refused");
        // Once the others' buckets are full again they are forgotten and the new one served.
        assert!(limiter.allow(new, t0 + REFILL_EVERY * 2));
    }
}
