//! Serializable views for the CLI (`--json`) and operators. Times are µs since the epoch.

use serde::Serialize;

use domain::identity::{identity_revoked, NewestCert};
use projections::identity::operator::LatestCert;
use projections::identity::read::{CertRow, NodeRow, TokenRow};

/// What a join token can still do, at a time: the first reason a join with it would be refused,
/// in the order the join judges them (`domain::attest::join_token`: revoked, expired, no use
/// left), else `active`. `bcctl token list` prints it; `--json` carries it as `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum TokenStatus {
    /// Admits joins.
    #[serde(rename = "active")]
    Active,
    /// Every use spent.
    #[serde(rename = "used up")]
    UsedUp,
    /// Past its expiry.
    #[serde(rename = "expired")]
    Expired,
    /// Revoked by an operator (or by its tenant's deletion).
    #[serde(rename = "revoked")]
    Revoked,
}

impl TokenStatus {
    /// The status of a token revoked or not, with `uses_left` uses, ending at `expires_at_us`,
    /// at `now_us`. A join at `expires_at_us` itself is refused as expired, so is the status.
    pub fn of(revoked: bool, uses_left: i64, expires_at_us: i64, now_us: i64) -> Self {
        if revoked {
            TokenStatus::Revoked
        } else if now_us >= expires_at_us {
            TokenStatus::Expired
        } else if uses_left <= 0 {
            TokenStatus::UsedUp
        } else {
            TokenStatus::Active
        }
    }

    /// `active`, `used up`, `expired` or `revoked`.
    pub fn as_str(self) -> &'static str {
        match self {
            TokenStatus::Active => "active",
            TokenStatus::UsedUp => "used up",
            TokenStatus::Expired => "expired",
            TokenStatus::Revoked => "revoked",
        }
    }
}

/// The status a node really has at `now_us`: its row's (`active`, `retired`, `deleted`), unless
/// that is `active` while its newest certificate is revoked or of an older identity generation
/// (`revoked`: `node revoke` leaves the row active, raises the generation and revokes the
/// certificates) or out of date (`expired`). What `bcctl node list | show | revoke` print and
/// what `bcctl tenant list | show` count.
pub fn node_status(node: &NodeView, cert: Option<&LatestCert>, now_us: i64) -> String {
    if node.status != "active" {
        return node.status.clone();
    }
    let generation = |g: i64| u64::try_from(g).unwrap_or(0);
    match cert {
        Some(c)
            if identity_revoked(
                generation(node.identity_generation),
                &NewestCert {
                    revoked: c.revoked_at_us.is_some(),
                    identity_generation: generation(c.identity_generation),
                },
            ) =>
        {
            "revoked".into()
        }
        Some(c) if c.not_after_us <= now_us => "expired".into(),
        _ => node.status.clone(),
    }
}

/// A join token, without its secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenView {
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
    /// `active`, `used up`, `expired` or `revoked` ([`TokenStatus`]), at the time the view was
    /// made.
    pub status: TokenStatus,
}

impl TokenView {
    /// The token of `r` as it stands at `now_us`.
    pub fn at(r: &TokenRow, now_us: i64) -> Self {
        TokenView {
            token_id: r.token_id.clone(),
            tenant_id: r.tenant_id.clone(),
            site_id: r.site_id.clone(),
            pool_id: r.pool_id.clone(),
            role: r.role.clone(),
            uses_total: r.uses_total,
            uses_left: r.uses_left,
            expires_at_us: r.expires_at_us,
            expect_product_uuid: r.expect_product_uuid.clone(),
            expect_mac: r.expect_mac.clone(),
            allow_reclaim: r.allow_reclaim,
            created_at_us: r.created_at_us,
            revoked_at_us: r.revoked_at_us,
            revoke_reason: r.revoke_reason.clone(),
            position: r.position,
            status: TokenStatus::of(
                r.revoked_at_us.is_some(),
                r.uses_left,
                r.expires_at_us,
                now_us,
            ),
        }
    }
}

