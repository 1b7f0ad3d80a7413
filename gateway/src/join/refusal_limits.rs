//! The per-peer limit on refused joins, in front of the JoinService: a peer address
//! ([`PeerKey`]) whose joins were refused `max_refusals` times within `window` is answered
//! RESOURCE_EXHAUSTED, with a `grpc-retry-pushback-ms` hint of the time left in its window,
//! without its request reaching the JoinService (or the api, for a split gateway), so it writes
//! nothing to the store. Joins that succeed cost nothing; only refusals (PERMISSION_DENIED)
//! count.
//!
//! A window starts at a peer's first refusal and lasts `window`; the table holds at most
//! `max_peers` windows (expired ones are dropped first, then the oldest). Joins of one peer that
//! are in flight together are all checked before any of them is refused, so a peer can exceed
//! the bound by the joins it has in flight at once (at most its connections times their streams).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tonic::Status;

use crate::edge::limits::PeerKey;

/// The gRPC metadata key of the retry hint (gRPC's retry design), which bcd waits out.
pub const PUSHBACK_KEY: &str = "grpc-retry-pushback-ms";

/// How many refused joins a peer gets per window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JoinRefusalLimits {
    /// Refusals per peer within `window` before its joins are answered RESOURCE_EXHAUSTED
    /// (0: no limit).
    pub max_refusals: u32,
    pub window: Duration,
    /// Peers tracked at once.
    pub max_peers: usize,
}

impl Default for JoinRefusalLimits {
    /// 20 refusals a minute per peer: a machine with a wrong token is refused a few times and
    /// stops (bcd does not retry a refusal); twenty leave room for a site behind one address.
    fn default() -> Self {
        JoinRefusalLimits {
            max_refusals: 20,
            window: Duration::from_secs(60),
            max_peers: 65_536,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Window {
    started: Instant,
    refusals: u32,
}

/// The limiter (one per gateway).
#[derive(Debug)]
pub struct JoinRefusalLimiter {
    limits: JoinRefusalLimits,
    peers: Mutex<HashMap<PeerKey, Window>>,
    limited: AtomicU64,
    refused: AtomicU64,
}

impl JoinRefusalLimiter {
    pub fn new(limits: JoinRefusalLimits) -> Self {
        JoinRefusalLimiter {
            limits,
            peers: Mutex::new(HashMap::new()),
            limited: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }

    /// Whether a join from `ip` may go to the JoinService; the RESOURCE_EXHAUSTED answer when not.
    pub fn check(&self, ip: IpAddr) -> Result<(), Status> {
        if self.limits.max_refusals == 0 {
            return Ok(());
        }
        let peer = PeerKey::of(ip);
        let now = Instant::now();
        let left = {
            let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
            match peers.get(&peer).copied() {
                Some(w) if now.duration_since(w.started) >= self.limits.window => {
                    peers.remove(&peer);
                    return Ok(());
                }
                Some(w) if w.refusals >= self.limits.max_refusals => {
                    self.limits.window - now.duration_since(w.started)
                }
                _ => return Ok(()),
            }
        };
        self.limited.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(%peer, "join limited: too many refused joins from this peer");
        Err(limited_status(left))
    }

    /// Counts a refused join from `ip`.
    pub fn refused(&self, ip: IpAddr) {
        self.refused.fetch_add(1, Ordering::Relaxed);
        if self.limits.max_refusals == 0 {
            return;
        }
        let peer = PeerKey::of(ip);
        let now = Instant::now();
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        if !peers.contains_key(&peer) && peers.len() >= self.limits.max_peers {
            let window = self.limits.window;
            peers.retain(|_, w| now.duration_since(w.started) < window);
            if peers.len() >= self.limits.max_peers {
                if let Some(oldest) = peers.iter().min_by_key(|(_, w)| w.started).map(|(k, _)| *k) {
                    peers.remove(&oldest);
                }
            }
        }
        let w = peers.entry(peer).or_insert(Window {
            started: now,
            refusals: 0,
        });
        if now.duration_since(w.started) >= self.limits.window {
            *w = Window {
                started: now,
                refusals: 0,
            };
        }
        w.refusals = w.refusals.saturating_add(1);
        if w.refusals == self.limits.max_refusals {
            tracing::info!(%peer, refusals = w.refusals, window_s = self.limits.window.as_secs(), "join refusals from this peer reached the bound: its joins are answered RESOURCE_EXHAUSTED until its window ends");
        }
    }

    /// Joins answered RESOURCE_EXHAUSTED by the limiter.
    pub fn limited(&self) -> u64 {
        self.limited.load(Ordering::Relaxed)
    }

    /// Joins that reached the JoinService and were refused.
    pub fn refusals(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}

/// RESOURCE_EXHAUSTED with the time left as a message and as `grpc-retry-pushback-ms`.
fn limited_status(left: Duration) -> Status {
    let ms = left.as_millis().max(1);
    let secs = left.as_secs() + u64::from(left.subsec_nanos() > 0);
    let mut status = Status::resource_exhausted(format!(
        "too many refused joins from this address; retry in {secs} s"
    ));
    if let Ok(v) = ms.to_string().parse() {
        status.metadata_mut().insert(PUSHBACK_KEY, v);
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(max: u32, window: Duration, max_peers: usize) -> JoinRefusalLimiter {
        JoinRefusalLimiter::new(JoinRefusalLimits {
            max_refusals: max,
            window,
            max_peers,
        })
    }

    #[test]
    fn a_peer_is_limited_after_its_refusals_and_others_are_not() {
        let l = limiter(3, Duration::from_secs(60), 16);
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        for _ in 0..3 {
            assert!(l.check(a).is_ok());
            l.refused(a);
        }
        let s = l.check(a).unwrap_err();
        assert_eq!(s.code(), tonic::Code::ResourceExhausted);
        assert_eq!(
            s.message(),
            "too many refused joins from this address; retry in 60 s"
        );
        let ms: u64 = s
            .metadata()
            .get(PUSHBACK_KEY)
            .unwrap()
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(ms > 59_000 && ms <= 60_000, "{ms}");
        assert!(l.check(b).is_ok());
        assert_eq!((l.limited(), l.refusals()), (1, 3));
    }

    #[test]
    fn the_window_ends() {
        let l = limiter(1, Duration::from_millis(30), 16);
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        l.refused(a);
        assert!(l.check(a).is_err());
        std::thread::sleep(Duration::from_millis(40));
        assert!(l.check(a).is_ok());
    }

    #[test]
    fn the_table_is_bounded() {
        let l = limiter(1, Duration::from_secs(60), 4);
        for i in 0..10u8 {
            l.refused(IpAddr::from([192, 0, 2, i]));
        }
        assert_eq!(l.peers.lock().unwrap().len(), 4);
        // The newest are kept.
        assert!(l.check(IpAddr::from([192, 0, 2, 9])).is_err());
    }

    #[test]
    fn zero_means_no_limit() {
        let l = limiter(0, Duration::from_secs(60), 4);
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        for _ in 0..100 {
            l.refused(a);
        }
        assert!(l.check(a).is_ok());
    }
}
