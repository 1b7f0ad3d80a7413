//! Batch creation limits, approvals, and the agent-side admission check: one test per refusal.

use crate::quorum_support;

use std::collections::BTreeMap;

use domain::quorum::admission::{UnbatchedRuns, UsedLeaves};
use domain::quorum::batch::{LeafPayload, ScopeLeafRequest};
use domain::quorum::{
    admit, decide_approval, plan_create_batch, AddApproval, Admission, AdmissionClock,
    AdmissionRefusal, AdmissionState, AgentQuorum, ApprovalRefusal, ApprovalSignature, ApproverSet,
    BatchApproval, BatchApprovalState, BatchCreation, BatchEvent, BatchId, BatchRefusal,
    BatchStatus, CreateBatch, DestructiveCommand, PayloadDigest, RejectReason, ScopeLeaf,
    ScopeProof, ScopeTree, TrustDomain,
};
use quorum_support::{keys, set_of, td, TestKey};

const NOW: i64 = 1_700_000_000_000_000;
const HOUR: i64 = 3_600_000_000;

struct Batch {
    id: BatchId,
    tree: ScopeTree,
    leaves: Vec<ScopeLeaf>,
}

fn batch(subjects: &[&str], payload: Option<PayloadDigest>) -> Batch {
    let id = BatchId::derive("tenant_a", "user:ops", "key-1").expect("id");
    let leaves: Vec<ScopeLeaf> = subjects
        .iter()
        .map(|s| ScopeLeaf::new(*s, "node.reboot", payload).expect("leaf"))
        .collect();
    let tree = ScopeTree::build(&id, &leaves).expect("tree");
    Batch { id, tree, leaves }
}

impl Batch {
    fn approval(
        &self,
        signers: &[&TestKey],
        not_after_us: i64,
        domain: &TrustDomain,
    ) -> BatchApproval {
        let mut approval = BatchApproval {
            batch_id: self.id,
            scope_root: self.tree.root(),
            scope_size: self.tree.size(),
            not_after_us,
            signatures: vec![],
        };
        let message = approval.signing_input(domain);
        approval.signatures = signers
            .iter()
            .map(|k| ApprovalSignature {
                kid: k.key.kid(),
                sig: k.sign(&message),
            })
            .collect();
        approval
    }

    fn proof_for(&self, subject: &str) -> ScopeProof {
        let leaf = self
            .leaves
            .iter()
            .find(|l| l.subject() == subject)
            .expect("subject in batch");
        let index = self
            .tree
            .index_of(&leaf.hash(&self.id))
            .expect("leaf in tree");
        self.tree.proof(index).expect("proof")
    }
}

fn clock(trusted_now_us: i64, local_now_us: i64) -> AdmissionClock {
    AdmissionClock {
        trusted_now_us,
        local_now_us,
    }
}

struct Cmd {
    id: String,
    subject: String,
    payload: PayloadDigest,
    batch: Option<BatchId>,
    approval: Option<BatchApproval>,
    proof: Option<ScopeProof>,
    bound_only: bool,
}

impl Cmd {
    fn view(&self) -> DestructiveCommand<'_> {
        DestructiveCommand {
            command_id: &self.id,
            subject: &self.subject,
            kind: "node.reboot",
            payload_sha256: &self.payload,
            batch_id: self.batch.as_ref(),
            approval: self.approval.as_ref(),
            proof: self.proof.as_ref(),
            bound_leaf_only: self.bound_only,
        }
    }
}

fn batched(id: &str, subject: &str, b: &Batch, approval: BatchApproval, proof_of: &str) -> Cmd {
    Cmd {
        id: id.into(),
        subject: subject.into(),
        payload: PayloadDigest::of(b"reboot"),
        batch: Some(b.id),
        approval: Some(approval),
        proof: Some(b.proof_for(proof_of)),
        bound_only: false,
    }
}

fn unbatched(id: &str) -> Cmd {
    Cmd {
        id: id.into(),
        subject: "node_1".into(),
        payload: PayloadDigest::of(b"reboot"),
        batch: None,
        approval: None,
        proof: None,
        bound_only: false,
    }
}

fn quorum<'a>(set: &'a ApproverSet, domain: &'a TrustDomain) -> AgentQuorum<'a> {
    AgentQuorum {
        set,
        pin: None,
        trust_domain: domain,
    }
}

// ---- admission ----

