//! Recording an approver's signature on a batch, at the batch stream's exact version.
//!
//! The trust domain the signature is checked in is the caller's to give, and the caller must
//! give the DEPLOYMENT's own (the CLI reads it from the deployment's PKI bundle, never from a
//! flag or the approver's word): spec 003, "every verifier takes [the trust domain] from its own
//! configuration". A signature that does not verify is refused naming that trust domain
//! ([`QuorumRefusal::NotForDeployment`]).

use async_trait::async_trait;
use domain::quorum::{
    decide_approval, AddApproval, ApprovalRefusal, ApprovalSignature, ApproveOutcome, BatchEvent,
    BatchId, HeldApproverSet, TrustDomain,
};
use events::store::{EventStore, ExpectedVersion, StoreTx};
use rand_core::CryptoRngCore;

use crate::clock::Clock;
use crate::quorum::batch::append::append_batch_events;
use crate::quorum::batch::view::{load_view, require_batch, BatchView};
use crate::quorum::bundle::load::current_set;
use crate::quorum::error::{QuorumError, QuorumRefusal};
use crate::run::{run, At, Command, Decided};

/// Records one approver's signature; the one that reaches the requirement releases the batch.
pub async fn approve_batch(
    store: &EventStore,
    clock: &dyn Clock,
    trust_domain: &TrustDomain,
    batch_id: &BatchId,
    signature: &ApprovalSignature,
) -> Result<ApproveOutcome, QuorumError> {
    let approve = Approve {
        trust_domain,
        batch_id,
        command: AddApproval {
            signature: signature.clone(),
        },
    };
    run(store, clock, &approve).await
}

/// An approval, as the runner drives it.
struct Approve<'a> {
    trust_domain: &'a TrustDomain,
    batch_id: &'a BatchId,
    command: AddApproval,
}

/// What an approval reads: the batch (and its stream's version) and the published set.
struct Loaded {
    stream_version: u64,
    view: BatchView,
    held: HeldApproverSet,
}

#[async_trait]
impl Command for Approve<'_> {
    type State = Loaded;
    type Event = BatchEvent;
    type Outcome = ApproveOutcome;
    type Answer = ApproveOutcome;
    type Error = QuorumError;

    async fn load(&self, tx: &mut StoreTx, _: &At) -> Result<Loaded, QuorumError> {
        let row = require_batch(tx, self.batch_id).await?;
        let stream_version = row.stream_version;
        let view = load_view(tx, row).await?;
        let held = current_set(tx).await?;
        Ok(Loaded {
            stream_version,
            view,
            held,
        })
    }

    fn decide(&self, loaded: &Loaded, at: &At, _: &mut dyn CryptoRngCore) -> Decided<Self> {
        decide_approval(
            &self.command,
            &loaded.view.state,
            &loaded.held.set,
            self.trust_domain,
            at.now_us,
        )
        .map_err(|refusal| {
            let refusal = match refusal {
                ApprovalRefusal::BadSignature { kid } => QuorumRefusal::NotForDeployment {
                    kid,
                    trust_domain: self.trust_domain.clone(),
                },
                other => QuorumRefusal::Approval(other),
            };
            QuorumError::from(refusal).into()
        })
    }

    async fn append(
        &self,
        tx: &mut StoreTx,
        loaded: &Loaded,
        events: Vec<BatchEvent>,
        at: &At,
    ) -> Result<(), QuorumError> {
        append_batch_events(
            tx,
            self.batch_id,
            ExpectedVersion::Exact(loaded.stream_version),
            &events,
            &loaded.view.tenant_id,
            at.now_us,
        )
        .await
    }

    async fn answer(
        &self,
        _: &mut StoreTx,
        _: Loaded,
        outcome: ApproveOutcome,
        _: &At,
    ) -> Result<ApproveOutcome, QuorumError> {
        Ok(outcome)
    }
}
