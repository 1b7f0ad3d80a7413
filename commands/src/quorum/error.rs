//! Why a quorum command was refused ([`QuorumRefusal`]) and what else it can fail with
//! ([`QuorumError`]): the domain's refusals, each under the code the CLI and the API name it by.

use domain::quorum::{
    ApprovalRefusal, ApproverSetError, BatchId, BatchRefusal, CancelRefusal, Kid, SetChangeRefusal,
    TrustDomain,
};
use domain::trust_bundle::{TrustBundleError, TrustBundleRefusal};
use events::store::StoreError;

use crate::run::{AsConflict, RunError};

/// Why a quorum command was refused. Each names its way out.
#[derive(Debug, thiserror::Error)]
pub enum QuorumRefusal {
    /// The configuration cannot be published (INVALID_CONFIG).
    #[error("invalid trust bundle configuration: {0}")]
    InvalidConfig(String),
    /// The approver set is invalid (INVALID_CONFIG).
    #[error("invalid approver set: {0}")]
    ApproverSet(#[from] ApproverSetError),
    /// The approver-set change is not taken (stale-epoch, approver-set-unsigned, pin-mismatch).
    #[error("approver set change refused ({reason}): {0}", reason = .0.reason())]
    SetChange(#[from] SetChangeRefusal),
    /// A step out of order (INVALID_STATE).
    #[error("invalid state: {0}")]
    InvalidState(String),
    /// Connected nodes do not hold the version the switch needs (INVALID_STATE; `--force` skips).
    #[error("Not switching: {behind} of {connected} connected node(s) have not applied trust version {version} ({sample}); wait for them or use --force")]
    NodesBehind {
        behind: usize,
        connected: usize,
        version: u64,
        sample: String,
    },
    /// The batch request is refused (INVALID_INPUT, or CONFLICT for a reused idempotency key).
    #[error(transparent)]
    Batch(#[from] BatchRefusal),
    /// The approval is refused.
    #[error(transparent)]
    Approval(#[from] ApprovalRefusal),
    /// The signature does not verify over this batch in the deployment's own trust domain
    /// (PERMISSION_DENIED): made for another deployment, another batch, or by another key.
    #[error("the approval by {kid} does not verify for trust domain {trust_domain} (this deployment's) over this batch's id, root, size and end: an approval signed for another trust domain or another batch is refused; sign it with `bcctl batch approve` against this deployment")]
    NotForDeployment {
        /// The signing key's id.
        kid: Kid,
        /// The deployment's trust domain, the one the signature was checked in.
        trust_domain: TrustDomain,
    },
    /// No such batch (NOT_FOUND).
    #[error("batch {0} not found")]
    BatchNotFound(BatchId),
}

impl QuorumRefusal {
    /// Whether the refusal is a CONFLICT (an idempotency key reused for another request).
    pub fn is_conflict(&self) -> bool {
        matches!(self, QuorumRefusal::Batch(BatchRefusal::Conflict { .. }))
    }

    /// The refusal's code, as the CLI and the API name it: `INVALID_CONFIG`, `INVALID_STATE`,
    /// `INVALID_INPUT`, `CONFLICT`, `NOT_FOUND` or `PERMISSION_DENIED` (an approval by a key
    /// outside the published set, or one that does not verify).
    pub fn code(&self) -> &'static str {
        match self {
            QuorumRefusal::InvalidConfig(_)
            | QuorumRefusal::ApproverSet(_)
            | QuorumRefusal::SetChange(_) => "INVALID_CONFIG",
            QuorumRefusal::InvalidState(_) | QuorumRefusal::NodesBehind { .. } => "INVALID_STATE",
            QuorumRefusal::Batch(BatchRefusal::Conflict { .. }) => "CONFLICT",
            QuorumRefusal::Batch(BatchRefusal::SubjectNotFound { .. }) => "NOT_FOUND",
            QuorumRefusal::Batch(_) => "INVALID_INPUT",
            QuorumRefusal::Approval(
                ApprovalRefusal::NotPending { .. } | ApprovalRefusal::Expired { .. },
            ) => "INVALID_STATE",
            QuorumRefusal::Approval(
                ApprovalRefusal::UnknownApprover { .. } | ApprovalRefusal::BadSignature { .. },
            )
            | QuorumRefusal::NotForDeployment { .. } => "PERMISSION_DENIED",
            QuorumRefusal::BatchNotFound(_) => "NOT_FOUND",
        }
    }
}

impl From<TrustBundleRefusal> for QuorumRefusal {
    fn from(refusal: TrustBundleRefusal) -> Self {
        match refusal {
            TrustBundleRefusal::InvalidConfig(why) => QuorumRefusal::InvalidConfig(why),
            TrustBundleRefusal::SetChange(r) => QuorumRefusal::SetChange(r),
            TrustBundleRefusal::InvalidState(why) => QuorumRefusal::InvalidState(why),
            TrustBundleRefusal::NodesBehind {
                behind,
                connected,
                version,
                sample,
            } => QuorumRefusal::NodesBehind {
                behind,
                connected,
                version,
                sample,
            },
        }
    }
}

impl From<CancelRefusal> for QuorumRefusal {
    fn from(refusal: CancelRefusal) -> Self {
        QuorumRefusal::InvalidState(refusal.to_string())
    }
}

/// What a quorum command can fail with.
#[derive(Debug, thiserror::Error)]
pub enum QuorumError {
    #[error("refused: {0}")]
    Refused(#[from] QuorumRefusal),
    #[error("{0}")]
    Run(#[from] RunError),
    /// Stored state that cannot be read back (a bug or a corrupt row).
    #[error("stored quorum state is unreadable: {0}")]
    Corrupt(String),
}

impl QuorumError {
    /// The refusal, if this is one.
    pub fn refusal(&self) -> Option<&QuorumRefusal> {
        match self {
            QuorumError::Refused(r) => Some(r),
            _ => None,
        }
    }
}

impl From<StoreError> for QuorumError {
    fn from(e: StoreError) -> Self {
        QuorumError::Run(RunError::Store(e))
    }
}

impl From<TrustBundleError> for QuorumError {
    fn from(e: TrustBundleError) -> Self {
        match e {
            TrustBundleError::Refused(r) => QuorumError::Refused(r.into()),
            TrustBundleError::Corrupt(why) => QuorumError::Corrupt(why),
        }
    }
}

impl AsConflict for QuorumError {
    fn into_conflict(self) -> Result<StoreError, Self> {
        match self {
            QuorumError::Run(run) => run.into_conflict().map_err(QuorumError::Run),
            other => Err(other),
        }
    }
}

/// A refusal as a command's error.
pub(crate) fn refused<T>(refusal: impl Into<QuorumRefusal>) -> Result<T, QuorumError> {
    Err(QuorumError::Refused(refusal.into()))
}

/// A stored value that cannot be read back.
pub(crate) fn corrupt(what: &str, e: impl std::fmt::Display) -> QuorumError {
    QuorumError::Corrupt(format!("{what}: {e}"))
}
