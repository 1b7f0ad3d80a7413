//! The reads of `bcctl replay`: where a time cuts the log, and the identity state (nodes,
//! certificates, tokens, a node's stream) as a replay left it inside its transaction.
//!
//! These belong with the identity projection's reads; they live here, beside it, until they
//! move there. Every read runs inside the replay's transaction: it sees the replayed tables, not
//! the live ones.

use events::store::{SqlValue, StoreError, StoreTx};

crate::from_row! {
    /// A row of `nodes`.
    #[derive(Clone, Debug, PartialEq, Eq)]
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
        /// The node's claims (migration 0019): `bcctl replay` shows them as the live reads do.
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
        pub position: i64,
    }
}

crate::from_row! {
    /// A row of `node_certs`.
    #[derive(Clone, Debug, PartialEq, Eq)]
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
        /// Comma-joined; `None`: every kind the role allows.
        pub allowed_kinds: Option<String>,
    }
}

crate::from_row! {
    /// A row of `join_tokens`.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct TokenRow {
        pub token_id: String,
        pub tenant_id: String,
        pub site_id: String,
        pub pool_id: String,
        pub role: String,
        pub uses_total: i64,
        pub uses_left: i64,
        pub expires_at_us: i64,
        pub expect_product_uuid: Option<String>,
        pub expect_mac: Option<String>,
        pub allow_reclaim: bool,
        pub created_at_us: i64,
        pub revoked_at_us: Option<i64>,
        pub revoke_reason: Option<String>,
        pub position: i64,
    }
}

crate::from_row! {
    /// One event of a stream, as a history line.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct StreamEventRow {
        pub event_type: String,
        pub position: i64,
        pub version: i64,
        pub occurred_at_us: i64,
        /// Who caused the event (both NULL for an event nobody decided).
        pub actor_id: Option<String>,
        pub actor_role: Option<String>,
    }
}

/// The end of the longest prefix of the log decided at or before `at_us` (0: none): the cut
/// stops before the first event that occurred later, even where concurrent writers (or replicas)
/// committed an earlier-decided event after it, so nothing decided after the time is included.
pub async fn position_at_time(tx: &mut StoreTx, at_us: i64) -> Result<i64, StoreError> {
    let row: Option<(i64,)> = tx
        .fetch_optional(
            "WITH later AS (SELECT MIN(position) AS first FROM events WHERE occurred_at_us > $1) \
             SELECT COALESCE(MAX(e.position), 0) AS position \
             FROM events e, later WHERE later.first IS NULL OR e.position < later.first",
            &[SqlValue::Int(at_us)],
        )
        .await?;
    Ok(row.map_or(0, |(p,)| p))
}

/// When the event at `position` occurred, if there is one.
pub async fn occurred_at(tx: &mut StoreTx, position: i64) -> Result<Option<i64>, StoreError> {
    let row: Option<(i64,)> = tx
        .fetch_optional(
            "SELECT occurred_at_us FROM events WHERE position = $1",
            &[SqlValue::Int(position)],
        )
        .await?;
    Ok(row.map(|(t,)| t))
}

/// Every node, or only `node`, by node id.
pub async fn nodes(tx: &mut StoreTx, node: Option<&str>) -> Result<Vec<NodeRow>, StoreError> {
    tx.fetch_all(
        "SELECT node_id, tenant_id, site_id, pool_id, role, status, status_reason, \
         identity_generation, attestor, node_key, token_id, hostname, product_serial, \
         board_serial, chassis_serial, gpu_uuids, bcd_version, last_boot_id, joined_at_us, \
         updated_at_us, position \
         FROM nodes WHERE ($1 = '' OR node_id = $1) ORDER BY node_id",
        &[SqlValue::from(node.unwrap_or(""))],
    )
    .await
}

/// Every certificate, or only `node`'s, by node and issue position.
pub async fn certificates(
    tx: &mut StoreTx,
    node: Option<&str>,
) -> Result<Vec<CertRow>, StoreError> {
    tx.fetch_all(
        "SELECT serial, node_id, identity_generation, der, not_before_us, not_after_us, \
         revoked_at_us, revoke_reason, issued_position, revoked_position, allowed_kinds \
         FROM node_certs WHERE ($1 = '' OR node_id = $1) ORDER BY node_id, issued_position",
        &[SqlValue::from(node.unwrap_or(""))],
    )
    .await
}

const TOKEN_COLUMNS: &str = "token_id, tenant_id, site_id, pool_id, role, uses_total, uses_left, \
    expires_at_us, expect_product_uuid, expect_mac, allow_reclaim, created_at_us, revoked_at_us, \
    revoke_reason, position";

/// The token `token_id` (none or one row).
pub async fn token(tx: &mut StoreTx, token_id: &str) -> Result<Vec<TokenRow>, StoreError> {
    let sql = format!("SELECT {TOKEN_COLUMNS} FROM join_tokens WHERE token_id = $1");
    tx.fetch_all(&sql, &[SqlValue::from(token_id)]).await
}

/// Every token, by token id.
pub async fn tokens(tx: &mut StoreTx) -> Result<Vec<TokenRow>, StoreError> {
    let sql = format!("SELECT {TOKEN_COLUMNS} FROM join_tokens ORDER BY token_id");
    tx.fetch_all(&sql, &[]).await
}

/// The events of `stream` up to `position`, in log order.
pub async fn stream_events(
    tx: &mut StoreTx,
    stream: &str,
    position: i64,
) -> Result<Vec<StreamEventRow>, StoreError> {
    tx.fetch_all(
        "SELECT event_type, position, stream_version AS version, occurred_at_us, actor_id, \
         actor_role FROM events \
         WHERE stream_id = $1 AND position <= $2 ORDER BY position",
        &[SqlValue::from(stream), SqlValue::Int(position)],
    )
    .await
}
