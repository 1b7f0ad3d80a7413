//! Event types of `proto/bc/events/v1/sites.proto`: sites, boot leases, boot entries, cloud
//! accounts.

use super::*;

/// The lease name of a site's boot lease: `site:<site_id>:boot`.
pub fn site_boot_lease(site_id: &str) -> String {
    format!("site:{site_id}:boot")
}

event_payload! {
    SiteCreated => "site.created", version 1;
    BootEntryAdded => "site.boot.added", version 1;
    BootEntryRemoved => "site.boot.removed", version 1;
    SiteLeaseAcquired => "site.lease.acquired", version 1;
    SiteLeaseRenewed => "site.lease.renewed", version 1;
    SiteLeaseReleased => "site.lease.released", version 1;
    CloudAccountAdded => "cloud.account.added", version 1;
    CloudAccountRemoved => "cloud.account.removed", version 1;
}
