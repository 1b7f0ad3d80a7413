//! Every read of the identity tables (`join_tokens`, `nodes`, `node_certs`, `attestation_uses`),
//! beside the projections that write them: inside a command's transaction (`&mut StoreTx`, which
//! sees the transaction's own writes) or outside one (`&EventStore`, for the gateway's feed and
//! sessions). Rows come back as they are stored; turning them into domain state is the caller's.

use events::store::{EventStore, StoreError, StoreTx};

crate::from_row! {
    /// A `join_tokens` row.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct TokenRow {
        pub token_id: String,
        pub tenant_id: String,
        pub site_id: String,
        pub pool_id: String,
        pub role: String,
        pub secret_sha256: Vec<u8>,
        pub uses_total: i64,
        pub uses_left: i64,
        pub expires_at_us: i64,
        pub expect_product_uuid: Option<String>,
        pub expect_mac: Option<String>,
        pub allow_reclaim: bool,
        pub reclaim_node_id: Option<String>,
        pub for_node_id: Option<String>,
        pub require_approval: bool,
        /// Role discovery: the boot entry it was minted for.
        pub boot_entry_id: Option<String>,
        pub created_at_us: i64,
        pub revoked_at_us: Option<i64>,
        pub revoke_reason: Option<String>,
        pub version: i64,
        pub position: i64,
    }
}

const TOKEN_COLUMNS: &str = "token_id, tenant_id, site_id, pool_id, role, \
    secret_sha256, uses_total, uses_left, expires_at_us, expect_product_uuid, expect_mac, \
    allow_reclaim, reclaim_node_id, for_node_id, require_approval, boot_entry_id, created_at_us, revoked_at_us, revoke_reason, version, position";

crate::from_row! {
    /// A `nodes` row.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct NodeRow {
        pub node_id: String,
        pub tenant_id: String,
        pub site_id: String,
        pub pool_id: String,
        pub role: String,
        pub status: String,
        pub status_reason: Option<String>,
        pub identity_generation: i64,
        pub attestor: String,
        pub node_key: String,
        pub token_id: String,
        pub hardware_key_sha256: Option<Vec<u8>>,
        pub product_uuid_sha256: Option<Vec<u8>>,
        /// The node-key statement its certificates carry (`urn:bc:tpm-ak:...`), if any.
        pub node_key_uri: Option<String>,
        /// The command kinds its certificates allow, comma-joined; `None`: every kind its role allows.
        pub allowed_kinds: Option<String>,
        /// SHA-256 of the CSR its last join (or re-join) was admitted for (`None` in rows
        /// written before migration 0017 that no join has touched since).
        pub join_csr_sha256: Option<Vec<u8>>,
        /// What the node said about itself at its last join (migration 0019; claims, never
        /// binding).
        pub hostname: Option<String>,
        pub product_serial: Option<String>,
        pub board_serial: Option<String>,
        pub chassis_serial: Option<String>,
        /// Comma-joined.
        pub gpu_uuids: Option<String>,
        pub bcd_version: Option<String>,
        pub last_boot_id: Option<String>,
        pub joined_at_us: i64,
        pub updated_at_us: i64,
        pub version: i64,
        pub position: i64,
    }
}

const NODE_COLUMNS: &str = "node_id, tenant_id, site_id, pool_id, role, status, \
    status_reason, identity_generation, attestor, node_key, token_id, hardware_key_sha256, \
    product_uuid_sha256, node_key_uri, allowed_kinds, join_csr_sha256, hostname, \
    product_serial, board_serial, chassis_serial, gpu_uuids, bcd_version, last_boot_id, \
    joined_at_us, updated_at_us, version, position";

crate::from_row! {
    /// A `node_certs` row.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct CertRow {
        pub serial: String,
        pub node_id: String,
        pub identity_generation: i64,
        pub der: Vec<u8>,
        pub not_before_us: i64,
        pub not_after_us: i64,
        pub revoked_at_us: Option<i64>,
        pub revoke_reason: Option<String>,
        pub issued_position: i64,
        pub revoked_position: Option<i64>,
        /// The allowed command kinds, comma-joined; `None`: every kind the role allows.
        pub allowed_kinds: Option<String>,
    }
}

impl CertRow {
    /// The allowed command kinds as a list (empty: every kind the role allows).
    pub fn allowed_kinds(&self) -> Vec<String> {
        self.allowed_kinds
            .as_deref()
            .map(|k| k.split(',').map(str::to_owned).collect())
            .unwrap_or_default()
    }
}

