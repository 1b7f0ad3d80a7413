//! The approver quorum check of a destructive command on the machine (its admission): the wire
//! approval and proof read into the domain's types, [`domain::quorum::admit_cached`] under the
//! held approver set, and its state persisted in `batch-leaves.json` /
//! `unbatched-destructive.json` only after admission.
//!
//! Anything the daemon cannot read (the held set, the stored bundle, the admission state) refuses
//! the command `BATCH_UNAPPROVED` with detail `trust-bundle-unreadable: ...`: a destructive
//! command never runs on state the daemon cannot check.

use domain::quorum::{
    admit_cached, AdmissionClock, AgentQuorum, ApprovalSignature, BatchApproval, BatchId,
    DestructiveCommand, Kid, PayloadDigest, RejectReason, ScopeHash, ScopeProof, SetDigest,
    TrustDomain, VerifiedApprovals,
};

use crate::files::identity::StoredIdentity;
use crate::files::DataDir;
use crate::signed_commands::used_approvals::AdmissionStore;
use crate::trust::approver_set::{load_held, offer_of};

/// A refused admission: the wire reason and the detail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The wire reason.
    pub reason: proto::CommandRejectReason,
    /// The refusal's message (`leaf-used: ...`).
    pub detail: String,
}

fn unapproved(detail: String) -> Refused {
    Refused {
        reason: proto::CommandRejectReason::BatchUnapproved,
        detail,
    }
}

fn unreadable(what: impl std::fmt::Display) -> Refused {
    unapproved(format!("trust-bundle-unreadable: {what}"))
}

/// The wire approval as the domain's (a malformed one is refused `approval-malformed`).
pub fn approval_of(wire: &proto::BatchApproval) -> Result<BatchApproval, Refused> {
    let malformed = |what: &str| unapproved(format!("approval-malformed: {what}"));
    let signatures = wire
        .signatures
        .iter()
        .map(|s| {
            Kid::from_slice(&s.kid)
                .map(|kid| ApprovalSignature {
                    kid,
                    sig: s.sig.clone(),
                })
                .map_err(|_| malformed("a signature's kid is not 32 bytes"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(BatchApproval {
        batch_id: BatchId::from_slice(&wire.batch_id)
            .map_err(|_| malformed("batch_id is not 32 bytes"))?,
        scope_root: ScopeHash::from_slice(&wire.scope_root)
            .map_err(|_| malformed("scope_root is not 32 bytes"))?,
        scope_size: wire.scope_size,
        not_after_us: wire.not_after_us,
        signatures,
    })
}

/// The wire proof as the domain's.
pub fn proof_of(wire: &proto::BatchProof) -> Result<ScopeProof, Refused> {
    let siblings = wire
        .siblings
        .iter()
        .map(|s| ScopeHash::from_slice(s))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| unapproved("proof-malformed: a sibling hash is not 32 bytes".into()))?;
    Ok(ScopeProof {
        index: wire.index,
        siblings,
    })
}

/// One destructive command to admit.
#[derive(Debug, Clone, Copy)]
pub struct ToAdmit<'a> {
    /// The command id.
    pub command_id: &'a str,
    /// The node id (the command's subject).
    pub node_id: &'a str,
    /// The kind.
    pub kind: &'a str,
    /// The payload bytes.
    pub payload: &'a [u8],
    /// The signed body's batch.
    pub batch_id: Option<&'a BatchId>,
    /// `Command.batch_approval`.
    pub approval: Option<&'a proto::BatchApproval>,
    /// `Command.batch_proof`.
    pub proof: Option<&'a proto::BatchProof>,
}

/// Admits `command` under the held set, or refuses it; persists the admission state when
/// admitted.
pub fn admit_destructive(
    dir: &DataDir,
    stored: &StoredIdentity,
    pin: Option<&SetDigest>,
    verified: &mut VerifiedApprovals,
    command: &ToAdmit<'_>,
    clock: AdmissionClock,
) -> Result<domain::quorum::Admission, Refused> {
    let trust_domain = TrustDomain::new(&stored.trust_domain).map_err(|_| {
        unreadable(format!(
            "the stored trust domain {:?} is not valid",
            stored.trust_domain
        ))
    })?;
    if let Some(content) = stored.trust_bundle.as_deref() {
        offer_of(content).map_err(unreadable)?;
    }
    let held = load_held(dir).map_err(unreadable)?;
    let store = AdmissionStore::new(dir.root());
    let state = store.load().map_err(unreadable)?;
    let approval = command.approval.map(approval_of).transpose()?;
    let proof = command.proof.map(proof_of).transpose()?;
    let payload_sha256 = PayloadDigest::of(command.payload);
    let destructive = DestructiveCommand {
        command_id: command.command_id,
        subject: command.node_id,
        kind: command.kind,
        payload_sha256: &payload_sha256,
        batch_id: command.batch_id,
        approval: approval.as_ref(),
        proof: proof.as_ref(),
        bound_leaf_only: false,
    };
    let quorum = AgentQuorum {
        set: &held.set,
        pin,
        trust_domain: &trust_domain,
    };
    let (admission, next) =
        admit_cached(&destructive, &quorum, &state, verified, clock).map_err(|refusal| {
            Refused {
                reason: match refusal.reject_reason() {
                    RejectReason::BatchUnapproved => proto::CommandRejectReason::BatchUnapproved,
                    RejectReason::UnbatchedLimit => proto::CommandRejectReason::UnbatchedLimit,
                },
                detail: refusal.to_string(),
            }
        })?;
    store.save(&state, &next).map_err(|e| {
        unapproved(format!(
            "admission-state-unwritable: {e}; the command did not run"
        ))
    })?;
    Ok(admission)
}