/// A created token: the secret is shown here once and stored nowhere.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CreatedToken {
    pub secret: String,
    pub token: TokenView,
}

/// A node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeView {
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
    pub joined_at_us: i64,
    pub updated_at_us: i64,
    pub position: i64,
    /// What the node said about itself at its last join.
    pub claims: NodeClaimsView,
}

/// What a node said about itself at its last join (issue 45): claims, recorded as sent, never
/// verified and never binding. `None`: not sent (not readable on the machine, or a join before
/// claims were recorded).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimsView {
    pub hostname: Option<String>,
    pub product_serial: Option<String>,
    pub board_serial: Option<String>,
    pub chassis_serial: Option<String>,
    pub gpu_uuids: Vec<String>,
    pub bcd_version: Option<String>,
    pub boot_id: Option<String>,
}

impl NodeClaimsView {
    /// From the `nodes` columns (`gpu_uuids` comma-joined), in the table's order.
    pub fn from_columns(
        hostname: Option<String>,
        product_serial: Option<String>,
        board_serial: Option<String>,
        chassis_serial: Option<String>,
        gpu_uuids: Option<String>,
        bcd_version: Option<String>,
        boot_id: Option<String>,
    ) -> Self {
        NodeClaimsView {
            hostname,
            product_serial,
            board_serial,
            chassis_serial,
            gpu_uuids: gpu_uuids
                .map(|g| g.split(',').map(str::to_owned).collect())
                .unwrap_or_default(),
            bcd_version,
            boot_id,
        }
    }

    /// Whether any serial (product, board or chassis) is `serial`.
    pub fn has_serial(&self, serial: &str) -> bool {
        [
            &self.product_serial,
            &self.board_serial,
            &self.chassis_serial,
        ]
        .iter()
        .any(|s| s.as_deref() == Some(serial))
    }
}

impl From<&NodeRow> for NodeView {
    fn from(r: &NodeRow) -> Self {
        NodeView {
            node_id: r.node_id.clone(),
            tenant_id: r.tenant_id.clone(),
            site_id: r.site_id.clone(),
            pool_id: r.pool_id.clone(),
            role: r.role.clone(),
            status: r.status.clone(),
            status_reason: r.status_reason.clone(),
            identity_generation: r.identity_generation,
            attestor: r.attestor.clone(),
            node_key: r.node_key.clone(),
            token_id: r.token_id.clone(),
            joined_at_us: r.joined_at_us,
            updated_at_us: r.updated_at_us,
            position: r.position,
            claims: NodeClaimsView::from_columns(
                r.hostname.clone(),
                r.product_serial.clone(),
                r.board_serial.clone(),
                r.chassis_serial.clone(),
                r.gpu_uuids.clone(),
                r.bcd_version.clone(),
                r.last_boot_id.clone(),
            ),
        }
    }
}

/// A node certificate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CertView {
    pub serial: String,
    pub node_id: String,
    pub identity_generation: i64,
    /// Lower-case hex of SHA-256 of the DER.
    pub sha256: String,
    pub not_before_us: i64,
    pub not_after_us: i64,
    pub revoked_at_us: Option<i64>,
    pub revoke_reason: Option<String>,
    pub issued_position: i64,
    pub revoked_position: Option<i64>,
    /// The command kinds the certificate allows (empty: every kind its role allows).
    pub allowed_kinds: Vec<String>,
}

impl From<&CertRow> for CertView {
    fn from(r: &CertRow) -> Self {
        CertView {
            serial: r.serial.clone(),
            node_id: r.node_id.clone(),
            identity_generation: r.identity_generation,
            sha256: hex::encode(domain::identity::sha256(&r.der)),
            not_before_us: r.not_before_us,
            not_after_us: r.not_after_us,
            revoked_at_us: r.revoked_at_us,
            revoke_reason: r.revoke_reason.clone(),
            issued_position: r.issued_position,
            revoked_position: r.revoked_position,
            allowed_kinds: r.allowed_kinds(),
        }
    }
}

/// A node with its certificates.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeDetail {
    pub node: NodeView,
    pub certificates: Vec<CertView>,
}