const CERT_COLUMNS: &str = "serial, node_id, identity_generation, der, \
    not_before_us, not_after_us, revoked_at_us, revoke_reason, issued_position, revoked_position, \
    allowed_kinds";

crate::from_row! {
    /// A revoked certificate that has not expired yet: what the gateway's revocation feed holds.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct RevokedCertRow {
        /// Lower-case hex.
        pub serial: String,
        pub not_after_us: i64,
        pub revoke_reason: Option<String>,
    }
}

crate::from_row! {
    /// Who spent an `attestation_uses` row, and until when it is kept.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct AttestationUseRow {
        /// The node the admitting join made (or reclaimed); `None` for a use no join recorded.
        pub node_id: Option<String>,
        /// When the row may be pruned (µs); `None` keeps it forever.
        pub expires_at_us: Option<i64>,
    }
}

crate::from_row! {
    /// The key of an `attestation_uses` row.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct AttestationUseKey {
        pub attestor: String,
        pub subject: Vec<u8>,
    }
}

/// ` FOR UPDATE` on Postgres (the row stays locked until the transaction ends), nothing on
/// SQLite (its single writer already serializes).
fn lock_suffix(tx: &StoreTx) -> &'static str {
    match tx {
        StoreTx::Postgres(_) => " FOR UPDATE",
        StoreTx::Sqlite(_) | StoreTx::Recorder(_) => "",
    }
}

/// The token whose secret hashes to `hash`, locked for this transaction on Postgres.
pub async fn token_by_hash(
    tx: &mut StoreTx,
    hash: &[u8; 32],
) -> Result<Option<TokenRow>, StoreError> {
    let sql = format!(
        "SELECT {TOKEN_COLUMNS} FROM join_tokens WHERE secret_sha256 = $1{}",
        lock_suffix(tx)
    );
    tx.fetch_optional(&sql, &[hash.to_vec().into()]).await
}

/// A token by id.
pub async fn token_by_id(tx: &mut StoreTx, token_id: &str) -> Result<Option<TokenRow>, StoreError> {
    let sql = format!("SELECT {TOKEN_COLUMNS} FROM join_tokens WHERE token_id = $1");
    tx.fetch_optional(&sql, &[token_id.into()]).await
}

/// Every token of `tenant` (of every tenant when `None`), by id.
pub async fn tokens_of_tenant(
    tx: &mut StoreTx,
    tenant: Option<&str>,
) -> Result<Vec<TokenRow>, StoreError> {
    let sql = format!(
        "SELECT {TOKEN_COLUMNS} FROM join_tokens WHERE ($1 = '' OR tenant_id = $1) ORDER BY token_id"
    );
    tx.fetch_all(&sql, &[tenant.unwrap_or("").into()]).await
}

/// A node by id.
pub async fn node_by_id(tx: &mut StoreTx, node_id: &str) -> Result<Option<NodeRow>, StoreError> {
    let sql = format!("SELECT {NODE_COLUMNS} FROM nodes WHERE node_id = $1");
    tx.fetch_optional(&sql, &[node_id.into()]).await
}

/// Every node of `tenant` (of every tenant when `None`), by id.
pub async fn nodes_of_tenant(
    tx: &mut StoreTx,
    tenant: Option<&str>,
) -> Result<Vec<NodeRow>, StoreError> {
    let sql = format!(
        "SELECT {NODE_COLUMNS} FROM nodes WHERE ($1 = '' OR tenant_id = $1) ORDER BY node_id"
    );
    tx.fetch_all(&sql, &[tenant.unwrap_or("").into()]).await
}

/// The tenant of a node, read outside any transaction (the gateway's sessions).
pub async fn tenant_of(store: &EventStore, node_id: &str) -> Result<Option<String>, StoreError> {
    let row: Option<(String,)> = store
        .fetch_optional(
            "SELECT tenant_id FROM nodes WHERE node_id = $1",
            &[node_id.into()],
        )
        .await?;
    Ok(row.map(|(t,)| t))
}

/// A certificate by serial (lower-case hex).
pub async fn cert_by_serial(tx: &mut StoreTx, serial: &str) -> Result<Option<CertRow>, StoreError> {
    let sql = format!("SELECT {CERT_COLUMNS} FROM node_certs WHERE serial = $1");
    tx.fetch_optional(&sql, &[serial.into()]).await
}

