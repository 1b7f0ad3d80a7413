//! The set of revoked certificate serials the TLS verifier consults at every handshake.
//!
//! The revocation feed fills it (from the revocation projection at start, then from the exact
//! tailer); the verifier only reads it. Expired serials can be dropped: an expired certificate
//! fails the handshake on its validity alone.

use std::collections::HashMap;
use std::sync::RwLock;

/// Revoked serials (big-endian bytes as in the certificate) with their notAfter (unix seconds).
#[derive(Debug, Default)]
pub struct RevokedSerials {
    inner: RwLock<HashMap<Vec<u8>, i64>>,
}

impl RevokedSerials {
    pub fn new() -> Self {
        Self::default()
    }

    /// Marks `serial` revoked until its certificate's `not_after` (unix seconds).
    pub fn insert(&self, serial: Vec<u8>, not_after: i64) {
        if let Ok(mut m) = self.inner.write() {
            m.insert(serial, not_after);
        }
    }

    /// Whether `serial` is revoked. A poisoned lock answers "revoked": fail closed.
    pub fn contains(&self, serial: &[u8]) -> bool {
        match self.inner.read() {
            Ok(m) => m.contains_key(serial),
            Err(_) => true,
        }
    }

    /// Drops serials whose certificates expired before `now` (unix seconds).
    pub fn prune_expired(&self, now: i64) -> usize {
        match self.inner.write() {
            Ok(mut m) => {
                let before = m.len();
                m.retain(|_, not_after| *not_after >= now);
                before - m.len()
            }
            Err(_) => 0,
        }
    }

    pub fn len(&self) -> usize {
        self.inner.read().map_or(0, |m| m.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