#[test]
fn quorum_admit_batched_command_with_enough_approvals() {
    let k = keys();
    let domain = td("prod.example.org");
    let set = set_of(&[&k[0], &k[1], &k[2]], 2, &[], 0);
    let b = batch(&["node_1", "node_2", "node_3"], None);
    let cmd = batched(
        "c1",
        "node_1",
        &b,
        b.approval(&[&k[0], &k[1]], NOW + HOUR, &domain),
        "node_1",
    );
    let (verdict, state) = admit(
        &cmd.view(),
        &quorum(&set, &domain),
        &AdmissionState::default(),
        clock(NOW, NOW),
    )
    .expect("admitted");
    assert!(matches!(
        verdict,
        Admission::Batched {
            redelivery: false,
            ..
        }
    ));
    assert_eq!(state.used_leaves.leaves.len(), 1);
    // A redelivery of the same command keeps its leaf.
    let (again, _) = admit(
        &cmd.view(),
        &quorum(&set, &domain),
        &state,
        clock(NOW + 1, NOW + 1),
    )
    .expect("redelivery");
    assert!(matches!(
        again,
        Admission::Batched {
            redelivery: true,
            ..
        }
    ));
}

#[test]
fn quorum_admit_refuses_proof_for_another_leaf() {
    let k = keys();
    let domain = td("prod.example.org");
    let set = set_of(&[&k[0], &k[1], &k[2]], 2, &[], 0);
    let b = batch(&["node_1", "node_2", "node_3"], None);
    // node_9 is not in the batch: it carries node_2's proof.
    let cmd = batched(
        "c1",
        "node_9",
        &b,
        b.approval(&[&k[0], &k[1]], NOW + HOUR, &domain),
        "node_2",
    );
    let err = admit(
        &cmd.view(),
        &quorum(&set, &domain),
        &AdmissionState::default(),
        clock(NOW, NOW),
    )
    .unwrap_err();
    assert!(
        matches!(err, AdmissionRefusal::LeafNotInScope { .. }),
        "{err}"
    );
    assert_eq!(err.reject_reason(), RejectReason::BatchUnapproved);
    // node_1 (in the batch) with node_2's proof is refused as well.
    let cmd = batched(
        "c2",
        "node_1",
        &b,
        b.approval(&[&k[0], &k[1]], NOW + HOUR, &domain),
        "node_2",
    );
    let err = admit(
        &cmd.view(),
        &quorum(&set, &domain),
        &AdmissionState::default(),
        clock(NOW, NOW),
    )
    .unwrap_err();
    assert_eq!(err.reason(), "leaf-not-in-scope");
}

#[test]
fn quorum_admit_refuses_leaf_used_twice() {
    let k = keys();
    let domain = td("prod.example.org");
    let set = set_of(&[&k[0], &k[1], &k[2]], 2, &[], 0);
    let b = batch(&["node_1", "node_2"], None);
    let approval = b.approval(&[&k[0], &k[1]], NOW + HOUR, &domain);
    let first = batched("c1", "node_1", &b, approval.clone(), "node_1");
    let (_, state) = admit(
        &first.view(),
        &quorum(&set, &domain),
        &AdmissionState::default(),
        clock(NOW, NOW),
    )
    .expect("first");
    let second = batched("c2", "node_1", &b, approval, "node_1");
    let err = admit(
        &second.view(),
        &quorum(&set, &domain),
        &state,
        clock(NOW + 1, NOW + 1),
    )
    .unwrap_err();
    assert!(
        matches!(&err, AdmissionRefusal::LeafUsed { used_by, .. } if used_by == "c1"),
        "{err}"
    );
    assert_eq!(err.reason(), "leaf-used");
}

#[test]
fn quorum_admit_refuses_expired_approval() {
    let k = keys();
    let domain = td("prod.example.org");
    let set = set_of(&[&k[0], &k[1], &k[2]], 2, &[], 0);
    let b = batch(&["node_1"], None);
    let cmd = batched(
        "c1",
        "node_1",
        &b,
        b.approval(&[&k[0], &k[1]], NOW, &domain),
        "node_1",
    );
    assert!(admit(
        &cmd.view(),
        &quorum(&set, &domain),
        &AdmissionState::default(),
        clock(NOW, NOW)
    )
    .is_ok());
    let err = admit(
        &cmd.view(),
        &quorum(&set, &domain),
        &AdmissionState::default(),
        clock(NOW + 1, NOW),
    )
    .unwrap_err();
    assert_eq!(
        err,
        AdmissionRefusal::Expired {
            not_after_us: NOW,
            now_us: NOW + 1
        }
    );
}

