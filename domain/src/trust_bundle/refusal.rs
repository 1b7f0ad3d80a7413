//! Why a trust-bundle decision is refused, and the errors that are not refusals.

use super::content::ContentError;
use crate::quorum::SetChangeRefusal;

/// Why a trust-bundle command is refused. Each names its way out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrustBundleRefusal {
    /// The configuration cannot be published (INVALID_CONFIG).
    #[error("invalid trust bundle configuration: {0}")]
    InvalidConfig(String),
    /// The approver-set change is not taken (stale-epoch, approver-set-unsigned, pin-mismatch).
    #[error("approver set change refused ({reason}): {0}", reason = .0.reason())]
    SetChange(SetChangeRefusal),
    /// A step out of order (INVALID_STATE).
    #[error("invalid state: {0}")]
    InvalidState(String),
    /// Connected nodes do not hold the version the switch needs (INVALID_STATE; `--force` skips).
    #[error("Not switching: {behind} of {connected} connected node(s) have not applied trust version {version} ({sample}); wait for them or use --force")]
    NodesBehind {
        /// Connected nodes below the version.
        behind: usize,
        /// Connected nodes.
        connected: usize,
        /// The version the switch needs.
        version: u64,
        /// Up to five of the nodes behind, with their versions.
        sample: String,
    },
}

/// What a trust-bundle decision can fail with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrustBundleError {
    /// A refusal.
    #[error("refused: {0}")]
    Refused(#[from] TrustBundleRefusal),
    /// The published state cannot be what it is (a bug or a corrupt row).
    #[error("stored trust bundle state is unreadable: {0}")]
    Corrupt(String),
}

impl From<ContentError> for TrustBundleError {
    fn from(e: ContentError) -> Self {
        TrustBundleError::Corrupt(e.to_string())
    }
}

pub(crate) fn invalid_config<T>(why: &str) -> Result<T, TrustBundleRefusal> {
    Err(TrustBundleRefusal::InvalidConfig(why.to_string()))
}

pub(crate) fn invalid_state<T>(why: impl Into<String>) -> Result<T, TrustBundleError> {
    Err(TrustBundleError::Refused(TrustBundleRefusal::InvalidState(
        why.into(),
    )))
}
