//! Every read of `sites`, `boot_entries` and `site_leases`: inside a command's transaction
//! (`&mut StoreTx`) or outside one (`&EventStore`). Rows come back as they are stored; turning
//! them into domain state is the caller's (`commands::site`).

use events::store::{EventStore, StoreError, StoreTx};

crate::from_row! {
    /// A `sites` row.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct SiteRow {
        pub site_id: String,
        pub tenant_id: String,
        pub description: String,
        pub default_pool_id: Option<String>,
        pub created_by: String,
        pub created_at_us: i64,
        pub updated_at_us: i64,
        /// The `site/<id>` stream's version (boot entry events move it too).
        pub version: i64,
        pub position: i64,
    }
}

const SITE_COLUMNS: &str = "site_id, tenant_id, description, default_pool_id, created_by, \
    created_at_us, updated_at_us, version, position";

crate::from_row! {
    /// A `boot_entries` row.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct BootEntryRow {
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
        pub removed: bool,
        pub removed_by: Option<String>,
        pub remove_reason: Option<String>,
        pub created_at_us: i64,
        pub updated_at_us: i64,
        pub version: i64,
        pub position: i64,
    }
}

const BOOT_ENTRY_COLUMNS: &str = "entry_id, site_id, tenant_id, mac, product_uuid, kernel_url, \
    initrd_url, kernel_args, pool_id, not_after_us, added_by, removed, removed_by, \
    remove_reason, created_at_us, updated_at_us, version, position";

crate::from_row! {
    /// A `site_leases` row.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct SiteLeaseRow {
        pub site_id: String,
        pub lease: String,
        pub holder_node_id: String,
        pub epoch: i64,
        pub expires_at_us: i64,
        pub released: bool,
        pub release_cause: Option<String>,
        pub acquired_at_us: i64,
        pub updated_at_us: i64,
        pub version: i64,
        pub position: i64,
    }
}

const LEASE_COLUMNS: &str = "site_id, lease, holder_node_id, epoch, expires_at_us, released, \
    release_cause, acquired_at_us, updated_at_us, version, position";

/// The site with this id.
pub async fn site(tx: &mut StoreTx, site_id: &str) -> Result<Option<SiteRow>, StoreError> {
    let sql = format!("SELECT {SITE_COLUMNS} FROM sites WHERE site_id = $1");
    tx.fetch_optional(&sql, &[site_id.into()]).await
}

/// The site with this id, outside any transaction.
pub async fn site_in_store(
    store: &EventStore,
    site_id: &str,
) -> Result<Option<SiteRow>, StoreError> {
    let sql = format!("SELECT {SITE_COLUMNS} FROM sites WHERE site_id = $1");
    store.fetch_optional(&sql, &[site_id.into()]).await
}

/// Every site (of one tenant, or all when `tenant` is `None`), by id.
pub async fn sites_in_store(
    store: &EventStore,
    tenant: Option<&str>,
) -> Result<Vec<SiteRow>, StoreError> {
    let sql = format!(
        "SELECT {SITE_COLUMNS} FROM sites WHERE ($1 = '' OR tenant_id = $1) ORDER BY site_id"
    );
    store
        .fetch_all(&sql, &[tenant.unwrap_or_default().into()])
        .await
}

/// The boot entry with this id (active or removed).
pub async fn boot_entry(
    tx: &mut StoreTx,
    entry_id: &str,
) -> Result<Option<BootEntryRow>, StoreError> {
    let sql = format!("SELECT {BOOT_ENTRY_COLUMNS} FROM boot_entries WHERE entry_id = $1");
    tx.fetch_optional(&sql, &[entry_id.into()]).await
}

/// The site's entries not removed for this MAC (the caller checks their end), newest first.
pub async fn boot_entries_for_mac(
    tx: &mut StoreTx,
    site_id: &str,
    mac: &str,
) -> Result<Vec<BootEntryRow>, StoreError> {
    let sql = format!(
        "SELECT {BOOT_ENTRY_COLUMNS} FROM boot_entries WHERE site_id = $1 AND mac = $2 \
         AND NOT removed ORDER BY position DESC"
    );
    tx.fetch_all(&sql, &[site_id.into(), mac.into()]).await
}

/// Every entry of the site (removed ones too), oldest first, outside any transaction.
pub async fn boot_entries_in_store(
    store: &EventStore,
    site_id: &str,
) -> Result<Vec<BootEntryRow>, StoreError> {
    let sql = format!(
        "SELECT {BOOT_ENTRY_COLUMNS} FROM boot_entries WHERE site_id = $1 \
         ORDER BY created_at_us, entry_id"
    );
    store.fetch_all(&sql, &[site_id.into()]).await
}

/// The site's boot lease, if it was ever held.
pub async fn site_lease(
    tx: &mut StoreTx,
    site_id: &str,
) -> Result<Option<SiteLeaseRow>, StoreError> {
    let sql = format!("SELECT {LEASE_COLUMNS} FROM site_leases WHERE site_id = $1");
    tx.fetch_optional(&sql, &[site_id.into()]).await
}

/// The site's boot lease outside any transaction.
pub async fn site_lease_in_store(
    store: &EventStore,
    site_id: &str,
) -> Result<Option<SiteLeaseRow>, StoreError> {
    let sql = format!("SELECT {LEASE_COLUMNS} FROM site_leases WHERE site_id = $1");
    store.fetch_optional(&sql, &[site_id.into()]).await
}
