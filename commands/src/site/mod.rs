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
mod error;
pub(crate) mod rows;
mod settings;
pub mod views;

pub use admin::{BootEntries, NewBootEntry, NewSite, Sites};
pub use agent::{BootTokenAnswer, LeaseAction, LeaseAnswer, SiteAgent};
pub use error::SiteError;
pub use settings::{SiteSettings, DISCOVERY_TOKEN_TTL_US};
pub use views::{BootEntryView, LeaseView, SiteDetail, SiteView};

/// The reads of `sites`, `boot_entries` and `site_leases`.
pub use projections::attest::site_read as read;
