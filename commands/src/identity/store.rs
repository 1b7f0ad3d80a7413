//! Reads of the identity projections inside a command's transaction, on either backend.

use domain::identity::{CertState, ExpectBinding, NodeState, NodeStatus, TokenRole, TokenState};
use domain::pki::TokenHash;
use events::store::StoreTx;

use super::IdentityError;

/// Runs a `query_as` on whichever backend the transaction is on.
macro_rules! query_as {
    ($tx:expr, $ty:ty, $fetch:ident, $sql:expr $(, $arg:expr)*) => {
        match $tx {
            events::store::StoreTx::Postgres(t) => {
                sqlx::query_as::<_, $ty>($sql)$(.bind($arg))*.$fetch(t.connection()).await
            }
            events::store::StoreTx::Sqlite(t) => {
                sqlx::query_as::<_, $ty>($sql)$(.bind($arg))*.$fetch(t.connection()).await
            }
            events::store::StoreTx::Recorder(_) => {
                return Err(events::store::StoreError::RecordingOnly { op: "a read" }.into())
            }
        }
    };
}
pub(crate) use query_as;

/// A `join_tokens` row.
#[derive(Debug, Clone, sqlx::FromRow)]
pub(crate) struct TokenRow {
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
    pub created_at_us: i64,
    pub revoked_at_us: Option<i64>,
    pub revoke_reason: Option<String>,
    pub version: i64,
    pub position: i64,
}

pub(crate) const TOKEN_COLUMNS: &str = "token_id, tenant_id, site_id, pool_id, role, \
    secret_sha256, uses_total, uses_left, expires_at_us, expect_product_uuid, expect_mac, \
    allow_reclaim, created_at_us, revoked_at_us, revoke_reason, version, position";

impl TokenRow {
    pub fn state(&self) -> Result<TokenState, IdentityError> {
        let corrupt =
            |why: &str| IdentityError::Corrupt(format!("join_tokens {}: {why}", self.token_id));
        let hash: [u8; 32] = self
            .secret_sha256
            .as_slice()
            .try_into()
            .map_err(|_| corrupt("secret_sha256 is not 32 bytes"))?;
        Ok(TokenState {
            token_id: self.token_id.clone(),
            tenant_id: self.tenant_id.clone(),
            site_id: self.site_id.clone(),
            pool_id: self.pool_id.clone(),
            role: TokenRole::parse(&self.role).ok_or_else(|| corrupt("unknown role"))?,
            uses_total: u32::try_from(self.uses_total).map_err(|_| corrupt("uses_total"))?,
            uses_left: u32::try_from(self.uses_left).map_err(|_| corrupt("uses_left"))?,
            expires_at_us: self.expires_at_us,
            secret_hash: TokenHash::from_bytes(hash),
            expect: ExpectBinding {
                product_uuid: self.expect_product_uuid.clone(),
                mac: self.expect_mac.clone(),
            },
            allow_reclaim: self.allow_reclaim,
            revoked: self.revoked_at_us.is_some(),
        })
    }
}

/// A `nodes` row.
#[derive(Debug, Clone, sqlx::FromRow)]
pub(crate) struct NodeRow {
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
    pub joined_at_us: i64,
    pub updated_at_us: i64,
    pub version: i64,
    pub position: i64,
}

pub(crate) const NODE_COLUMNS: &str = "node_id, tenant_id, site_id, pool_id, role, status, \
    status_reason, identity_generation, attestor, node_key, token_id, hardware_key_sha256, \
    joined_at_us, updated_at_us, version, position";

impl NodeRow {
    pub fn state(&self) -> Result<NodeState, IdentityError> {
        let corrupt = |why: &str| IdentityError::Corrupt(format!("nodes {}: {why}", self.node_id));
        Ok(NodeState {
            node_id: self.node_id.clone(),
            tenant_id: self.tenant_id.clone(),
            site_id: self.site_id.clone(),
            pool_id: self.pool_id.clone(),
            role: self.role.parse().map_err(|_| corrupt("unknown role"))?,
            status: NodeStatus::parse(&self.status).ok_or_else(|| corrupt("unknown status"))?,
            identity_generation: u64::try_from(self.identity_generation)
                .map_err(|_| corrupt("identity_generation"))?,
            hardware_key_sha256: match &self.hardware_key_sha256 {
                None => None,
                Some(b) => Some(
                    b.as_slice()
                        .try_into()
                        .map_err(|_| corrupt("hardware_key_sha256 is not 32 bytes"))?,
                ),
            },
        })
    }
}