/// Every certificate of a node, oldest first.
pub async fn certs_of_node(tx: &mut StoreTx, node_id: &str) -> Result<Vec<CertRow>, StoreError> {
    let sql = format!(
        "SELECT {CERT_COLUMNS} FROM node_certs WHERE node_id = $1 ORDER BY issued_position"
    );
    tx.fetch_all(&sql, &[node_id.into()]).await
}

/// The newest certificate of `node_id` in identity generation `generation` issued after
/// position `after_position` (serial), if any: a certificate issued there was renewed.
pub async fn successor_of(
    tx: &mut StoreTx,
    node_id: &str,
    generation: i64,
    after_position: i64,
) -> Result<Option<String>, StoreError> {
    let row: Option<(String,)> = tx
        .fetch_optional(
            "SELECT serial FROM node_certs WHERE node_id = $1 AND identity_generation = $2 \
             AND issued_position > $3 ORDER BY issued_position DESC LIMIT 1",
            &[node_id.into(), generation.into(), after_position.into()],
        )
        .await?;
    Ok(row.map(|(s,)| s))
}

/// When each renewal of `node_id` issued after `since_us` was issued (the time of the event
/// that issued it, µs, oldest first; not the certificate's notBefore, which is backdated). A
/// renewal is a certificate that is not the first of its identity generation (that one came
/// from the join).
pub async fn renewals_since(
    tx: &mut StoreTx,
    node_id: &str,
    since_us: i64,
) -> Result<Vec<i64>, StoreError> {
    let rows: Vec<(i64,)> = tx
        .fetch_all(
            "SELECT e.occurred_at_us FROM node_certs c JOIN events e \
             ON e.position = c.issued_position WHERE c.node_id = $1 \
             AND e.occurred_at_us > $2 AND EXISTS (SELECT 1 FROM node_certs o \
             WHERE o.node_id = c.node_id AND o.identity_generation = c.identity_generation \
             AND o.issued_position < c.issued_position) ORDER BY e.occurred_at_us",
            &[node_id.into(), since_us.into()],
        )
        .await?;
    Ok(rows.into_iter().map(|(t,)| t).collect())
}

/// The serials of a node's certificates not revoked yet, oldest first: what revoking its
/// identity names.
pub async fn unrevoked_serials_of_node(
    tx: &mut StoreTx,
    node_id: &str,
) -> Result<Vec<String>, StoreError> {
    let rows: Vec<(String,)> = tx
        .fetch_all(
            "SELECT serial FROM node_certs WHERE node_id = $1 AND revoked_at_us IS NULL \
             ORDER BY issued_position, serial",
            &[node_id.into()],
        )
        .await?;
    Ok(rows.into_iter().map(|(s,)| s).collect())
}

/// Every revoked certificate still unexpired at `now_us` (of one node when given), read outside
/// any transaction: what the gateway's revocation feed loads at start and after each revocation.
pub async fn revoked_unexpired(
    store: &EventStore,
    node_id: Option<&str>,
    now_us: i64,
) -> Result<Vec<RevokedCertRow>, StoreError> {
    const ALL: &str = "SELECT serial, not_after_us, revoke_reason FROM node_certs \
        WHERE revoked_at_us IS NOT NULL AND not_after_us > $1";
    const ONE: &str = "SELECT serial, not_after_us, revoke_reason FROM node_certs \
        WHERE revoked_at_us IS NOT NULL AND not_after_us > $1 AND node_id = $2";
    match node_id {
        None => store.fetch_all(ALL, &[now_us.into()]).await,
        Some(n) => store.fetch_all(ONE, &[now_us.into(), n.into()]).await,
    }
}

crate::from_row! {
    /// A revoked, unexpired certificate as the node CA's revocation list names it.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct CrlEntryRow {
        /// Lower-case hex.
        pub serial: String,
        /// When it was revoked (the revocation event's time, µs).
        pub revoked_at_us: i64,
    }
}

/// Every certificate revoked and still unexpired at `now_us`, by serial: what the node CA's
/// revocation list holds (`bcctl pki crl`; issue 41 item 4). Read outside any transaction; the
/// caller reads the log's head before it, so the list holds at least every revocation up to
/// that head.
pub async fn crl_entries(store: &EventStore, now_us: i64) -> Result<Vec<CrlEntryRow>, StoreError> {
    store
        .fetch_all(
            "SELECT serial, revoked_at_us FROM node_certs \
             WHERE revoked_at_us IS NOT NULL AND not_after_us > $1 ORDER BY serial",
            &[now_us.into()],
        )
        .await
}

