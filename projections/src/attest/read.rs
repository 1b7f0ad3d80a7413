//! Every read of `pools`, `join_requests`, `tpm_ek_allows` and `cloud_accounts`: inside a command's transaction (`&mut StoreTx`,
//! which sees the transaction's own writes) or outside one (`&EventStore`). Rows come back as
//! they are stored; turning them into domain state is the caller's
//! (`commands::attest::rows`).

use events::store::{EventStore, StoreError, StoreTx};

crate::from_row! {
    /// A `pools` row.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct PoolRow {
        pub pool_id: String,
        pub tenant_id: String,
        pub description: String,
        /// The attestor ids, comma-separated in the order given; `None`: any attestor.
        pub join_attestors: Option<String>,
        pub created_at_us: i64,
        pub updated_at_us: i64,
        pub version: i64,
        pub position: i64,
    }
}

impl PoolRow {
    /// The attestor ids of the policy, in the order given; `None`: any attestor.
    pub fn attestor_ids(&self) -> Option<Vec<String>> {
        self.join_attestors
            .as_deref()
            .map(|s| s.split(',').map(str::to_owned).collect())
    }
}

const POOL_COLUMNS: &str = "pool_id, tenant_id, description, join_attestors, created_at_us, \
    updated_at_us, version, position";

crate::from_row! {
    /// A `join_requests` row.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct JoinRequestRow {
        pub request_id: String,
        pub tenant_id: String,
        pub attestor: String,
        pub subject: Vec<u8>,
        pub csr_sha256: Vec<u8>,
        pub role: String,
        pub site_id: String,
        pub pool_id: String,
        pub node_id: Option<String>,
        pub token_id: Option<String>,
        pub product_uuid_sha256: Option<Vec<u8>>,
        pub macs_sha256: Option<Vec<u8>>,
        pub summary: String,
        /// `pending`, `approved`, `rejected`, `consumed` or `expired`.
        pub status: String,
        pub decided_by: Option<String>,
        pub decision_reason: Option<String>,
        pub joined_node_id: Option<String>,
        pub created_at_us: i64,
        pub expires_at_us: i64,
        pub updated_at_us: i64,
        pub version: i64,
        pub position: i64,
    }
}

const JOIN_REQUEST_COLUMNS: &str = "request_id, tenant_id, attestor, subject, csr_sha256, role, \
    site_id, pool_id, node_id, token_id, product_uuid_sha256, macs_sha256, summary, status, \
    decided_by, decision_reason, joined_node_id, created_at_us, expires_at_us, updated_at_us, \
    version, position";

/// A pool by id.
pub async fn pool(tx: &mut StoreTx, pool_id: &str) -> Result<Option<PoolRow>, StoreError> {
    let sql = format!("SELECT {POOL_COLUMNS} FROM pools WHERE pool_id = $1");
    tx.fetch_optional(&sql, &[pool_id.into()]).await
}

const POOLS_OF_TENANT: &str = "FROM pools WHERE ($1 = '' OR tenant_id = $1) ORDER BY pool_id";

/// Every pool of `tenant` (of every tenant when `None`), by id.
pub async fn pools(tx: &mut StoreTx, tenant: Option<&str>) -> Result<Vec<PoolRow>, StoreError> {
    let sql = format!("SELECT {POOL_COLUMNS} {POOLS_OF_TENANT}");
    tx.fetch_all(&sql, &[tenant.unwrap_or("").into()]).await
}

/// [`pools`], read outside any transaction.
pub async fn pools_in_store(
    store: &EventStore,
    tenant: Option<&str>,
) -> Result<Vec<PoolRow>, StoreError> {
    let sql = format!("SELECT {POOL_COLUMNS} {POOLS_OF_TENANT}");
    store.fetch_all(&sql, &[tenant.unwrap_or("").into()]).await
}

/// A join request by id.
pub async fn join_request(
    tx: &mut StoreTx,
    request_id: &str,
) -> Result<Option<JoinRequestRow>, StoreError> {
    let sql = format!("SELECT {JOIN_REQUEST_COLUMNS} FROM join_requests WHERE request_id = $1");
    tx.fetch_optional(&sql, &[request_id.into()]).await
}

