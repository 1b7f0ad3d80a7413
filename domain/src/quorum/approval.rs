//! Batch approvals: what an approver signs, how signatures are counted, and the server-side
//! decision to record one.
//!
//! Spec, "The destructive-batch quorum": approvers sign "the batch id, root, size, expiry and the
//! deployment's trust domain" under "the purpose batch-approval"; on the machine a batch needs
//! "enough distinct approver signatures (the tier for its scope size, else the threshold, never
//! fewer than one; a kid must be the SHA-256 of its key; duplicates count once)"; "Once the batch
//! holds the required approvals it is released"; "A pending batch past its end reads as expired".
//!
//! The signing input ([`batch_approval_signing_input`], framing in [`super::signing`]) is purpose
//! `batch-approval` over `[batch_id (32 bytes), scope_root (32 bytes), uint32_be(scope_size),
//! int64_be(not_after in µs since the Unix epoch), trust_domain]`. Times are microseconds since the
//! Unix epoch, as the event envelope's `occurred_at_us`. A kid counts only if the held set has that
//! key, and an [`super::approver_set::ApproverKey`] exists only with kid = SHA-256(SPKI).
//!
//! [`decide_approval`] records one approval on the server (`decide(command, state, now) ->
//! Result<Decision<BatchEvent, ApproveOutcome>, ApprovalRefusal>`: the batch's log events and
//! what the approval did); [`BatchApprovalState::evolve`] applies them.

use std::collections::{BTreeMap, BTreeSet};

use events::schema::{BatchApprovalRecorded, BatchApproved, QuorumSignature};

use super::approver_set::{ApproverSet, Kid};
use super::batch_event::BatchEvent;
use super::decision::Decision;
use super::scope::{BatchId, ScopeHash};
use super::signing::{signed_parts, PURPOSE_BATCH_APPROVAL};
use super::trust_domain::TrustDomain;

/// One approver's signature over a batch (`{ kid, sig }`; sig ECDSA P-256/SHA-256, ASN.1 DER).
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct ApprovalSignature {
    /// The approver's kid.
    pub kid: Kid,
    /// The signature, hex in JSON.
    #[serde(with = "crate::quorum::bytes32::hex_bytes")]
    pub sig: Vec<u8>,
}

/// A batch approval as a command carries it (`Command.batch_approval`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BatchApproval {
    /// The batch.
    pub batch_id: BatchId,
    /// The scope tree's root.
    pub scope_root: ScopeHash,
    /// The number of leaves.
    pub scope_size: u32,
    /// The end of the approval, µs since the Unix epoch (a daemon judges it at its trusted time).
    pub not_after_us: i64,
    /// The approvers' signatures.
    pub signatures: Vec<ApprovalSignature>,
}

/// The bytes an approver signs: purpose `batch-approval` over `[batch_id, scope_root,
/// uint32_be(scope_size), int64_be(not_after_us), trust_domain]`.
pub fn batch_approval_signing_input(
    batch_id: &BatchId,
    scope_root: &ScopeHash,
    scope_size: u32,
    not_after_us: i64,
    trust_domain: &TrustDomain,
) -> Vec<u8> {
    signed_parts(
        PURPOSE_BATCH_APPROVAL,
        &[
            batch_id.as_bytes(),
            scope_root.as_bytes(),
            &scope_size.to_be_bytes(),
            &not_after_us.to_be_bytes(),
            trust_domain.as_str().as_bytes(),
        ],
    )
}

impl BatchApproval {
    /// The bytes its signatures cover, in `trust_domain`.
    pub fn signing_input(&self, trust_domain: &TrustDomain) -> Vec<u8> {
        batch_approval_signing_input(
            &self.batch_id,
            &self.scope_root,
            self.scope_size,
            self.not_after_us,
            trust_domain,
        )
    }

