//! Recording an approver's signature on a batch, at the batch stream's exact version.
//!
//! The trust domain the signature is checked in is the caller's to give, and the caller must
//! give the DEPLOYMENT's own (the CLI reads it from the deployment's PKI bundle, never from a
//! flag or the approver's word): spec 003, "every verifier takes [the trust domain] from its own
//! configuration". A signature that does not verify is refused naming that trust domain
//! ([`QuorumRefusal::NotForDeployment`]).

use domain::quorum::{
    decide_approval, AddApproval, ApprovalRefusal, ApprovalSignature, ApproveOutcome, BatchId,
    TrustDomain,
};
use events::store::{EventStore, ExpectedVersion};

use crate::clock::Clock;
use crate::quorum::batch::append::append_batch_events;
use crate::quorum::batch::view::{load_view, require_batch};
use crate::quorum::bundle::load::current_set;
use crate::quorum::error::{QuorumError, QuorumRefusal};

/// Records one approver's signature; the one that reaches the requirement releases the batch.
pub async fn approve_batch(
    store: &EventStore,
    clock: &dyn Clock,
    trust_domain: &TrustDomain,
    batch_id: &BatchId,
    signature: &ApprovalSignature,
) -> Result<ApproveOutcome, QuorumError> {
    crate::transaction!(store, QuorumError, |tx| {
        let now_us = clock.now_us();
        let row = require_batch(tx, batch_id).await?;
        let stream_version = row.stream_version;
        let tenant = row.tenant_id.clone();
        let view = load_view(tx, row).await?;
        let held = current_set(tx).await?;
        let decision = decide_approval(
            &AddApproval {
                signature: signature.clone(),
            },
            &view.state,
            &held.set,
            trust_domain,
            now_us,
        )
        .map_err(|refusal| match refusal {
            ApprovalRefusal::BadSignature { kid } => QuorumRefusal::NotForDeployment {
                kid,
                trust_domain: trust_domain.clone(),
            },
            other => QuorumRefusal::Approval(other),
        })?;
        append_batch_events(
            tx,
            batch_id,
            ExpectedVersion::Exact(stream_version),
            &decision.events,
            &tenant,
            now_us,
        )
        .await?;
        Ok(decision.outcome)
    })
}
