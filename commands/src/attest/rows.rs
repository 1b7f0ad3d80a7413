//! Turning rows of the attestation projections ([`projections::attest::read`]) into the state
//! the domain decides on; a row that does not convert is corruption
//! ([`IdentityError::Corrupt`]).

use domain::attest::{
    CloudAccountEntry, CloudAccountState, JoinRequestState, JoinRequestStatus, PoolState,
    TpmAllowEntry, TpmAllowState,
};
use projections::attest::read::{CloudAccountRow, JoinRequestRow, PoolRow, TpmAllowRow};

use crate::identity::IdentityError;

/// The pool state of a `pools` row.
pub fn pool_state(row: &PoolRow) -> PoolState {
    PoolState {
        pool_id: row.pool_id.clone(),
        tenant_id: row.tenant_id.clone(),
        description: row.description.clone(),
        join_attestors: row.attestor_ids(),
    }
}

/// The join request state of a `join_requests` row.
pub fn join_request_state(row: &JoinRequestRow) -> Result<JoinRequestState, IdentityError> {
    let corrupt =
        |why: &str| IdentityError::Corrupt(format!("join_requests {}: {why}", row.request_id));
    Ok(JoinRequestState {
        request_id: row.request_id.clone(),
        tenant_id: row.tenant_id.clone(),
        attestor: row.attestor.clone(),
        subject: row
            .subject
            .as_slice()
            .try_into()
            .map_err(|_| corrupt("subject is not 32 bytes"))?,
        csr_sha256: row
            .csr_sha256
            .as_slice()
            .try_into()
            .map_err(|_| corrupt("csr_sha256 is not 32 bytes"))?,
        status: JoinRequestStatus::parse(&row.status).ok_or_else(|| corrupt("unknown status"))?,
        expires_at_us: row.expires_at_us,
        version: row.version,
    })
}

/// The placement of a `tpm_ek_allows` row, as the `tpm` attestor reads it.
pub fn tpm_allow_state(row: &TpmAllowRow) -> TpmAllowState {
    TpmAllowState {
        allow_id: row.allow_id.clone(),
        tenant_id: row.tenant_id.clone(),
        site_id: row.site_id.clone(),
        pool_id: row.pool_id.clone(),
    }
}

/// The EK SHA-256 of a `tpm_ek_allows` row.
pub fn tpm_allow_ek(row: &TpmAllowRow) -> Result<[u8; 32], IdentityError> {
    row.ek_sha256.as_slice().try_into().map_err(|_| {
        IdentityError::Corrupt(format!(
            "tpm_ek_allows {}: ek_sha256 is not 32 bytes",
            row.allow_id
        ))
    })
}

/// A `tpm_ek_allows` row as the revoke decision reads it.
pub fn tpm_allow_entry(row: &TpmAllowRow) -> Result<TpmAllowEntry, IdentityError> {
    Ok(TpmAllowEntry {
        allow_id: row.allow_id.clone(),
        ek_sha256: tpm_allow_ek(row)?,
        revoked: row.revoked,
    })
}

/// The placement of a `cloud_accounts` row, as the `cloud-iid` attestor reads it.
pub fn cloud_account_state(row: &CloudAccountRow) -> Result<CloudAccountState, IdentityError> {
    Ok(CloudAccountState {
        entry_id: row.entry_id.clone(),
        tenant_id: row.tenant_id.clone(),
        site_id: row.site_id.clone(),
        pool_id: row.pool_id.clone(),
        role: domain::attest::cloud_accounts::parse_account_role(&row.role).map_err(|_| {
            IdentityError::Corrupt(format!(
                "cloud_accounts {}: role {:?} is not node or site",
                row.entry_id, row.role
            ))
        })?,
    })
}

/// A `cloud_accounts` row as the remove decision reads it.
pub fn cloud_account_entry(row: &CloudAccountRow) -> CloudAccountEntry {
    CloudAccountEntry {
        entry_id: row.entry_id.clone(),
        provider: row.provider.clone(),
        account: row.account.clone(),
        removed: row.removed,
    }
}
