//! A join whose answer was lost, asked again (issue 40): before a refusal that names a spent
//! single-use subject ([`AttestorRefusal::spent`]) is recorded, the join that spent it is loaded
//! ([`load_earlier_join`]: the `attestation_uses` row, its node with that node's last join and
//! certificates) and [`domain::attest::answer_again`] decides whether this request gets that
//! identity again. Nothing is appended either way but the refusal, when it stands.

use domain::attest::{answer_again, AttestorRefusal, EarlierJoin, SpentUse};
use domain::identity::Joined;
use domain::pki::{TrustDomain, VerifiedCsr};
use events::store::StoreTx;
use projections::identity::read;
use time::OffsetDateTime;

use super::error::IdentityError;
use super::rows;

/// What [`answer_again`] reads for the subject `spent`, in the join's transaction.
pub(crate) async fn load_earlier_join(
    tx: &mut StoreTx,
    spent: &SpentUse,
) -> Result<EarlierJoin, IdentityError> {
    let mut earlier = EarlierJoin::default();
    let Some(used) = read::attestation_use(tx, &spent.attestor, &spent.subject).await? else {
        return Ok(earlier);
    };
    earlier.use_found = true;
    earlier.use_expires_at_us = used.expires_at_us;
    earlier.spent_by = used.node_id;
    let Some(id) = earlier.spent_by.clone() else {
        return Ok(earlier);
    };
    let Some(node) = read::node_by_id(tx, &id).await? else {
        return Ok(earlier);
    };
    earlier.csr_sha256 = match &node.join_csr_sha256 {
        None => None,
        Some(b) if b.is_empty() => None,
        Some(b) => Some(b.as_slice().try_into().map_err(|_| {
            IdentityError::Corrupt(format!("nodes {id}: join_csr_sha256 is not 32 bytes"))
        })?),
    };
    earlier.attestor = node.attestor.clone();
    earlier.token_id = node.token_id.clone();
    earlier.node = Some(rows::node_state(&node)?);
    earlier.certificates = read::certs_of_node(tx, &id)
        .await?
        .iter()
        .map(rows::cert_state)
        .collect::<Result<_, _>>()?;
    Ok(earlier)
}

/// The identity already issued when `refusal` names a subject the join of this same request
/// spent (`attestor`, `csr`) and that identity is still the node's current one; `None`: the
/// refusal stands.
pub(crate) async fn answered_again(
    tx: &mut StoreTx,
    trust_domain: &TrustDomain,
    attestor: &str,
    refusal: &AttestorRefusal,
    csr: &VerifiedCsr,
    now: OffsetDateTime,
) -> Result<Option<Joined>, IdentityError> {
    let Some(spent) = &refusal.spent else {
        return Ok(None);
    };
    let earlier = load_earlier_join(tx, spent).await?;
    Ok(answer_again(trust_domain, attestor, refusal, csr, &earlier, now).ok())
}
