//! Who caused an event: the authenticated identity and role an operator decision is recorded
//! under.
//!
//! The command layer never takes an actor from a request field: the edge that authenticated the
//! caller (the admin API's mTLS handshake, or the local user of a direct run) makes one and opens
//! the store as it ([`crate::store::EventStore::acting_as`]); every event appended through that
//! store carries it. Events nobody decided (a node's join, the sequencer's seal) carry none.

/// The longest actor id or role the log stores, in bytes.
pub const MAX_ACTOR_LEN: usize = 256;

/// An authenticated actor: an id (a SPIFFE ID such as `spiffe://td/operator/alice`, or
/// `local:<user>@<host>` for a direct run) and its role (`admin`, `operator`, `approver`,
/// `auditor`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Actor {
    id: String,
    role: String,
}

/// Why an actor could not be made.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ActorError {
    #[error("the actor's {field} is empty")]
    Empty { field: &'static str },
    #[error("the actor's {field} is {len} bytes long; at most {MAX_ACTOR_LEN}")]
    TooLong { field: &'static str, len: usize },
    #[error("the actor's {field} holds a control character")]
    Control { field: &'static str },
}

fn check(field: &'static str, s: &str) -> Result<(), ActorError> {
    if s.is_empty() {
        return Err(ActorError::Empty { field });
    }
    if s.len() > MAX_ACTOR_LEN {
        return Err(ActorError::TooLong {
            field,
            len: s.len(),
        });
    }
    if s.chars().any(char::is_control) {
        return Err(ActorError::Control { field });
    }
    Ok(())
}

impl Actor {
    /// An actor, checked: both parts non-empty, at most [`MAX_ACTOR_LEN`] bytes, printable.
    pub fn new(id: impl Into<String>, role: impl Into<String>) -> Result<Actor, ActorError> {
        let (id, role) = (id.into(), role.into());
        check("id", &id)?;
        check("role", &role)?;
        Ok(Actor { id, role })
    }

    /// The actor's id (a SPIFFE ID, or `local:<user>@<host>`).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The actor's role.
    pub fn role(&self) -> &str {
        &self.role
    }
}

impl std::fmt::Display for Actor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.id, self.role)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actors_are_checked() {
        assert!(Actor::new("spiffe://td/operator/alice", "operator").is_ok());
        assert_eq!(
            Actor::new("", "admin"),
            Err(ActorError::Empty { field: "id" })
        );
        assert_eq!(
            Actor::new("a\nb", "admin"),
            Err(ActorError::Control { field: "id" })
        );
        assert_eq!(
            Actor::new("a", "x".repeat(257)),
            Err(ActorError::TooLong {
                field: "role",
                len: 257
            })
        );
    }
}
