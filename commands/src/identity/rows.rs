//! Turning rows of the identity projections ([`projections::identity::read`]) into the state the
//! domain decides on; a row that does not convert is corruption ([`IdentityError::Corrupt`]).

use domain::identity::{CertState, ExpectBinding, NodeState, NodeStatus, TokenRole, TokenState};
use domain::pki::TokenHash;
use projections::identity::read::{CertRow, NodeRow, TokenRow};

use super::error::IdentityError;

/// The token state of a `join_tokens` row.
pub(crate) fn token_state(row: &TokenRow) -> Result<TokenState, IdentityError> {
    let corrupt =
        |why: &str| IdentityError::Corrupt(format!("join_tokens {}: {why}", row.token_id));
    let hash: [u8; 32] = row
        .secret_sha256
        .as_slice()
        .try_into()
        .map_err(|_| corrupt("secret_sha256 is not 32 bytes"))?;
    Ok(TokenState {
        token_id: row.token_id.clone(),
        tenant_id: row.tenant_id.clone(),
        site_id: row.site_id.clone(),
        pool_id: row.pool_id.clone(),
        role: TokenRole::parse(&row.role).ok_or_else(|| corrupt("unknown role"))?,
        uses_total: u32::try_from(row.uses_total).map_err(|_| corrupt("uses_total"))?,
        uses_left: u32::try_from(row.uses_left).map_err(|_| corrupt("uses_left"))?,
        expires_at_us: row.expires_at_us,
        secret_hash: TokenHash::from_bytes(hash),
        expect: ExpectBinding {
            product_uuid: row.expect_product_uuid.clone(),
            mac: row.expect_mac.clone(),
        },
        allow_reclaim: row.allow_reclaim,
        reclaim_node_id: row.reclaim_node_id.clone(),
        for_node_id: row.for_node_id.clone(),
        require_approval: row.require_approval,
        revoked: row.revoked_at_us.is_some(),
    })
}

/// The node state of a `nodes` row.
pub(crate) fn node_state(row: &NodeRow) -> Result<NodeState, IdentityError> {
    let corrupt = |why: &str| IdentityError::Corrupt(format!("nodes {}: {why}", row.node_id));
    Ok(NodeState {
        node_id: row.node_id.clone(),
        tenant_id: row.tenant_id.clone(),
        site_id: row.site_id.clone(),
        pool_id: row.pool_id.clone(),
        role: row.role.parse().map_err(|_| corrupt("unknown role"))?,
        status: NodeStatus::parse(&row.status).ok_or_else(|| corrupt("unknown status"))?,
        identity_generation: u64::try_from(row.identity_generation)
            .map_err(|_| corrupt("identity_generation"))?,
        hardware_key_sha256: match &row.hardware_key_sha256 {
            None => None,
            Some(b) => Some(
                b.as_slice()
                    .try_into()
                    .map_err(|_| corrupt("hardware_key_sha256 is not 32 bytes"))?,
            ),
        },
        product_uuid_sha256: match &row.product_uuid_sha256 {
            None => None,
            Some(b) => Some(
                b.as_slice()
                    .try_into()
                    .map_err(|_| corrupt("product_uuid_sha256 is not 32 bytes"))?,
            ),
        },
    })
}

/// The certificate state of a `node_certs` row.
pub(crate) fn cert_state(row: &CertRow) -> Result<CertState, IdentityError> {
    Ok(CertState {
        serial: row.serial.clone(),
        node_id: row.node_id.clone(),
        identity_generation: u64::try_from(row.identity_generation).map_err(|_| {
            IdentityError::Corrupt(format!("node_certs {}: identity_generation", row.serial))
        })?,
        der: row.der.clone(),
        not_after_us: row.not_after_us,
        revoked: row.revoked_at_us.is_some(),
        allowed_kinds: row.allowed_kinds(),
    })
}
