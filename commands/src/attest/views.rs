//! Serializable views of pools, join requests and attestor entries (the TPM allow-list's and the
//! cloud accounts' as they always printed) for the CLI (`--json`) and operators. Times are µs
//! since the epoch; digests lower-case hex.

use serde::Serialize;

use domain::attest::EntryList;
use projections::attest::read::{AttestorEntryRow, JoinRequestRow, PoolRow};

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

/// An entry of an operator-managed attestor list (`bcctl attestor entry add|list|remove`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EntryView {
    pub entry_id: String,
    /// The list (`tpm-allow`, `cloud-account`, ...).
    pub list: String,
    /// The key the attestor looks it up by.
    pub key: String,
    pub tenant_id: String,
    pub site_id: String,
    pub pool_id: String,
    /// The role its machines join as; `null` when the list names none.
    pub role: Option<String>,
    pub added_by: String,
    pub note: String,
    /// `active`, or the list's word for removed (`revoked`, `removed`).
    pub status: String,
    pub removed_by: Option<String>,
    pub remove_reason: Option<String>,
    pub created_at_us: i64,
    pub updated_at_us: i64,
    pub position: i64,
}

impl EntryView {
    /// A row of `list`.
    pub fn of(list: &EntryList, r: &AttestorEntryRow) -> Self {
        EntryView {
            entry_id: r.entry_id.clone(),
            list: r.list.clone(),
            key: r.entry_key.clone(),
            tenant_id: r.tenant_id.clone(),
            site_id: r.site_id.clone(),
            pool_id: r.pool_id.clone(),
            role: r.role.clone(),
            added_by: r.added_by.clone(),
            note: r.note.clone(),
            status: if r.removed { list.removed } else { "active" }.into(),
            removed_by: r.removed_by.clone(),
            remove_reason: r.remove_reason.clone(),
            created_at_us: r.created_at_us,
            updated_at_us: r.updated_at_us,
            position: r.position,
        }
    }
}

/// A TPM allow-list entry (`bcctl tpm allow|list|revoke`): an entry of the `tpm-allow` list.
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

impl From<EntryView> for TpmAllowView {
    fn from(e: EntryView) -> Self {
        TpmAllowView {
            allow_id: e.entry_id,
            ek_sha256: e.key,
            tenant_id: e.tenant_id,
            site_id: e.site_id,
            pool_id: e.pool_id,
            allowed_by: e.added_by,
            note: e.note,
            status: e.status,
            revoked_by: e.removed_by,
            revoke_reason: e.remove_reason,
            created_at_us: e.created_at_us,
            updated_at_us: e.updated_at_us,
            position: e.position,
        }
    }
}

/// A registered cloud account (`bcctl cloud account add|list|remove`): an entry of the
/// `cloud-account` list, its key `<provider>/<account>`.
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

impl From<EntryView> for CloudAccountView {
    fn from(e: EntryView) -> Self {
        let (provider, account) = e.key.split_once('/').unwrap_or((&e.key, ""));
        CloudAccountView {
            provider: provider.to_owned(),
            account: account.to_owned(),
            entry_id: e.entry_id,
            tenant_id: e.tenant_id,
            site_id: e.site_id,
            pool_id: e.pool_id,
            role: e.role.unwrap_or_default(),
            added_by: e.added_by,
            status: e.status,
            removed_by: e.removed_by,
            remove_reason: e.remove_reason,
            created_at_us: e.created_at_us,
            updated_at_us: e.updated_at_us,
            position: e.position,
        }
    }
}
