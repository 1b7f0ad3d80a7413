//! Turning rows of the attestation projections ([`projections::attest::read`]) into the state
//! the domain decides on; a row that does not convert is corruption
//! ([`IdentityError::Corrupt`]).

use domain::attest::{EntryRecord, EntryState, JoinRequestState, JoinRequestStatus, PoolState};
use domain::pki::NodeRole;
use projections::attest::read::{AttestorEntryRow, JoinRequestRow, PoolRow};

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

/// The placement of an `attestor_entries` row, as an attestor reads it (`FactKey::Entry`).
pub fn entry_state(row: &AttestorEntryRow) -> Result<EntryState, IdentityError> {
    let role = match row.role.as_deref() {
        None => None,
        Some(text) => Some(text.parse::<NodeRole>().map_err(|_| {
            IdentityError::Corrupt(format!(
                "attestor_entries {}: role {text:?} is not a role",
                row.entry_id
            ))
        })?),
    };
    Ok(EntryState {
        entry_id: row.entry_id.clone(),
        tenant_id: row.tenant_id.clone(),
        site_id: row.site_id.clone(),
        pool_id: row.pool_id.clone(),
        role,
    })
}

/// An `attestor_entries` row as the remove decision reads it.
pub fn entry_record(row: &AttestorEntryRow) -> EntryRecord {
    EntryRecord {
        entry_id: row.entry_id.clone(),
        key: row.entry_key.clone(),
        removed: row.removed,
    }
}