/// The newest join request `attestor` keyed by `subject` (whatever its status), if any: what a
/// retried join finds.
pub async fn latest_join_request(
    tx: &mut StoreTx,
    attestor: &str,
    subject: &[u8; 32],
) -> Result<Option<JoinRequestRow>, StoreError> {
    let sql = format!(
        "SELECT {JOIN_REQUEST_COLUMNS} FROM join_requests WHERE attestor = $1 AND subject = $2 \
         ORDER BY created_at_us DESC, position DESC LIMIT 1"
    );
    tx.fetch_optional(&sql, &[attestor.into(), subject.to_vec().into()])
        .await
}

const JOIN_REQUESTS_FILTERED: &str = "FROM join_requests WHERE ($1 = '' OR tenant_id = $1) \
    AND ($2 = '' OR status = $2) ORDER BY created_at_us, request_id";

/// The join requests of `tenant` (every tenant when `None`) with `status` (`pending`, ...;
/// every status when `None`), oldest first.
pub async fn join_requests(
    tx: &mut StoreTx,
    tenant: Option<&str>,
    status: Option<&str>,
) -> Result<Vec<JoinRequestRow>, StoreError> {
    let sql = format!("SELECT {JOIN_REQUEST_COLUMNS} {JOIN_REQUESTS_FILTERED}");
    tx.fetch_all(
        &sql,
        &[tenant.unwrap_or("").into(), status.unwrap_or("").into()],
    )
    .await
}

/// [`join_requests`], read outside any transaction.
pub async fn join_requests_in_store(
    store: &EventStore,
    tenant: Option<&str>,
    status: Option<&str>,
) -> Result<Vec<JoinRequestRow>, StoreError> {
    let sql = format!("SELECT {JOIN_REQUEST_COLUMNS} {JOIN_REQUESTS_FILTERED}");
    store
        .fetch_all(
            &sql,
            &[tenant.unwrap_or("").into(), status.unwrap_or("").into()],
        )
        .await
}

/// Up to `limit` requests still open (`pending`, or `approved` and not consumed) whose expiry
/// is at or before `now_us`, soonest expired first: what maintenance expires.
pub async fn expired_join_requests(
    tx: &mut StoreTx,
    now_us: i64,
    limit: u32,
) -> Result<Vec<JoinRequestRow>, StoreError> {
    let sql = format!(
        "SELECT {JOIN_REQUEST_COLUMNS} FROM join_requests \
         WHERE status IN ('pending', 'approved') AND expires_at_us <= $1 \
         ORDER BY expires_at_us, request_id LIMIT $2"
    );
    tx.fetch_all(&sql, &[now_us.into(), i64::from(limit).into()])
        .await
}

crate::from_row! {
    /// A `tpm_ek_allows` row.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct TpmAllowRow {
        pub allow_id: String,
        pub ek_sha256: Vec<u8>,
        pub tenant_id: String,
        pub site_id: String,
        pub pool_id: String,
        pub allowed_by: String,
        pub note: String,
        pub revoked: bool,
        pub revoked_by: Option<String>,
        pub revoke_reason: Option<String>,
        pub created_at_us: i64,
        pub updated_at_us: i64,
        pub version: i64,
        pub position: i64,
    }
}

const TPM_ALLOW_COLUMNS: &str = "allow_id, ek_sha256, tenant_id, site_id, pool_id, allowed_by, \
    note, revoked, revoked_by, revoke_reason, created_at_us, updated_at_us, version, position";

/// The entry not revoked that allows the EK with this SHA-256 (of its TPMT_PUBLIC), if any:
/// where a machine proving it joins.
pub async fn tpm_allowed(
    tx: &mut StoreTx,
    ek_sha256: &[u8; 32],
) -> Result<Option<TpmAllowRow>, StoreError> {
    let sql = format!(
        "SELECT {TPM_ALLOW_COLUMNS} FROM tpm_ek_allows WHERE ek_sha256 = $1 AND NOT revoked \
         ORDER BY position DESC LIMIT 1"
    );
    tx.fetch_optional(&sql, &[ek_sha256.to_vec().into()]).await
}