    /// The distinct keys of `set` with a valid signature; others and repeats are ignored.
    pub fn valid_approvers(&self, set: &ApproverSet, trust_domain: &TrustDomain) -> Vec<Kid> {
        let message = self.signing_input(trust_domain);
        let mut valid = BTreeSet::new();
        for signature in &self.signatures {
            if valid.contains(&signature.kid) {
                continue;
            }
            if set
                .key(&signature.kid)
                .is_some_and(|key| key.verifies(&message, &signature.sig))
            {
                valid.insert(signature.kid);
            }
        }
        valid.into_iter().collect()
    }
}

/// Where a batch stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BatchStatus {
    /// Waiting for approvals.
    Pending,
    /// Holds its required approvals; its commands run.
    Approved,
    /// Passed its end while pending.
    Expired,
    /// Cancelled.
    Cancelled,
}

impl BatchStatus {
    /// The stored text: `pending`, `approved`, `expired` or `cancelled`.
    pub fn as_str(self) -> &'static str {
        match self {
            BatchStatus::Pending => "pending",
            BatchStatus::Approved => "approved",
            BatchStatus::Expired => "expired",
            BatchStatus::Cancelled => "cancelled",
        }
    }

    /// Parses the stored text.
    pub fn parse(text: &str) -> Option<BatchStatus> {
        match text {
            "pending" => Some(BatchStatus::Pending),
            "approved" => Some(BatchStatus::Approved),
            "expired" => Some(BatchStatus::Expired),
            "cancelled" => Some(BatchStatus::Cancelled),
            _ => None,
        }
    }
}

/// The approval side of a batch, as the server holds it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BatchApprovalState {
    /// The batch.
    pub batch_id: BatchId,
    /// Its scope root.
    pub scope_root: ScopeHash,
    /// Its scope size.
    pub scope_size: u32,
    /// Its end, µs since the Unix epoch.
    pub not_after_us: i64,
    /// Approvals it needs, fixed at creation.
    pub required: u32,
    /// Where it stands.
    pub status: BatchStatus,
    /// Approvals recorded so far, one per key.
    pub approvals: BTreeMap<Kid, ApprovalSignature>,
}

/// An approver's signature offered for a batch.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AddApproval {
    /// The signature (with its kid).
    pub signature: ApprovalSignature,
}

/// What recording an approval did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApproveOutcome {
    /// False when this key had already approved (duplicates count once).
    pub recorded: bool,
    pub held: u32,
    pub required: u32,
    pub status: BatchStatus,
}

/// Why an approval is not recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApprovalRefusal {
    /// The batch is not pending.
    #[error("the batch is {status:?}, not pending: only a pending batch takes approvals")]
    NotPending {
        /// Its status.
        status: BatchStatus,
    },
    /// The batch passed its end.
    #[error("the batch ended at {not_after_us} µs (now {now_us} µs): create a new batch")]
    Expired {
        /// Its end.
        not_after_us: i64,
        /// The decision time.
        now_us: i64,
    },
    /// The kid is not an approver of the current set.
    #[error("{kid} is not an approver key of the current set")]
    UnknownApprover {
        /// The kid.
        kid: Kid,
    },
    /// The signature does not verify over this batch in this trust domain.
    #[error("the signature by {kid} does not verify over this batch's id, root, size, end and trust domain: re-run batch approve against this deployment")]
    BadSignature {
        /// The kid.
        kid: Kid,
    },
}

