//! Serializable views of pools, join requests, TPM allow-list entries and cloud accounts for the CLI (`--json`) and operators. Times
//! are µs since the epoch; digests lower-case hex.

use serde::Serialize;

use projections::attest::read::{CloudAccountRow, JoinRequestRow, PoolRow, TpmAllowRow};

/// A pool and its attestor policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolView {
    pub pool_id: String,
    pub tenant_id: String,
    pub description: String,
    /// The attestors that may admit a machine into it, in the order given; `null`: any.
    pub join_attestors: Option<Vec<String>>,
    pub created_at_us: i64,
    pub updated_at_us: i64,
    pub version: i64,
    pub position: i64,
}

impl From<&PoolRow> for PoolView {
    fn from(r: &PoolRow) -> Self {
        PoolView {
            pool_id: r.pool_id.clone(),
            tenant_id: r.tenant_id.clone(),
            description: r.description.clone(),
            join_attestors: r.attestor_ids(),
            created_at_us: r.created_at_us,
            updated_at_us: r.updated_at_us,
            version: r.version,
            position: r.position,
        }
    }
}

/// A join request (never the evidence: the attestor's summary line only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JoinRequestView {
    pub request_id: String,
    pub tenant_id: String,
    pub attestor: String,
    pub subject_sha256: String,
    pub csr_sha256: String,
    pub role: String,
    pub site_id: String,
    pub pool_id: String,
    pub node_id: Option<String>,
    pub token_id: Option<String>,
    pub product_uuid_sha256: Option<String>,
    pub macs_sha256: Option<String>,
    pub summary: String,
    pub status: String,
    pub decided_by: Option<String>,
    pub decision_reason: Option<String>,
    pub joined_node_id: Option<String>,
    pub created_at_us: i64,
    pub expires_at_us: i64,
    pub updated_at_us: i64,
    pub position: i64,
}

impl From<&JoinRequestRow> for JoinRequestView {
    fn from(r: &JoinRequestRow) -> Self {
        JoinRequestView {
            request_id: r.request_id.clone(),
            tenant_id: r.tenant_id.clone(),
            attestor: r.attestor.clone(),
            subject_sha256: hex::encode(&r.subject),
            csr_sha256: hex::encode(&r.csr_sha256),
            role: r.role.clone(),
            site_id: r.site_id.clone(),
            pool_id: r.pool_id.clone(),
            node_id: r.node_id.clone(),
            token_id: r.token_id.clone(),
            product_uuid_sha256: r.product_uuid_sha256.as_ref().map(hex::encode),
            macs_sha256: r.macs_sha256.as_ref().map(hex::encode),
            summary: r.summary.clone(),
            status: r.status.clone(),
            decided_by: r.decided_by.clone(),
            decision_reason: r.decision_reason.clone(),
            joined_node_id: r.joined_node_id.clone(),
            created_at_us: r.created_at_us,
            expires_at_us: r.expires_at_us,
            updated_at_us: r.updated_at_us,
            position: r.position,
        }
    }
}

/// A TPM allow-list entry (`bcctl tpm allow|list|revoke`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TpmAllowView {
    pub allow_id: String,
    /// SHA-256 of the EK's TPMT_PUBLIC, lower-case hex.
    pub ek_sha256: String,
    pub tenant_id: String,
    pub site_id: String,
    pub pool_id: String,
    pub allowed_by: String,
    pub note: String,
    /// `active` or `revoked`.
    pub status: String,
    pub revoked_by: Option<String>,
    pub revoke_reason: Option<String>,
    pub created_at_us: i64,
    pub updated_at_us: i64,
    pub position: i64,
}

impl From<&TpmAllowRow> for TpmAllowView {
    fn from(r: &TpmAllowRow) -> Self {
        TpmAllowView {
            allow_id: r.allow_id.clone(),
            ek_sha256: hex::encode(&r.ek_sha256),
            tenant_id: r.tenant_id.clone(),
            site_id: r.site_id.clone(),
            pool_id: r.pool_id.clone(),
            allowed_by: r.allowed_by.clone(),
            note: r.note.clone(),
            status: if r.revoked { "revoked" } else { "active" }.into(),
            revoked_by: r.revoked_by.clone(),
            revoke_reason: r.revoke_reason.clone(),
            created_at_us: r.created_at_us,
            updated_at_us: r.updated_at_us,
            position: r.position,
        }
    }
}

/// A registered cloud account (`bcctl cloud account add|list|remove`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CloudAccountView {
    pub entry_id: String,
    /// `aws`, `gcp`, `azure` or `oidc`.
    pub provider: String,
    pub account: String,
    pub tenant_id: String,
    pub site_id: String,
    pub pool_id: String,
    pub role: String,
    pub added_by: String,
    /// `active` or `removed`.
    pub status: String,
    pub removed_by: Option<String>,
    pub remove_reason: Option<String>,
    pub created_at_us: i64,
    pub updated_at_us: i64,
    pub position: i64,
}

impl From<&CloudAccountRow> for CloudAccountView {
    fn from(r: &CloudAccountRow) -> Self {
        CloudAccountView {
            entry_id: r.entry_id.clone(),
            provider: r.provider.clone(),
            account: r.account.clone(),
            tenant_id: r.tenant_id.clone(),
            site_id: r.site_id.clone(),
            pool_id: r.pool_id.clone(),
            role: r.role.clone(),
            added_by: r.added_by.clone(),
            status: if r.removed { "removed" } else { "active" }.into(),
            removed_by: r.removed_by.clone(),
            remove_reason: r.remove_reason.clone(),
            created_at_us: r.created_at_us,
            updated_at_us: r.updated_at_us,
            position: r.position,
        }
    }
}
