//! What an identity handler can fail with ([`IdentityError`]), and the one message every
//! refused join or renewal carries.

use domain::identity::{AdminRefusal, NamesRefusal};
use events::store::StoreError;
use projections::ProjectionError;

use super::answers::JoinOutcome;
use super::attestors;
use crate::{AsConflict, RunError};

/// The message every refused join carries.
pub const JOIN_REFUSED: &str = "Join refused";
/// The message every refused renewal carries.
pub const RENEW_REFUSED: &str = "Renew refused";

/// What an identity handler can fail with.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// The join or renewal was refused; the reason is only in the refusal event.
    #[error("ACCESS_DENIED: {0}")]
    AccessDenied(&'static str),
    /// The node renewed its bound of times in the last hour (spec 002): retry after
    /// `retry_after_ms` (the edge answers RESOURCE_EXHAUSTED with `grpc-retry-pushback-ms`).
    #[error(
        "RESOURCE_EXHAUSTED: node {node_id} renewed {per_hour} times in the last hour; the next \
         renewal is allowed in {retry_after_ms} ms"
    )]
    RenewalsExhausted {
        /// The node.
        node_id: String,
        /// The bound.
        per_hour: usize,
        /// How long until the next renewal is allowed.
        retry_after_ms: u64,
    },
    /// An attestor this control plane does not run.
    #[error("UNSUPPORTED: attestor {0:?} is not registered")]
    UnsupportedAttestor(String),
    /// [`Joins::join`] was answered a deferral (pending approval or a challenge), not an
    /// admission; [`Joins::attest`] answers it as an outcome.
    #[error("the join was deferred: {}", .0.kind())]
    Deferred(Box<JoinOutcome>),
    /// An operator command was refused (bad input, unknown id, wrong state).
    #[error(transparent)]
    Admin(#[from] AdminRefusal),
    /// A change of a node's names was refused (`bcctl node names`): bad names, the node's
    /// state, a name held elsewhere, one not held, too many.
    #[error(transparent)]
    Names(#[from] NamesRefusal),
    /// The store or a projection failed, or conflicts did not settle.
    #[error(transparent)]
    Run(#[from] RunError),
    /// A projection row that cannot be read back (corruption or a bug).
    #[error("corrupt identity row: {0}")]
    Corrupt(String),
    /// A decision failed for a reason that is not a refusal (the CA cannot sign, randomness).
    #[error("identity decision failed: {0}")]
    Failed(String),
    /// An out-of-process attestor gave no verdict: unreachable, an error status, too slow, or
    /// an answer its contract does not allow. Not a refusal: nothing is recorded or spent, and
    /// the edge answers UNAVAILABLE (the agent retries later).
    #[error(transparent)]
    AttestorUnavailable(#[from] attestors::RemoteAttestorError),
}

impl From<StoreError> for IdentityError {
    fn from(e: StoreError) -> Self {
        IdentityError::Run(RunError::Store(e))
    }
}

impl From<ProjectionError> for IdentityError {
    fn from(e: ProjectionError) -> Self {
        IdentityError::Run(RunError::Projection(e))
    }
}

impl AsConflict for IdentityError {
    /// Expected-version conflicts and unique-key violations of the projections (a token use or
    /// a renew proof spent by a concurrent command) are retried from a fresh read.
    fn into_conflict(self) -> Result<StoreError, Self> {
        match self {
            IdentityError::Run(RunError::Store(e))
            | IdentityError::Run(RunError::Projection(ProjectionError::Store(e)))
                if e.is_unique_violation() =>
            {
                Ok(e)
            }
            IdentityError::Run(r) => r.into_conflict().map_err(IdentityError::Run),
            other => Err(other),
        }
    }
}