/// Records one approval against the published set and answers the batch's approvals and
/// status after it. A key that already approved yields no events (duplicates count once); the
/// approval that reaches the requirement also yields `batch.approved`.
pub fn decide_approval(
    command: &AddApproval,
    state: &BatchApprovalState,
    set: &ApproverSet,
    trust_domain: &TrustDomain,
    now_us: i64,
) -> Result<Decision<BatchEvent, ApproveOutcome>, ApprovalRefusal> {
    if state.status != BatchStatus::Pending {
        return Err(ApprovalRefusal::NotPending {
            status: state.status,
        });
    }
    if now_us > state.not_after_us {
        return Err(ApprovalRefusal::Expired {
            not_after_us: state.not_after_us,
            now_us,
        });
    }
    let kid = command.signature.kid;
    let key = set
        .key(&kid)
        .ok_or(ApprovalRefusal::UnknownApprover { kid })?;
    let message = batch_approval_signing_input(
        &state.batch_id,
        &state.scope_root,
        state.scope_size,
        state.not_after_us,
        trust_domain,
    );
    if !key.verifies(&message, &command.signature.sig) {
        return Err(ApprovalRefusal::BadSignature { kid });
    }
    let held = u32::try_from(state.approvals.len()).unwrap_or(u32::MAX);
    if state.approvals.contains_key(&kid) {
        return Ok(Decision::unchanged(ApproveOutcome {
            recorded: false,
            held,
            required: state.required,
            status: state.status,
        }));
    }
    let batch_id = state.batch_id.as_bytes().to_vec();
    let mut events = vec![BatchEvent::ApprovalRecorded(BatchApprovalRecorded {
        batch_id: batch_id.clone(),
        signature: Some(QuorumSignature {
            kid: kid.as_bytes().to_vec(),
            sig: command.signature.sig.clone(),
        }),
    })];
    let held = held.saturating_add(1);
    let mut status = state.status;
    if held >= state.required {
        let mut approvers: Vec<Kid> = state.approvals.keys().copied().collect();
        approvers.push(kid);
        approvers.sort();
        events.push(BatchEvent::Approved(BatchApproved {
            batch_id,
            approvers: approvers.iter().map(|k| k.as_bytes().to_vec()).collect(),
        }));
        status = BatchStatus::Approved;
    }
    Ok(Decision {
        events,
        outcome: ApproveOutcome {
            recorded: true,
            held,
            required: state.required,
            status,
        },
    })
}

impl BatchApprovalState {
    /// Evolve: the state after one of the approval events of [`decide_approval`] (a recorded
    /// signature, the release); the batch's other events leave it as it is.
    pub fn evolve(&self, event: &BatchEvent) -> BatchApprovalState {
        let mut next = self.clone();
        match event {
            BatchEvent::ApprovalRecorded(recorded) => {
                let signature = recorded.signature.as_ref().and_then(|s| {
                    Some(ApprovalSignature {
                        kid: Kid::from_slice(&s.kid).ok()?,
                        sig: s.sig.clone(),
                    })
                });
                if let Some(signature) = signature {
                    next.approvals.insert(signature.kid, signature);
                }
            }
            BatchEvent::Approved(_) => next.status = BatchStatus::Approved,
            _ => {}
        }
        next
    }

    /// The approval a command carries once the batch is approved.
    pub fn to_approval(&self) -> BatchApproval {
        BatchApproval {
            batch_id: self.batch_id,
            scope_root: self.scope_root,
            scope_size: self.scope_size,
            not_after_us: self.not_after_us,
            signatures: self.approvals.values().cloned().collect(),
        }
    }
}

impl BatchApproval {
    /// Like [`BatchApproval::valid_approvers`], but stops verifying once `enough` keys are found,
    /// so an admission check with many signatures costs only the signatures it needs.
    pub fn valid_approvers_up_to(
        &self,
        set: &ApproverSet,
        trust_domain: &TrustDomain,
        enough: usize,
    ) -> Vec<Kid> {
        let message = self.signing_input(trust_domain);
        let mut valid: Vec<Kid> = Vec::with_capacity(enough);
        for signature in &self.signatures {
            if valid.len() >= enough {
                break;
            }
            if valid.contains(&signature.kid) {
                continue;
            }
            if set
                .key(&signature.kid)
                .is_some_and(|key| key.verifies(&message, &signature.sig))
            {
                valid.push(signature.kid);
            }
        }
        valid.sort();
        valid
    }
}
