//! Serializable views of sites, boot entries and boot leases for the CLI (`--json`) and
//! operators. Times are µs since the epoch; keys camelCase.

use serde::Serialize;

use super::read::{BootEntryRow, SiteLeaseRow, SiteRow};

/// A site.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SiteView {
    pub site_id: String,
    pub tenant_id: String,
    pub description: String,
    pub default_pool_id: Option<String>,
    pub created_by: String,
    pub created_at_us: i64,
    pub updated_at_us: i64,
    pub version: i64,
    pub position: i64,
}

impl From<&SiteRow> for SiteView {
    fn from(r: &SiteRow) -> Self {
        SiteView {
            site_id: r.site_id.clone(),
            tenant_id: r.tenant_id.clone(),
            description: r.description.clone(),
            default_pool_id: r.default_pool_id.clone(),
            created_by: r.created_by.clone(),
            created_at_us: r.created_at_us,
            updated_at_us: r.updated_at_us,
            version: r.version,
            position: r.position,
        }
    }
}

/// A boot entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BootEntryView {
    pub entry_id: String,
    pub site_id: String,
    pub tenant_id: String,
    pub mac: String,
    pub product_uuid: Option<String>,
    pub kernel_url: String,
    pub initrd_url: String,
    pub kernel_args: String,
    pub pool_id: String,
    pub not_after_us: i64,
    pub added_by: String,
    /// `active`, `removed` or `expired` (past `notAfterUs`).
    pub status: String,
    pub removed_by: Option<String>,
    pub remove_reason: Option<String>,
    pub created_at_us: i64,
    pub updated_at_us: i64,
    pub position: i64,
}

impl BootEntryView {
    /// The row as it stands at `now_us`.
    pub fn new(r: &BootEntryRow, now_us: i64) -> Self {
        let status = if r.removed {
            "removed"
        } else if now_us >= r.not_after_us {
            "expired"
        } else {
            "active"
        };
        BootEntryView {
            entry_id: r.entry_id.clone(),
            site_id: r.site_id.clone(),
            tenant_id: r.tenant_id.clone(),
            mac: r.mac.clone(),
            product_uuid: r.product_uuid.clone(),
            kernel_url: r.kernel_url.clone(),
            initrd_url: r.initrd_url.clone(),
            kernel_args: r.kernel_args.clone(),
            pool_id: r.pool_id.clone(),
            not_after_us: r.not_after_us,
            added_by: r.added_by.clone(),
            status: status.into(),
            removed_by: r.removed_by.clone(),
            remove_reason: r.remove_reason.clone(),
            created_at_us: r.created_at_us,
            updated_at_us: r.updated_at_us,
            position: r.position,
        }
    }
}

/// A site's boot lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseView {
    /// `site:<id>:boot`.
    pub lease: String,
    /// Whether someone holds it now.
    pub held: bool,
    /// The live holder (`null`: free).
    pub holder_node_id: Option<String>,
    /// The node of the last holding, live or not.
    pub last_holder_node_id: String,
    pub epoch: u64,
    /// When the current (or last) holding lapses.
    pub expires_at_us: i64,
    /// `released` or `fenced` when the last holding was given up.
    pub release_cause: Option<String>,
    pub acquired_at_us: i64,
    pub updated_at_us: i64,
    pub position: i64,
}

impl LeaseView {
    /// The row as it stands at `now_us`.
    pub fn new(r: &SiteLeaseRow, now_us: i64) -> Self {
        let held = !r.released && now_us < r.expires_at_us;
        LeaseView {
            lease: r.lease.clone(),
            held,
            holder_node_id: held.then(|| r.holder_node_id.clone()),
            last_holder_node_id: r.holder_node_id.clone(),
            epoch: u64::try_from(r.epoch).unwrap_or(0),
            expires_at_us: r.expires_at_us,
            release_cause: r.release_cause.clone(),
            acquired_at_us: r.acquired_at_us,
            updated_at_us: r.updated_at_us,
            position: r.position,
        }
    }
}

/// `site show`: the site, its lease (`null`: never held) and its boot entries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SiteDetail {
    pub site: SiteView,
    pub lease: Option<LeaseView>,
    pub boot_entries: Vec<BootEntryView>,
}
