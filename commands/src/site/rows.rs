//! Projection rows of `sites`, `boot_entries` and `site_leases` into domain state.

use domain::attest::BootEntryState;
use domain::site::{BootLease, SiteState};

use super::read::{BootEntryRow, SiteLeaseRow, SiteRow};
use crate::identity::IdentityError;

/// A `sites` row.
pub(crate) fn site_state(row: &SiteRow) -> SiteState {
    SiteState {
        site_id: row.site_id.clone(),
        tenant_id: row.tenant_id.clone(),
        description: row.description.clone(),
        default_pool_id: row.default_pool_id.clone(),
    }
}

/// A `boot_entries` row.
pub(crate) fn boot_entry_state(row: &BootEntryRow) -> BootEntryState {
    BootEntryState {
        entry_id: row.entry_id.clone(),
        site_id: row.site_id.clone(),
        tenant_id: row.tenant_id.clone(),
        mac: row.mac.clone(),
        product_uuid: row.product_uuid.clone(),
        pool_id: row.pool_id.clone(),
        not_after_us: row.not_after_us,
        removed: row.removed,
    }
}

/// A `site_leases` row.
pub(crate) fn lease_state(row: &SiteLeaseRow) -> Result<BootLease, IdentityError> {
    let epoch = u64::try_from(row.epoch).map_err(|_| {
        IdentityError::Corrupt(format!(
            "site_leases {}: epoch {} is negative",
            row.site_id, row.epoch
        ))
    })?;
    Ok(BootLease {
        site_id: row.site_id.clone(),
        holder_node_id: row.holder_node_id.clone(),
        epoch,
        expires_at_us: row.expires_at_us,
        released: row.released,
    })
}
