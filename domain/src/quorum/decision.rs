//! What a decider answers when it accepts a command: the events to append, in order, and the
//! outcome the caller reports. Handlers append `events` and return `outcome`; they never search
//! the events for what was decided.

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
}
