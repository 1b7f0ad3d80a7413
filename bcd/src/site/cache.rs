//! The boot tokens the agent holds ([`BootTokenCache`]): one control-plane answer per (MAC,
//! lease epoch), reused for every script asked for that MAC while its token has more than
//! [`REUSE_MARGIN_MS`] left by the server's clock (decision 0083). So an anonymous client asking
//! `/boot.ipxe` again and again for a registered MAC makes one `BootToken`, one `token.created`
//! and one live token, not one per request. Asks for one MAC wait for each other (one call in
//! flight per MAC); a refused or failed call caches nothing. The assertion is signed afresh for
//! every script (it names the asking address and its own issue time).
//!
//! The token is secret: the cache lives in memory only, never on disk and never in the log.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// A cached token is not handed out when less than this is left of it (the machine needs the
/// time to load its kernel and join).
pub const REUSE_MARGIN_MS: i64 = 60_000;

/// One MAC's slot at one epoch: the answer, once there is one.
pub type Slot = Arc<tokio::sync::Mutex<Option<proto::BootTokenResponse>>>;

/// The cached answers, by (MAC, lease epoch).
#[derive(Debug, Default)]
pub struct BootTokenCache {
    slots: Mutex<HashMap<(String, u64), Slot>>,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock cannot leave the plain data inconsistent.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Whether `answer` may be handed out again at `server_now_ms`.
pub fn reusable(answer: &proto::BootTokenResponse, server_now_ms: i64) -> bool {
    answer.token_expires_at_ms > 0
        && server_now_ms < answer.token_expires_at_ms.saturating_sub(REUSE_MARGIN_MS)
}

impl BootTokenCache {
    /// The slot of `mac` at `epoch`. Slots of other epochs, and slots whose answer is no
    /// longer reusable at `server_now_ms`, are forgotten on the way.
    pub fn slot(&self, mac: &str, epoch: u64, server_now_ms: i64) -> Slot {
        let mut slots = locked(&self.slots);
        slots.retain(|(_, e), slot| {
            *e == epoch
                && match slot.try_lock() {
                    Ok(answer) => answer.as_ref().is_none_or(|a| reusable(a, server_now_ms)),
                    Err(_) => true, // a call in flight
                }
        });
        slots.entry((mac.to_owned(), epoch)).or_default().clone()
    }

    /// How many slots are held (for the tests).
    pub fn len(&self) -> usize {
        locked(&self.slots).len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(expires: i64) -> proto::BootTokenResponse {
        proto::BootTokenResponse {
            token: "bcjt_x".into(),
            token_expires_at_ms: expires,
            ..Default::default()
        }
    }

    #[test]
    fn a_token_is_reused_until_its_margin() {
        assert!(reusable(&answer(100_000), 39_999));
        assert!(!reusable(&answer(100_000), 40_000));
        assert!(!reusable(&answer(0), 0), "no expiry named: never reused");
    }

    #[tokio::test]
    async fn one_slot_per_mac_and_epoch_and_stale_ones_forgotten() {
        let cache = BootTokenCache::default();
        let slot = cache.slot("aa:bb:cc:dd:ee:ff", 1, 0);
        *slot.lock().await = Some(answer(100_000));
        let again = cache.slot("aa:bb:cc:dd:ee:ff", 1, 1_000);
        assert!(Arc::ptr_eq(&slot, &again));
        cache.slot("aa:bb:cc:dd:ee:01", 1, 1_000);
        assert_eq!(cache.len(), 2);
        // A new epoch forgets the old one's tokens.
        let other = cache.slot("aa:bb:cc:dd:ee:ff", 2, 1_000);
        assert!(!Arc::ptr_eq(&slot, &other));
        assert_eq!(cache.len(), 1);
        // An answer past its margin is forgotten.
        *other.lock().await = Some(answer(50_000));
        cache.slot("aa:bb:cc:dd:ee:01", 2, 45_000);
        assert_eq!(cache.len(), 1);
    }
}