/// A `node_certs` row.
#[derive(Debug, Clone, sqlx::FromRow)]
pub(crate) struct CertRow {
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
}

pub(crate) const CERT_COLUMNS: &str = "serial, node_id, identity_generation, der, \
    not_before_us, not_after_us, revoked_at_us, revoke_reason, issued_position, revoked_position";

impl CertRow {
    pub fn state(&self) -> Result<CertState, IdentityError> {
        Ok(CertState {
            serial: self.serial.clone(),
            node_id: self.node_id.clone(),
            identity_generation: u64::try_from(self.identity_generation).map_err(|_| {
                IdentityError::Corrupt(format!("node_certs {}: identity_generation", self.serial))
            })?,
            der: self.der.clone(),
            not_after_us: self.not_after_us,
            revoked: self.revoked_at_us.is_some(),
        })
    }
}

fn lock_suffix(tx: &StoreTx) -> &'static str {
    match tx {
        StoreTx::Postgres(_) => " FOR UPDATE",
        StoreTx::Sqlite(_) | StoreTx::Recorder(_) => "",
    }
}

/// The token whose secret hashes to `hash`, locked for this transaction on Postgres.
pub(crate) async fn token_by_hash(
    tx: &mut StoreTx,
    hash: &[u8; 32],
) -> Result<Option<TokenRow>, IdentityError> {
    let sql = format!(
        "SELECT {TOKEN_COLUMNS} FROM join_tokens WHERE secret_sha256 = $1{}",
        lock_suffix(tx)
    );
    Ok(query_as!(
        tx,
        TokenRow,
        fetch_optional,
        &sql,
        hash.to_vec()
    )?)
}

/// A token by id.
pub(crate) async fn token_by_id(
    tx: &mut StoreTx,
    token_id: &str,
) -> Result<Option<TokenRow>, IdentityError> {
    let sql = format!("SELECT {TOKEN_COLUMNS} FROM join_tokens WHERE token_id = $1");
    Ok(query_as!(tx, TokenRow, fetch_optional, &sql, token_id)?)
}

/// A node by id.
pub(crate) async fn node_by_id(
    tx: &mut StoreTx,
    node_id: &str,
) -> Result<Option<NodeRow>, IdentityError> {
    let sql = format!("SELECT {NODE_COLUMNS} FROM nodes WHERE node_id = $1");
    Ok(query_as!(tx, NodeRow, fetch_optional, &sql, node_id)?)
}

/// The active node holding a hardware key.
pub(crate) async fn node_by_hardware_key(
    tx: &mut StoreTx,
    key: &[u8; 32],
) -> Result<Option<NodeRow>, IdentityError> {
    let sql = format!(
        "SELECT {NODE_COLUMNS} FROM nodes WHERE hardware_key_sha256 = $1 AND status = 'active'"
    );
    Ok(query_as!(tx, NodeRow, fetch_optional, &sql, key.to_vec())?)
}

/// A certificate by serial.
pub(crate) async fn cert_by_serial(
    tx: &mut StoreTx,
    serial: &str,
) -> Result<Option<CertRow>, IdentityError> {
    let sql = format!("SELECT {CERT_COLUMNS} FROM node_certs WHERE serial = $1");
    Ok(query_as!(tx, CertRow, fetch_optional, &sql, serial)?)
}

/// Every certificate of a node, oldest first.
pub(crate) async fn certs_of_node(
    tx: &mut StoreTx,
    node_id: &str,
) -> Result<Vec<CertRow>, IdentityError> {
    let sql = format!(
        "SELECT {CERT_COLUMNS} FROM node_certs WHERE node_id = $1 ORDER BY issued_position"
    );
    Ok(query_as!(tx, CertRow, fetch_all, &sql, node_id)?)
}

#[derive(sqlx::FromRow)]
struct One {
    #[allow(dead_code)]
    one: i64,
}

/// Whether `attestation_uses` holds (attestor, subject).
pub(crate) async fn attestation_used(
    tx: &mut StoreTx,
    attestor: &str,
    subject: &[u8; 32],
) -> Result<bool, IdentityError> {
    let row = query_as!(
        tx,
        One,
        fetch_optional,
        "SELECT CAST(1 AS BIGINT) AS one FROM attestation_uses WHERE attestor = $1 AND subject = $2",
        attestor,
        subject.to_vec()
    )?;
    Ok(row.is_some())
}
