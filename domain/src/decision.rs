//! The one shape every decider of the domain answers in.
//!
//! A decider is a pure function `decide(command, state, now, …) -> Result<Decision<E, O>, R>`:
//! on acceptance a [`Decision`] (the events to append, in order, and the outcome the caller is
//! told: no handler searches its own events for what was decided); on refusal its refusal `R`.
//! A refusal the log records with events of its own (a cloned certificate's revocation beside
//! `renew:superseded`) is a [`Refused`], which carries them out. A decider that may also fail
//! for a reason that is no refusal (a bug, a CA that cannot sign) answers [`DecideError`].
//!
//! Time and entropy come in as arguments; nothing here reads a clock or the OS's randomness.

/// A decision: the events it produces and what the caller is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision<E, O> {
    /// The events to append, in order (empty when nothing changes).
    pub events: Vec<E>,
    /// What the command answers.
    pub outcome: O,
}

impl<E, O> Decision<E, O> {
    /// A decision that changes nothing.
    pub fn unchanged(outcome: O) -> Self {
        Decision {
            events: Vec::new(),
            outcome,
        }
    }

    /// The same events with another outcome.
    pub fn map_outcome<P>(self, f: impl FnOnce(O) -> P) -> Decision<E, P> {
        Decision {
            events: self.events,
            outcome: f(self.outcome),
        }
    }
}

impl<E> Decision<E, ()> {
    /// A decision whose caller is told nothing beyond the events (the operator commands read
    /// the row they changed back).
    pub fn events_only(events: Vec<E>) -> Self {
        Decision {
            events,
            outcome: (),
        }
    }
}

/// A refusal and the events the log records with it (most refusals carry none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused<R, E> {
    /// Why.
    pub reason: R,
    /// What is appended all the same, in order.
    pub events: Vec<E>,
}

impl<R, E> Refused<R, E> {
    /// A refusal that appends something.
    pub fn with_events(reason: R, events: Vec<E>) -> Self {
        Refused { reason, events }
    }
}

impl<R, E> From<R> for Refused<R, E> {
    fn from(reason: R) -> Self {
        Refused {
            reason,
            events: Vec::new(),
        }
    }
}

impl<R: std::fmt::Display, E> std::fmt::Display for Refused<R, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.reason.fmt(f)
    }
}

/// Why a decision produced no decision: a refusal (an outcome, recorded as a
/// `security.*.refused` event) or a failure (a bug or a broken deployment: an error).
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
