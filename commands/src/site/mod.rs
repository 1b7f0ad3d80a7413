//! Sites, their boot entries and boot lease (issue 20): the operator commands ([`Sites`],
//! [`BootEntries`]: `bcctl site …`) and the site agent's calls ([`SiteAgent`]: SiteLease and
//! BootToken, which the gateway serves over the agent's mTLS connection). Each is one
//! transaction: read the rows, let [`domain::site`] decide, append at the stream's version, apply
//! the projections, read the row back.
//!
//! | module | job |
//! | --- | --- |
//! | `admin` | [`Sites`], [`BootEntries`]: the operator commands |
//! | `agent` | [`SiteAgent`]: the lease and the discovery token of a boot |
//! | `rows` | projection rows into domain state |
//! | [`views`] | what the commands print and answer |

mod admin;
mod agent;
pub(crate) mod rows;
pub mod views;

use std::time::Duration;

use domain::site::{AgentRefusal, SiteRefusal};

use crate::identity::IdentityError;
use crate::{AsConflict, RunError};

pub use admin::{BootEntries, NewBootEntry, NewSite, Sites};
pub use agent::{BootTokenAnswer, LeaseAction, LeaseAnswer, SiteAgent};
pub use views::{BootEntryView, LeaseView, SiteDetail, SiteView};

/// The reads of `sites`, `boot_entries` and `site_leases`.
pub use projections::attest::site_read as read;

/// How long a discovery token minted for a boot lives at most: 15 minutes (µs).
pub const DISCOVERY_TOKEN_TTL_US: i64 = 15 * 60 * 1_000_000;

/// What the serving configuration sets for sites (`[sites]` of `bcctl serve`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SiteSettings {
    /// How long a boot lease holding lasts unless renewed (`boot_lease_ttl`, 60 s by default);
    /// the holder is told to renew every third of it.
    pub boot_lease_ttl: Duration,
}

impl Default for SiteSettings {
    fn default() -> Self {
        SiteSettings {
            boot_lease_ttl: Duration::from_secs(60),
        }
    }
}

impl SiteSettings {
    /// The TTL in µs (at least 1).
    pub fn ttl_us(&self) -> i64 {
        i64::try_from(self.boot_lease_ttl.as_micros())
            .unwrap_or(i64::MAX)
            .max(1)
    }

    /// How often the holder should renew: a third of the TTL, in ms.
    pub fn renew_every_ms(&self) -> i64 {
        (self.ttl_us() / 3_000).max(1)
    }
}

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
            SiteError::NotSiteAgent(_) | SiteError::NoIdentity => "PERMISSION_DENIED",
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