/// Every entry of the EK (revoked ones too), by stream version: one statement, so the EK
/// stream's version (the newest `version`) and its active entry come from one snapshot (under
/// Postgres's READ COMMITTED two reads could see two different commits).
pub async fn tpm_ek_entries(
    tx: &mut StoreTx,
    ek_sha256: &[u8; 32],
) -> Result<Vec<TpmAllowRow>, StoreError> {
    let sql = format!(
        "SELECT {TPM_ALLOW_COLUMNS} FROM tpm_ek_allows WHERE ek_sha256 = $1 ORDER BY version"
    );
    tx.fetch_all(&sql, &[ek_sha256.to_vec().into()]).await
}

/// An allow-list entry by id (active or revoked).
pub async fn tpm_allow(
    tx: &mut StoreTx,
    allow_id: &str,
) -> Result<Option<TpmAllowRow>, StoreError> {
    let sql = format!("SELECT {TPM_ALLOW_COLUMNS} FROM tpm_ek_allows WHERE allow_id = $1");
    tx.fetch_optional(&sql, &[allow_id.into()]).await
}

/// Every allow-list entry (revoked ones too), oldest first, read outside any transaction.
pub async fn tpm_allows_in_store(store: &EventStore) -> Result<Vec<TpmAllowRow>, StoreError> {
    let sql =
        format!("SELECT {TPM_ALLOW_COLUMNS} FROM tpm_ek_allows ORDER BY created_at_us, allow_id");
    store.fetch_all(&sql, &[]).await
}

crate::from_row! {
    /// A `cloud_accounts` row.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct CloudAccountRow {
        pub entry_id: String,
        pub provider: String,
        pub account: String,
        pub tenant_id: String,
        pub site_id: String,
        pub pool_id: String,
        pub role: String,
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

const CLOUD_ACCOUNT_COLUMNS: &str = "entry_id, provider, account, tenant_id, site_id, pool_id, \
    role, added_by, removed, removed_by, remove_reason, created_at_us, updated_at_us, version, \
    position";

/// The entry not removed that registers (provider, account), if any: where its instances join.
pub async fn cloud_account_active(
    tx: &mut StoreTx,
    provider: &str,
    account: &str,
) -> Result<Option<CloudAccountRow>, StoreError> {
    let sql = format!(
        "SELECT {CLOUD_ACCOUNT_COLUMNS} FROM cloud_accounts \
         WHERE provider = $1 AND account = $2 AND NOT removed ORDER BY position DESC LIMIT 1"
    );
    tx.fetch_optional(&sql, &[provider.into(), account.into()])
        .await
}

/// Every entry of (provider, account) (removed ones too), by stream version, in one statement
/// (the stream's version and its active entry from one snapshot, as [`tpm_ek_entries`]).
pub async fn cloud_account_entries(
    tx: &mut StoreTx,
    provider: &str,
    account: &str,
) -> Result<Vec<CloudAccountRow>, StoreError> {
    let sql = format!(
        "SELECT {CLOUD_ACCOUNT_COLUMNS} FROM cloud_accounts \
         WHERE provider = $1 AND account = $2 ORDER BY version"
    );
    tx.fetch_all(&sql, &[provider.into(), account.into()]).await
}

/// An entry by id (active or removed).
pub async fn cloud_account(
    tx: &mut StoreTx,
    entry_id: &str,
) -> Result<Option<CloudAccountRow>, StoreError> {
    let sql = format!("SELECT {CLOUD_ACCOUNT_COLUMNS} FROM cloud_accounts WHERE entry_id = $1");
    tx.fetch_optional(&sql, &[entry_id.into()]).await
}

/// Every entry (removed ones too), oldest first, read outside any transaction.
pub async fn cloud_accounts_in_store(
    store: &EventStore,
) -> Result<Vec<CloudAccountRow>, StoreError> {
    let sql = format!(
        "SELECT {CLOUD_ACCOUNT_COLUMNS} FROM cloud_accounts ORDER BY created_at_us, entry_id"
    );
    store.fetch_all(&sql, &[]).await
}
