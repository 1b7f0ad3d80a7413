//! Every read of `pools`, `join_requests` and `attestor_entries`: inside a command's transaction
//! (`&mut StoreTx`, which sees the transaction's own writes) or outside one (`&EventStore`). Rows
//! come back as they are stored; turning them into domain state is the caller's
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

/// Whether `tenant` is one an operator created: a site or a pool of it exists (issue 40 item 9:
/// the tenants an out-of-process attestor may admit into).
pub async fn tenant_known(tx: &mut StoreTx, tenant: &str) -> Result<bool, StoreError> {
    let row: Option<(i64,)> = tx
        .fetch_optional(
            "SELECT CAST(1 AS BIGINT) AS one FROM sites WHERE tenant_id = $1 \
             UNION ALL SELECT CAST(1 AS BIGINT) AS one FROM pools WHERE tenant_id = $1 LIMIT 1",
            &[tenant.into()],
        )
        .await?;
    Ok(row.is_some())
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
    /// An `attestor_entries` row: one entry of an operator-managed attestor list.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct AttestorEntryRow {
        pub entry_id: String,
        pub list: String,
        pub entry_key: String,
        pub tenant_id: String,
        pub site_id: String,
        pub pool_id: String,
        /// The role its machines join as; `None` when the list names none.
        pub role: Option<String>,
        pub added_by: String,
        pub note: String,
        pub removed: bool,
        pub removed_by: Option<String>,
        pub remove_reason: Option<String>,
        pub created_at_us: i64,
        pub updated_at_us: i64,
        pub version: i64,
        pub position: i64,
    }
}

const ENTRY_COLUMNS: &str = "entry_id, list, entry_key, tenant_id, site_id, pool_id, role, \
    added_by, note, removed, removed_by, remove_reason, created_at_us, updated_at_us, version, \
    position";

/// The entry not removed of `list` holding `key`, if any: where a machine proving it joins.
pub async fn attestor_entry_active(
    tx: &mut StoreTx,
    list: &str,
    key: &str,
) -> Result<Option<AttestorEntryRow>, StoreError> {
    let sql = format!(
        "SELECT {ENTRY_COLUMNS} FROM attestor_entries \
         WHERE list = $1 AND entry_key = $2 AND NOT removed ORDER BY position DESC LIMIT 1"
    );
    tx.fetch_optional(&sql, &[list.into(), key.into()]).await
}

/// Every entry of `list` holding `key` (removed ones too), by stream version: one statement,
/// so the key stream's version (the newest `version`) and its active entry come from one
/// snapshot (under Postgres's READ COMMITTED two reads could see two different commits).
pub async fn attestor_key_entries(
    tx: &mut StoreTx,
    list: &str,
    key: &str,
) -> Result<Vec<AttestorEntryRow>, StoreError> {
    let sql = format!(
        "SELECT {ENTRY_COLUMNS} FROM attestor_entries \
         WHERE list = $1 AND entry_key = $2 ORDER BY version"
    );
    tx.fetch_all(&sql, &[list.into(), key.into()]).await
}

/// An entry of `list` by id (active or removed).
pub async fn attestor_entry(
    tx: &mut StoreTx,
    list: &str,
    entry_id: &str,
) -> Result<Option<AttestorEntryRow>, StoreError> {
    let sql =
        format!("SELECT {ENTRY_COLUMNS} FROM attestor_entries WHERE list = $1 AND entry_id = $2");
    tx.fetch_optional(&sql, &[list.into(), entry_id.into()])
        .await
}

/// Every entry of `list` (removed ones too), oldest first, read outside any transaction.
pub async fn attestor_entries_in_store(
    store: &EventStore,
    list: &str,
) -> Result<Vec<AttestorEntryRow>, StoreError> {
    let sql = format!(
        "SELECT {ENTRY_COLUMNS} FROM attestor_entries WHERE list = $1 \
         ORDER BY created_at_us, entry_id"
    );
    store.fetch_all(&sql, &[list.into()]).await
}
