//! The destructive-batch quorum: approver sets, scope trees, approvals and admission.
//!
//! Spec (`spec/003`): "Signed intent", "The destructive-batch quorum", "Changing the approver
//! set", "Pinning the first set", "Who creates batches"; issue 6. Destructive commands carry a
//! batch id inside the worker signature and run on a machine only once enough distinct approver
//! keys, pinned in the trust bundle and held off the control plane, signed the Merkle root of the
//! batch's scope; each command carries the inclusion proof of its own leaf. Everything here is pure:
//! time and state come in as arguments.
//!
//! One job per module:
//!
//! - [`signing`]: the framing of signed parts (`lp(purpose) ‖ lp(part)…`) and P-256 verification.
//! - [`trust_domain`]: the validated trust domain every signature ends with.
//! - [`approver_set`]: keys, thresholds, tiers, unbatched cap; `approverSetInput`, its digest and
//!   the approver-set signing input; validation.
//! - [`set_change`]: the one epoch rule for taking a new set, and the first-set pin.
//! - [`scope`]: scope leaves, the tree, proofs, the batch id.
//! - [`batch`]: creating a batch (limits, idempotency, required approvals).
//! - [`approval`]: the batch-approval signing input, counting approvals, recording one on the
//!   server as the batch's log events ([`batch_event`]) with what the command answers.
//! - [`creation`]: a create on the server, as the batch's log events with what it answers.
//! - [`lifecycle`]: cancelling a batch and expiring one past its end.
//! - [`review`]: the approver's review before signing (`batch approve`, on the approver's machine).
//! - [`decision`]: what a decider answers (its events and its outcome).
//! - [`admission`]: the daemon's admission check; [`admission_state`]: its persisted state;
//!   [`verified_approvals`]: its in-memory memo of verified approvals.

pub mod admission;
pub mod admission_state;
pub mod approval;
pub mod approver_set;
pub mod batch;
pub mod batch_event;
pub mod batch_subjects;
pub(crate) mod bytes32;
pub mod creation;
pub mod decision;
pub mod lifecycle;
pub mod review;
pub mod scope;
pub mod set_change;
pub mod signing;
pub mod trust_domain;
pub mod verified_approvals;

pub use admission::{
    admit, admit_cached, Admission, AdmissionClock, AdmissionRefusal, AdmissionState, AgentQuorum,
    DestructiveCommand, RejectReason, UnbatchedRuns, UsedLeaves, VerifiedApprovals,
};
pub use approval::{
    batch_approval_signing_input, decide_approval, AddApproval, ApprovalRefusal, ApprovalSignature,
    ApproveOutcome, BatchApproval, BatchApprovalState, BatchStatus,
};
pub use approver_set::{
    approver_set_signing_input, ApproverKey, ApproverSet, ApproverSetError, Kid, SetDigest,
    SetSignature, Tier,
};
pub use batch::{
    plan_create_batch, BatchCreation, BatchPlan, BatchRefusal, CreateBatch, RequestDigest,
    ScopeLeafRequest,
};
pub use batch_event::BatchEvent;
pub use batch_subjects::{check_batch_subjects, subject_node, subject_nodes};
pub use bytes32::Bytes32Error;
pub use creation::{decide_batch_creation, CreatedBatch, ExistingBatch};
pub use decision::Decision;
pub use lifecycle::{
    decide_cancel_batch, decide_expire_batch, BatchStanding, CancelBatch, CancelRefusal,
};
pub use review::{
    already_approved, review_contents, review_listed, review_scope, review_window, Expected,
    ReviewRefusal, ReviewedScope,
};
pub use scope::{
    assemble_proof, leaf_hash, node_hash, proof_rows, verify_proof, BatchId, BatchIdError,
    PayloadDigest, ProofError, ScopeError, ScopeHash, ScopeLeaf, ScopeProof, ScopeTree,
    MAX_SCOPE_LEAVES,
};
pub use set_change::{
    check_set_change, ApproverSetOffer, HeldApproverSet, SetChange, SetChangeRefusal,
};
pub use trust_domain::{TrustDomain, TrustDomainError};
