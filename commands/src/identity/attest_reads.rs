//! Reads of the attestation plane's own tables the admission step needs: `pools` by id and the
//! latest `join_requests` row of (attestor, subject).
// replaced by projections::attest::read once pools lands

use domain::attest::{JoinRequestState, JoinRequestStatus, PoolState};
use events::store::StoreTx;

use super::IdentityError;

type PoolRowTuple = (String, String, String, Option<String>);

/// The pool `pool_id`, when it has a row (a pool nobody created has no policy).
pub(crate) async fn pool(
    tx: &mut StoreTx,
    pool_id: &str,
) -> Result<Option<PoolState>, IdentityError> {
    let row: Option<PoolRowTuple> = tx
        .fetch_optional(
            "SELECT pool_id, tenant_id, description, join_attestors FROM pools WHERE pool_id = $1",
            &[pool_id.into()],
        )
        .await?;
    Ok(row.map(
        |(pool_id, tenant_id, description, join_attestors)| PoolState {
            pool_id,
            tenant_id,
            description,
            join_attestors: join_attestors.map(|ids| {
                ids.split(',')
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect()
            }),
        },
    ))
}

type RequestRowTuple = (String, String, String, Vec<u8>, Vec<u8>, String, i64, i64);

/// The latest join request keyed by (attestor, subject).
pub(crate) async fn latest_join_request(
    tx: &mut StoreTx,
    attestor: &str,
    subject: &[u8; 32],
) -> Result<Option<JoinRequestState>, IdentityError> {
    let row: Option<RequestRowTuple> = tx
        .fetch_optional(
            "SELECT request_id, tenant_id, attestor, subject, csr_sha256, status, expires_at_us, \
             version FROM join_requests WHERE attestor = $1 AND subject = $2 \
             ORDER BY created_at_us DESC, request_id DESC LIMIT 1",
            &[attestor.into(), subject.to_vec().into()],
        )
        .await?;
    let Some((request_id, tenant_id, attestor, subject, csr, status, expires_at_us, version)) = row
    else {
        return Ok(None);
    };
    let corrupt = |why: &str| IdentityError::Corrupt(format!("join_requests {request_id}: {why}"));
    Ok(Some(JoinRequestState {
        subject: subject
            .as_slice()
            .try_into()
            .map_err(|_| corrupt("subject is not 32 bytes"))?,
        csr_sha256: csr
            .as_slice()
            .try_into()
            .map_err(|_| corrupt("csr_sha256 is not 32 bytes"))?,
        status: JoinRequestStatus::parse(&status).ok_or_else(|| corrupt("unknown status"))?,
        request_id: request_id.clone(),
        tenant_id,
        attestor,
        expires_at_us,
        version,
    }))
}