#[test]
fn quorum_admit_refuses_too_few_approvals_for_the_tier() {
    let k = keys();
    let domain = td("prod.example.org");
    // Scopes up to 2 leaves need 1 approval; larger ones need 3.
    let set = set_of(&[&k[0], &k[1], &k[2]], 3, &[(2, 1)], 0);
    let small = batch(&["node_1", "node_2"], None);
    let cmd = batched(
        "c1",
        "node_1",
        &small,
        small.approval(&[&k[0]], NOW + HOUR, &domain),
        "node_1",
    );
    assert!(admit(
        &cmd.view(),
        &quorum(&set, &domain),
        &AdmissionState::default(),
        clock(NOW, NOW)
    )
    .is_ok());
    let large = batch(&["node_1", "node_2", "node_3"], None);
    // alice twice and bob: duplicates count once, so 2 of 3.
    let cmd = batched(
        "c2",
        "node_1",
        &large,
        large.approval(&[&k[0], &k[0], &k[1]], NOW + HOUR, &domain),
        "node_1",
    );
    let err = admit(
        &cmd.view(),
        &quorum(&set, &domain),
        &AdmissionState::default(),
        clock(NOW, NOW),
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            AdmissionRefusal::TooFewApprovals {
                valid: 2,
                required: 3,
                scope_size: 3,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn quorum_admit_refuses_approval_for_another_trust_domain() {
    let k = keys();
    let set = set_of(&[&k[0], &k[1], &k[2]], 2, &[], 0);
    let b = batch(&["node_1"], None);
    let staging = td("staging.example.org");
    let prod = td("prod.example.org");
    let cmd = batched(
        "c1",
        "node_1",
        &b,
        b.approval(&[&k[0], &k[1]], NOW + HOUR, &staging),
        "node_1",
    );
    let err = admit(
        &cmd.view(),
        &quorum(&set, &prod),
        &AdmissionState::default(),
        clock(NOW, NOW),
    )
    .unwrap_err();
    assert!(
        matches!(err, AdmissionRefusal::TooFewApprovals { valid: 0, .. }),
        "{err}"
    );
}

#[test]
fn quorum_admit_refuses_signatures_by_keys_outside_the_set() {
    let k = keys();
    let domain = td("prod.example.org");
    let set = set_of(&[&k[0], &k[1]], 2, &[], 0);
    let b = batch(&["node_1"], None);
    let cmd = batched(
        "c1",
        "node_1",
        &b,
        b.approval(&[&k[0], &k[3]], NOW + HOUR, &domain),
        "node_1",
    );
    let err = admit(
        &cmd.view(),
        &quorum(&set, &domain),
        &AdmissionState::default(),
        clock(NOW, NOW),
    )
    .unwrap_err();
    assert!(
        matches!(err, AdmissionRefusal::TooFewApprovals { valid: 1, .. }),
        "{err}"
    );
}

#[test]
fn quorum_admit_refuses_missing_or_mismatched_batch_evidence() {
    let k = keys();
    let domain = td("prod.example.org");
    let set = set_of(&[&k[0]], 1, &[], 0);
    let b = batch(&["node_1"], None);
    let mut cmd = batched(
        "c1",
        "node_1",
        &b,
        b.approval(&[&k[0]], NOW + HOUR, &domain),
        "node_1",
    );
    cmd.batch = Some(BatchId([9; 32]));
    let err = admit(
        &cmd.view(),
        &quorum(&set, &domain),
        &AdmissionState::default(),
        clock(NOW, NOW),
    )
    .unwrap_err();
    assert!(
        matches!(err, AdmissionRefusal::BatchMismatch { .. }),
        "{err}"
    );
    cmd.batch = Some(b.id);
    cmd.proof = None;
    let err = admit(
        &cmd.view(),
        &quorum(&set, &domain),
        &AdmissionState::default(),
        clock(NOW, NOW),
    )
    .unwrap_err();
    assert_eq!(err, AdmissionRefusal::ProofMissing);
    cmd.approval = None;
    let err = admit(
        &cmd.view(),
        &quorum(&set, &domain),
        &AdmissionState::default(),
        clock(NOW, NOW),
    )
    .unwrap_err();
    assert_eq!(err, AdmissionRefusal::ApprovalMissing);
}

#[test]
fn quorum_admit_bound_and_unbound_leaves() {
    let k = keys();
    let domain = td("prod.example.org");
    let set = set_of(&[&k[0]], 1, &[], 0);
    // An unbound leaf admits any payload, but not a write that needs its exact payload.
    let unbound = batch(&["node_1"], None);
    let mut cmd = batched(
        "c1",
        "node_1",
        &unbound,
        unbound.approval(&[&k[0]], NOW + HOUR, &domain),
        "node_1",
    );
    assert!(admit(
        &cmd.view(),
        &quorum(&set, &domain),
        &AdmissionState::default(),
        clock(NOW, NOW)
    )
    .is_ok());
    cmd.bound_only = true;
    let err = admit(
        &cmd.view(),
        &quorum(&set, &domain),
        &AdmissionState::default(),
        clock(NOW, NOW),
    )
    .unwrap_err();
    assert!(
        matches!(err, AdmissionRefusal::BoundLeafRequired { .. }),
        "{err}"
    );
    // A bound leaf admits exactly its payload.
    let bound = batch(&["node_1"], Some(PayloadDigest::of(b"reboot")));
    let mut cmd = batched(
        "c2",
        "node_1",
        &bound,
        bound.approval(&[&k[0]], NOW + HOUR, &domain),
        "node_1",
    );
    cmd.bound_only = true;
    assert!(admit(
        &cmd.view(),
        &quorum(&set, &domain),
        &AdmissionState::default(),
        clock(NOW, NOW)
    )
    .is_ok());
    cmd.payload = PayloadDigest::of(b"wipe");
    let err = admit(
        &cmd.view(),
        &quorum(&set, &domain),
        &AdmissionState::default(),
        clock(NOW, NOW),
    )
    .unwrap_err();
    assert!(
        matches!(err, AdmissionRefusal::LeafNotInScope { .. }),
        "{err}"
    );
}

#[test]
fn quorum_admit_refuses_while_awaiting_pinned_set() {
    let domain = td("prod.example.org");
    let none = ApproverSet::none();
    let pin = domain::quorum::SetDigest([3; 32]);
    let q = AgentQuorum {
        set: &none,
        pin: Some(&pin),
        trust_domain: &domain,
    };
    let err = admit(
        &unbatched("c1").view(),
        &q,
        &AdmissionState::default(),
        clock(NOW, NOW),
    )
    .unwrap_err();
    assert_eq!(err, AdmissionRefusal::AwaitingPinnedSet { pin });
    // Without keys and without a pin, no quorum applies.
    let (verdict, _) = admit(
        &unbatched("c1").view(),
        &quorum(&none, &domain),
        &AdmissionState::default(),
        clock(NOW, NOW),
    )
    .expect("no quorum");
    assert_eq!(verdict, Admission::NoQuorum);
}

#[test]
fn quorum_admit_unbatched_cap_rolls_over_the_hour() {
    let k = keys();
    let domain = td("prod.example.org");
    let set = set_of(&[&k[0]], 1, &[], 2);
    let q = quorum(&set, &domain);
    let (_, s) = admit(
        &unbatched("c1").view(),
        &q,
        &AdmissionState::default(),
        clock(0, NOW),
    )
    .expect("first");
    let (_, s) = admit(&unbatched("c2").view(), &q, &s, clock(0, NOW + 10)).expect("second");
    // A redelivery does not count twice.
    let (again, s) =
        admit(&unbatched("c2").view(), &q, &s, clock(0, NOW + 20)).expect("redelivery");
    assert!(matches!(
        again,
        Admission::Unbatched {
            redelivery: true,
            used: 2,
            cap: 2
        }
    ));
    let err = admit(&unbatched("c3").view(), &q, &s, clock(0, NOW + HOUR - 1)).unwrap_err();
    assert_eq!(err, AdmissionRefusal::UnbatchedLimit { used: 2, cap: 2 });
    assert_eq!(err.reject_reason(), RejectReason::UnbatchedLimit);
    // Server time moving forward does not age the count out: the window is on the local clock.
    assert!(admit(
        &unbatched("c3").view(),
        &q,
        &s,
        clock(NOW + 10 * HOUR, NOW + HOUR - 1)
    )
    .is_err());
    // Once c1 is an hour old, one slot is free again.
    let (verdict, s) =
        admit(&unbatched("c3").view(), &q, &s, clock(0, NOW + HOUR)).expect("rolled");
    assert!(matches!(verdict, Admission::Unbatched { used: 2, .. }));
    assert_eq!(s.unbatched.runs.len(), 2);
}

#[test]
fn quorum_admit_unbatched_default_cap_is_zero_and_writes_never_run_unbatched() {
    let k = keys();
    let domain = td("prod.example.org");
    let set = set_of(&[&k[0]], 1, &[], 0);
    let err = admit(
        &unbatched("c1").view(),
        &quorum(&set, &domain),
        &AdmissionState::default(),
        clock(NOW, NOW),
    )
    .unwrap_err();
    assert_eq!(err, AdmissionRefusal::UnbatchedLimit { used: 0, cap: 0 });
    let generous = set_of(&[&k[0]], 1, &[], 100);
    let mut write = unbatched("c2");
    write.bound_only = true;
    let err = admit(
        &write.view(),
        &quorum(&generous, &domain),
        &AdmissionState::default(),
        clock(NOW, NOW),
    )
    .unwrap_err();
    assert!(
        matches!(err, AdmissionRefusal::UnbatchedForbidden { .. }),
        "{err}"
    );
}

#[test]
fn quorum_admission_state_files_round_trip() {
    let k = keys();
    let domain = td("prod.example.org");
    let set = set_of(&[&k[0]], 1, &[], 1);
    let b = batch(&["node_1"], None);
    let cmd = batched(
        "c1",
        "node_1",
        &b,
        b.approval(&[&k[0]], NOW + HOUR, &domain),
        "node_1",
    );
    let (_, s) = admit(
        &cmd.view(),
        &quorum(&set, &domain),
        &AdmissionState::default(),
        clock(NOW, NOW),
    )
    .expect("ok");
    let (_, s) = admit(
        &unbatched("u1").view(),
        &quorum(&set, &domain),
        &s,
        clock(NOW, NOW),
    )
    .expect("ok");
    let leaves = UsedLeaves::from_json(&s.used_leaves.to_json().expect("json")).expect("read");
    let runs = UnbatchedRuns::from_json(&s.unbatched.to_json().expect("json")).expect("read");
    assert_eq!(leaves, s.used_leaves);
    assert_eq!(runs, s.unbatched);
    assert!(UsedLeaves::from_json(b"{not json").is_err());
}

// ---- approvals on the server ----

fn pending(b: &Batch, required: u32) -> BatchApprovalState {
    BatchApprovalState {
        batch_id: b.id,
        scope_root: b.tree.root(),
        scope_size: b.tree.size(),
        not_after_us: NOW + HOUR,
        required,
        status: BatchStatus::Pending,
        approvals: BTreeMap::new(),
    }
}

fn add(b: &Batch, key: &TestKey, domain: &TrustDomain, not_after_us: i64) -> AddApproval {
    let approval = b.approval(&[key], not_after_us, domain);
    AddApproval {
        signature: approval.signatures[0].clone(),
    }
}

#[test]
fn quorum_approval_threshold_reached_approves_and_duplicates_count_once() {
    let k = keys();
    let domain = td("prod.example.org");
    let set = set_of(&[&k[0], &k[1], &k[2]], 2, &[], 0);
    let b = batch(&["node_1", "node_2"], None);
    let state = pending(&b, 2);
    let events = decide_approval(
        &add(&b, &k[0], &domain, NOW + HOUR),
        &state,
        &set,
        &domain,
        NOW,
    )
    .expect("ok")
    .events;
    assert_eq!(events.len(), 1);
    let state = events.iter().fold(state, |s, e| s.evolve(e));
    let dup = decide_approval(
        &add(&b, &k[0], &domain, NOW + HOUR),
        &state,
        &set,
        &domain,
        NOW,
    )
    .expect("dup");
    assert!(dup.events.is_empty());
    let events = decide_approval(
        &add(&b, &k[1], &domain, NOW + HOUR),
        &state,
        &set,
        &domain,
        NOW,
    )
    .expect("ok")
    .events;
    assert!(matches!(events.last(), Some(BatchEvent::Approved(a)) if a.approvers.len() == 2));
    let state = events.iter().fold(state, |s, e| s.evolve(e));
    assert_eq!(state.status, BatchStatus::Approved);
    let err = decide_approval(
        &add(&b, &k[2], &domain, NOW + HOUR),
        &state,
        &set,
        &domain,
        NOW,
    )
    .unwrap_err();
    assert_eq!(
        err,
        ApprovalRefusal::NotPending {
            status: BatchStatus::Approved
        }
    );
    // The approval the gateway attaches admits the command.
    let approval = state.to_approval();
    assert_eq!(approval.valid_approvers(&set, &domain).len(), 2);
}

#[test]
fn quorum_approval_refusals() {
    let k = keys();
    let domain = td("prod.example.org");
    let set = set_of(&[&k[0], &k[1]], 2, &[], 0);
    let b = batch(&["node_1"], None);
    let state = pending(&b, 2);
    let err = decide_approval(
        &add(&b, &k[0], &domain, NOW + HOUR),
        &state,
        &set,
        &domain,
        NOW + HOUR + 1,
    )
    .unwrap_err();
    assert!(matches!(err, ApprovalRefusal::Expired { .. }), "{err}");
    let err = decide_approval(
        &add(&b, &k[3], &domain, NOW + HOUR),
        &state,
        &set,
        &domain,
        NOW,
    )
    .unwrap_err();
    assert_eq!(
        err,
        ApprovalRefusal::UnknownApprover {
            kid: k[3].key.kid()
        }
    );
    // Signed for another expiry, or another trust domain: does not verify.
    let err = decide_approval(
        &add(&b, &k[0], &domain, NOW + 2 * HOUR),
        &state,
        &set,
        &domain,
        NOW,
    )
    .unwrap_err();
    assert!(matches!(err, ApprovalRefusal::BadSignature { .. }), "{err}");
    let err = decide_approval(
        &add(&b, &k[0], &td("staging"), NOW + HOUR),
        &state,
        &set,
        &domain,
        NOW,
    )
    .unwrap_err();
    assert!(matches!(err, ApprovalRefusal::BadSignature { .. }), "{err}");
}

// ---- batch creation ----

fn create(leaves: Vec<ScopeLeafRequest>) -> CreateBatch {
    CreateBatch {
        tenant: "tenant_a".into(),
        caller: "user:ops".into(),
        idempotency_key: "k1".into(),
        reason: "reimage rack 4".into(),
        leaves,
        not_after_seconds: None,
    }
}

fn leaf_req(subject: &str) -> ScopeLeafRequest {
    ScopeLeafRequest {
        subject: subject.into(),
        kind: "node.reboot".into(),
        payload_sha256: None,
        payload: None,
    }
}

#[test]
fn quorum_batch_create_defaults_and_idempotency() {
    let k = keys();
    let set = set_of(&[&k[0], &k[1], &k[2]], 3, &[(1, 1), (5, 2)], 0);
    let cmd = create(vec![
        leaf_req("node_1"),
        leaf_req("node_2"),
        leaf_req("node_1"),
    ]);
    let plan = match plan_create_batch(&cmd, None, &set, NOW).expect("created") {
        BatchCreation::New(plan) => plan,
        other => panic!("expected a new batch, got {other:?}"),
    };
    assert_eq!(plan.tree.size(), 2);
    assert_eq!(plan.required_approvals, 2);
    assert_eq!(plan.status, BatchStatus::Pending);
    assert_eq!(plan.not_after_us, NOW + 24 * HOUR);
    assert_eq!(
        plan_create_batch(&cmd, Some(&plan.request_digest), &set, NOW + 5),
        Ok(BatchCreation::Retry {
            batch_id: plan.batch_id
        })
    );
    let mut other = cmd.clone();
    other.reason = "something else".into();
    assert_eq!(
        plan_create_batch(&other, Some(&plan.request_digest), &set, NOW),
        Err(BatchRefusal::Conflict {
            batch_id: plan.batch_id
        })
    );
    // Without approver keys a batch is approved at creation.
    match plan_create_batch(&cmd, None, &ApproverSet::none(), NOW).expect("created") {
        BatchCreation::New(plan) => assert_eq!(plan.status, BatchStatus::Approved),
        other => panic!("{other:?}"),
    }
}

#[test]
fn quorum_batch_create_limits() {
    let set = ApproverSet::none();
    let mut cmd = create(vec![leaf_req("node_1")]);
    cmd.reason = "x".repeat(501);
    assert_eq!(
        plan_create_batch(&cmd, None, &set, NOW),
        Err(BatchRefusal::ReasonTooLong { chars: 501 })
    );
    cmd.reason = "é".repeat(500);
    assert!(plan_create_batch(&cmd, None, &set, NOW).is_ok());
    cmd.reason = String::new();
    assert_eq!(
        plan_create_batch(&cmd, None, &set, NOW),
        Err(BatchRefusal::ReasonEmpty)
    );
    cmd.reason = "ok".into();
    for (seconds, ok) in [
        (59, false),
        (60, true),
        (72 * 3600, true),
        (72 * 3600 + 1, false),
    ] {
        cmd.not_after_seconds = Some(seconds);
        assert_eq!(
            plan_create_batch(&cmd, None, &set, NOW).is_ok(),
            ok,
            "{seconds}"
        );
    }
    cmd.not_after_seconds = None;
    cmd.leaves = vec![];
    assert!(matches!(
        plan_create_batch(&cmd, None, &set, NOW),
        Err(BatchRefusal::Scope(_))
    ));
    cmd.leaves = (0..50_001)
        .map(|i| leaf_req(&format!("node_{i}")))
        .collect();
    assert!(matches!(
        plan_create_batch(&cmd, None, &set, NOW),
        Err(BatchRefusal::Scope(_))
    ));
}

#[test]
fn quorum_batch_create_payloads() {
    let set = ApproverSet::none();
    let payload = LeafPayload {
        type_url: "type.googleapis.com/bc.command.v1.NodeReboot".into(),
        value: b"reboot".to_vec(),
    };
    let mut leaf = leaf_req("node_1");
    leaf.payload = Some(payload.clone());
    let plan = match plan_create_batch(&create(vec![leaf.clone()]), None, &set, NOW).expect("ok") {
        BatchCreation::New(plan) => plan,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        plan.leaves[0].leaf.payload_sha256(),
        Some(&PayloadDigest::of(b"reboot"))
    );
    leaf.payload_sha256 = Some(PayloadDigest::of(b"other"));
    assert_eq!(
        plan_create_batch(&create(vec![leaf.clone()]), None, &set, NOW),
        Err(BatchRefusal::PayloadDigestMismatch { index: 0 })
    );
    leaf.payload_sha256 = None;
    leaf.payload = Some(LeafPayload {
        type_url: "example.com/Harmless".into(),
        value: vec![],
    });
    assert!(matches!(
        plan_create_batch(&create(vec![leaf.clone()]), None, &set, NOW),
        Err(BatchRefusal::PayloadTypeUrl { index: 0, .. })
    ));
    // A registered kind's payload labelled with another type: refused by the server, not only
    // by the approver's review (spec 003, the registry's payload type).
    leaf.payload = Some(LeafPayload {
        type_url: "type.googleapis.com/bc.command.v1.DiskWipe".into(),
        value: vec![],
    });
    let refused = plan_create_batch(&create(vec![leaf.clone()]), None, &set, NOW).unwrap_err();
    assert_eq!(
        refused.to_string(),
        "scope leaf 0: payload typeUrl \"type.googleapis.com/bc.command.v1.DiskWipe\" is not the \
         payload type of node.reboot; node.reboot payloads are \
         type.googleapis.com/bc.command.v1.NodeReboot"
    );
    // A kind outside the registry keeps the prefix rule only.
    let mut custom = leaf_req("node_1");
    custom.kind = "acme.flash".into();
    custom.payload = Some(LeafPayload {
        type_url: "type.googleapis.com/acme.v1.Flash".into(),
        value: vec![1, 2, 3],
    });
    assert!(plan_create_batch(&create(vec![custom]), None, &set, NOW).is_ok());
    leaf.payload = Some(LeafPayload {
        type_url: payload.type_url.clone(),
        value: vec![0; 64 * 1024 + 1],
    });
    assert!(matches!(
        plan_create_batch(&create(vec![leaf]), None, &set, NOW),
        Err(BatchRefusal::PayloadTooLarge { index: 0, .. })
    ));
    let big: Vec<ScopeLeafRequest> = (0..129)
        .map(|i| {
            let mut l = leaf_req(&format!("node_{i}"));
            l.payload = Some(LeafPayload {
                type_url: payload.type_url.clone(),
                value: vec![0; 64 * 1024],
            });
            l
        })
        .collect();
    assert!(matches!(
        plan_create_batch(&create(big), None, &set, NOW),
        Err(BatchRefusal::BatchPayloadTooLarge { .. })
    ));
}
