//! Why a site command or a site agent's call failed ([`SiteError`]).

use domain::site::{AgentRefusal, SiteCallProofRefusal, SiteRefusal};

use crate::identity::IdentityError;
use crate::{AsConflict, RunError};

/// Why a site command or a site agent's call failed.
#[derive(Debug, thiserror::Error)]
pub enum SiteError {
    /// The operator command was refused (bad input, unknown id, wrong state).
    #[error(transparent)]
    Refused(#[from] SiteRefusal),
    /// The caller's certificate is not a site agent's (the reason is for the log only; the
    /// caller is told "site agents only").
    #[error("PERMISSION_DENIED: site agents only ({0})")]
    NotSiteAgent(AgentRefusal),
    /// The call's proof by the agent's key is missing, does not verify or is outside the clock
    /// window (the agent is told the reason: it made the proof).
    #[error("PERMISSION_DENIED: {0}")]
    CallProof(SiteCallProofRefusal),
    /// The certificate carries no node identity of this trust domain.
    #[error("PERMISSION_DENIED: site agents only (the certificate carries no node identity)")]
    NoIdentity,
    /// The caller does not hold the site's boot lease at the epoch it named.
    #[error(
        "FAILED_PRECONDITION: node {node_id} does not hold the boot lease of site {site_id} at \
         epoch {epoch} (ACQUIRE it first)"
    )]
    NotLeaseHolder {
        /// The caller.
        node_id: String,
        /// Its site.
        site_id: String,
        /// The epoch it named.
        epoch: u64,
    },
    /// The site has no active boot entry for the MAC.
    #[error("NOT_FOUND: site {site_id} has no active boot entry for MAC {mac}")]
    NoBootEntry {
        /// The site.
        site_id: String,
        /// The MAC, normalized.
        mac: String,
    },
    /// The store, a projection, a row, or the token decision failed.
    #[error(transparent)]
    Identity(#[from] IdentityError),
}

impl SiteError {
    /// The error's code, as the CLI and the API name it.
    pub fn code(&self) -> &'static str {
        match self {
            SiteError::Refused(r) => r.code(),
            SiteError::NotSiteAgent(_) | SiteError::NoIdentity | SiteError::CallProof(_) => {
                "PERMISSION_DENIED"
            }
            SiteError::NotLeaseHolder { .. } => "FAILED_PRECONDITION",
            SiteError::NoBootEntry { .. } => "NOT_FOUND",
            SiteError::Identity(IdentityError::Admin(_)) => "INVALID_INPUT",
            SiteError::Identity(_) => "INTERNAL",
        }
    }
}

impl From<RunError> for SiteError {
    fn from(e: RunError) -> Self {
        SiteError::Identity(IdentityError::Run(e))
    }
}

impl From<events::store::StoreError> for SiteError {
    fn from(e: events::store::StoreError) -> Self {
        SiteError::Identity(IdentityError::from(e))
    }
}

impl AsConflict for SiteError {
    fn into_conflict(self) -> Result<events::store::StoreError, Self> {
        match self {
            SiteError::Identity(e) => e.into_conflict().map_err(SiteError::Identity),
            other => Err(other),
        }
    }
}