/// Whether `attestation_uses` holds (attestor, subject): the evidence was spent.
pub async fn attestation_used(
    tx: &mut StoreTx,
    attestor: &str,
    subject: &[u8; 32],
) -> Result<bool, StoreError> {
    let row: Option<(i64,)> = tx
        .fetch_optional(
            "SELECT CAST(1 AS BIGINT) AS one FROM attestation_uses \
             WHERE attestor = $1 AND subject = $2",
            &[attestor.into(), subject.to_vec().into()],
        )
        .await?;
    Ok(row.is_some())
}

/// Whether `attestation_uses` holds (attestor, subject) still live at `now_us`: a row whose
/// `expires_at_us` is at or before `now_us` is expired (what maintenance prunes, exactly then)
/// and no longer counts, whether or not it was pruned yet; a row without an expiry never
/// expires. Renewals read their proof's replay row through this (issue 40); the row's expiry
/// covers the proof's clock window (`domain::identity::proof_use_expiry_us`).
pub async fn attestation_used_at(
    tx: &mut StoreTx,
    attestor: &str,
    subject: &[u8; 32],
    now_us: i64,
) -> Result<bool, StoreError> {
    let row: Option<(i64,)> = tx
        .fetch_optional(
            "SELECT CAST(1 AS BIGINT) AS one FROM attestation_uses \
             WHERE attestor = $1 AND subject = $2 \
             AND (expires_at_us IS NULL OR expires_at_us > $3)",
            &[attestor.into(), subject.to_vec().into(), now_us.into()],
        )
        .await?;
    Ok(row.is_some())
}

/// The `attestation_uses` row of (attestor, subject), when the evidence was spent: the node its
/// join made and the row's expiry (a lost join answer asked again is answered from it).
pub async fn attestation_use(
    tx: &mut StoreTx,
    attestor: &str,
    subject: &[u8; 32],
) -> Result<Option<AttestationUseRow>, StoreError> {
    tx.fetch_optional(
        "SELECT node_id, expires_at_us FROM attestation_uses \
         WHERE attestor = $1 AND subject = $2",
        &[attestor.into(), subject.to_vec().into()],
    )
    .await
}

/// Up to `limit` keys of `attestation_uses` rows expired at `now_us`, the oldest first: what one
/// prune event names.
pub async fn expired_attestation_uses(
    tx: &mut StoreTx,
    now_us: i64,
    limit: u32,
) -> Result<Vec<AttestationUseKey>, StoreError> {
    tx.fetch_all(
        "SELECT attestor, subject FROM attestation_uses WHERE expires_at_us IS NOT NULL \
         AND expires_at_us <= $1 ORDER BY expires_at_us, attestor, subject LIMIT $2",
        &[now_us.into(), i64::from(limit).into()],
    )
    .await
}

/// Refusals of (kind, refusal) recorded one by one in the minute window starting at
/// `window_start_us` (`refusal_counters.recorded`; 0 when there is no row).
pub async fn refusals_recorded(
    tx: &mut StoreTx,
    kind: &str,
    refusal: &str,
    window_start_us: i64,
) -> Result<i64, StoreError> {
    let row: Option<(i64,)> = tx
        .fetch_optional(
            "SELECT recorded FROM refusal_counters \
             WHERE kind = $1 AND refusal = $2 AND window_start_us = $3",
            &[kind.into(), refusal.into(), window_start_us.into()],
        )
        .await?;
    Ok(row.map_or(0, |(n,)| n))
}

crate::from_row! {
    /// A `node_bindings` row.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct BindingRow {
        pub subject: Vec<u8>,
        pub attestor: String,
        pub node_id: String,
        pub bound_at_us: i64,
        pub position: i64,
    }
}

/// The binding of `subject` (a subject an attestor proved, bound to one node for good).
pub async fn binding(
    tx: &mut StoreTx,
    subject: &[u8; 32],
) -> Result<Option<BindingRow>, StoreError> {
    tx.fetch_optional(
        "SELECT subject, attestor, node_id, bound_at_us, position FROM node_bindings \
         WHERE subject = $1",
        &[subject.to_vec().into()],
    )
    .await
}
