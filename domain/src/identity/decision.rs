//! What every identity decider answers: the domain's one [`crate::decision::Decision`] over
//! identity events (the events and the outcome) or a [`DecideError`], and the two helpers they
//! all use (`unix_us`, `sha256`).

use super::state::IdentityEvent;

/// The domain's one [`crate::decision::Decision`], its events the identity events (kept
/// under this name for the identity and attestation deciders).
pub type Decision<O> = crate::decision::Decision<IdentityEvent, O>;

pub use crate::decision::{DecideError, Refused};

/// Microseconds since the epoch of a date-time (saturating).
pub fn unix_us(t: time::OffsetDateTime) -> i64 {
    i64::try_from(t.unix_timestamp_nanos() / 1000).unwrap_or(i64::MAX)
}

/// SHA-256.
pub fn sha256(data: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(data).into()
}
