//! What every identity decider answers: a [`Decision`] (the events and the outcome) or a
//! [`DecideError`], and the two helpers they all use (`unix_us`, `sha256`).

use super::state::IdentityEvent;

/// What a decision decided: the events to append, and the outcome the shell answers with (so
/// no handler searches its own events for it).
#[derive(Debug, Clone, PartialEq)]
pub struct Decision<O> {
    /// The events, in the order they are appended.
    pub events: Vec<IdentityEvent>,
    /// What the caller is told.
    pub outcome: O,
}

impl Decision<()> {
    /// A decision whose caller is told nothing beyond the events (the operator commands read
    /// the row they changed back).
    pub fn events_only(events: Vec<IdentityEvent>) -> Self {
        Decision {
            events,
            outcome: (),
        }
    }
}

/// Why a decision produced no events.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecideError<R: std::fmt::Debug + std::fmt::Display> {
    /// A refusal: an outcome, recorded as a `security.*.refused` event.
    #[error("refused: {0}")]
    Refused(R),
    /// A bug or a broken deployment (the CA cannot sign): an error, not a refusal.
    #[error("the decision failed: {0}")]
    Failed(String),
}

impl<R: std::fmt::Debug + std::fmt::Display> From<R> for DecideError<R> {
    fn from(r: R) -> Self {
        DecideError::Refused(r)
    }
}

/// Microseconds since the epoch of a date-time (saturating).
pub fn unix_us(t: time::OffsetDateTime) -> i64 {
    i64::try_from(t.unix_timestamp_nanos() / 1000).unwrap_or(i64::MAX)
}

/// SHA-256.
pub fn sha256(data: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(data).into()
}
