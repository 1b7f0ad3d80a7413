//! `admit_cached`: the approval signatures of a batch are verified once and the verdict reused,
//! yet every verdict equals `admit`'s. Each test warms the memo with a genuine approval first,
//! then shows that anything that differs from what was verified is checked afresh.

use crate::quorum_support;

use domain::quorum::admission::MAX_VERIFIED_APPROVALS;
use domain::quorum::{
    admit, admit_cached, Admission, AdmissionClock, AdmissionRefusal, AdmissionState, AgentQuorum,
    ApprovalSignature, ApproverSet, BatchApproval, BatchId, DestructiveCommand, PayloadDigest,
    ScopeLeaf, ScopeProof, ScopeTree, TrustDomain, VerifiedApprovals,
};
use quorum_support::{keys, set_of, td, TestKey};

const NOW: i64 = 1_700_000_000_000_000;
const HOUR: i64 = 3_600_000_000;

struct Batch {
    id: BatchId,
    tree: ScopeTree,
}

fn subject(i: usize) -> String {
    format!("node_{i}")
}

fn payload() -> PayloadDigest {
    PayloadDigest::of(b"reboot")
}

fn batch(key: &str, n: usize) -> Batch {
    let id = BatchId::derive("tenant_a", "user:ops", key).expect("id");
    let leaves: Vec<ScopeLeaf> = (0..n)
        .map(|i| ScopeLeaf::new(subject(i), "node.reboot", Some(payload())).expect("leaf"))
        .collect();
    let tree = ScopeTree::build(&id, &leaves).expect("tree");
    Batch { id, tree }
}

impl Batch {
    fn approval(&self, signers: &[&TestKey], domain: &TrustDomain) -> BatchApproval {
        let mut approval = BatchApproval {
            batch_id: self.id,
            scope_root: self.tree.root(),
            scope_size: self.tree.size(),
            not_after_us: NOW + HOUR,
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

    fn proof(&self, i: usize) -> ScopeProof {
        let leaf = ScopeLeaf::new(subject(i), "node.reboot", Some(payload())).expect("leaf");
        let index = self.tree.index_of(&leaf.hash(&self.id)).expect("in tree");
        self.tree.proof(index).expect("proof")
    }
}

struct Cmd {
    id: String,
    subject: String,
    payload: PayloadDigest,
    batch: BatchId,
    approval: BatchApproval,
    proof: ScopeProof,
}

impl Cmd {
    fn new(b: &Batch, i: usize, approval: &BatchApproval) -> Cmd {
        Cmd {
            id: format!("cmd-{i}"),
            subject: subject(i),
            payload: payload(),
            batch: b.id,
            approval: approval.clone(),
            proof: b.proof(i),
        }
    }

    fn view(&self) -> DestructiveCommand<'_> {
        DestructiveCommand {
            command_id: &self.id,
            subject: &self.subject,
            kind: "node.reboot",
            payload_sha256: &self.payload,
            batch_id: Some(&self.batch),
            approval: Some(&self.approval),
            proof: Some(&self.proof),
            bound_leaf_only: false,
        }
    }
}

fn clock(trusted_now_us: i64) -> AdmissionClock {
    AdmissionClock {
        trusted_now_us,
        local_now_us: NOW,
    }
}

fn quorum<'a>(set: &'a ApproverSet, domain: &'a TrustDomain) -> AgentQuorum<'a> {
    AgentQuorum {
        set,
        pin: None,
        trust_domain: domain,
    }
}

/// Admits with the memo and checks the verdict is `admit`'s.
fn both(
    cmd: &Cmd,
    q: &AgentQuorum<'_>,
    memo: &mut VerifiedApprovals,
    now: i64,
) -> Result<Admission, AdmissionRefusal> {
    let state = AdmissionState::default();
    let plain = admit(&cmd.view(), q, &state, clock(now));
    let cached = admit_cached(&cmd.view(), q, &state, memo, clock(now));
    assert_eq!(plain, cached, "admit_cached must agree with admit");
    cached.map(|(admission, _)| admission)
}

#[test]
fn a_batch_is_verified_once_then_each_command_checks_only_its_proof() {
    let k = keys();
    let set = set_of(&[&k[0], &k[1], &k[2]], 2, &[], 0);
    let domain = td("prod.example.org");
    let q = quorum(&set, &domain);
    let b = batch("k", 40);
    let approval = b.approval(&[&k[0], &k[1]], &domain);
    let mut memo = VerifiedApprovals::new();
    for i in 0..40 {
        let admission = both(&Cmd::new(&b, i, &approval), &q, &mut memo, NOW).expect("admitted");
        assert!(
            matches!(admission, Admission::Batched { ref approvers, .. } if approvers.len() == 2)
        );
        assert_eq!(memo.len(), 1, "one entry for the batch");
    }
    // A proof of another leaf is refused with a warm memo.
    let mut wrong = Cmd::new(&b, 3, &approval);
    wrong.proof = b.proof(4);
    assert!(matches!(
        both(&wrong, &q, &mut memo, NOW),
        Err(AdmissionRefusal::LeafNotInScope { .. })
    ));
    // Past not_after it is refused, memo or not.
    assert!(matches!(
        both(&Cmd::new(&b, 5, &approval), &q, &mut memo, NOW + HOUR + 1),
        Err(AdmissionRefusal::Expired { .. })
    ));
}

#[test]
fn an_approval_that_differs_from_the_verified_one_is_verified_afresh() {
    let k = keys();
    let set = set_of(&[&k[0], &k[1], &k[2]], 2, &[], 0);
    let domain = td("prod.example.org");
    let q = quorum(&set, &domain);
    let b = batch("k", 8);
    let approval = b.approval(&[&k[0], &k[1]], &domain);
    let mut memo = VerifiedApprovals::new();
    both(&Cmd::new(&b, 0, &approval), &q, &mut memo, NOW).expect("warm");

    // A forged signature under a verified kid.
    let mut forged = approval.clone();
    forged.signatures[1].sig = approval.signatures[0].sig.clone();
    let refusal = both(&Cmd::new(&b, 1, &forged), &q, &mut memo, NOW).expect_err("forged");
    assert!(matches!(
        refusal,
        AdmissionRefusal::TooFewApprovals { valid: 1, .. }
    ));
    // One signature dropped.
    let mut fewer = approval.clone();
    fewer.signatures.pop();
    assert!(matches!(
        both(&Cmd::new(&b, 1, &fewer), &q, &mut memo, NOW),
        Err(AdmissionRefusal::TooFewApprovals { valid: 1, .. })
    ));
    // A later end with the old signatures.
    let mut later = approval.clone();
    later.not_after_us += HOUR;
    assert!(matches!(
        both(&Cmd::new(&b, 1, &later), &q, &mut memo, NOW),
        Err(AdmissionRefusal::TooFewApprovals { valid: 0, .. })
    ));
    // The genuine approval is still admitted (the refusals did not evict it or replace it).
    both(&Cmd::new(&b, 2, &approval), &q, &mut memo, NOW).expect("genuine");
    assert_eq!(memo.len(), 1);
}

#[test]
fn another_set_or_trust_domain_is_verified_afresh() {
    let k = keys();
    let set = set_of(&[&k[0], &k[1], &k[2]], 2, &[], 0);
    let domain = td("prod.example.org");
    let b = batch("k", 8);
    let approval = b.approval(&[&k[0], &k[1]], &domain);
    let mut memo = VerifiedApprovals::new();
    both(
        &Cmd::new(&b, 0, &approval),
        &quorum(&set, &domain),
        &mut memo,
        NOW,
    )
    .expect("warm");

    // The set changed: k[1] was removed (signed change taken by the daemon).
    let smaller = set_of(&[&k[0], &k[2]], 2, &[], 0);
    assert!(matches!(
        both(
            &Cmd::new(&b, 1, &approval),
            &quorum(&smaller, &domain),
            &mut memo,
            NOW
        ),
        Err(AdmissionRefusal::TooFewApprovals { valid: 1, .. })
    ));
    // The threshold went up.
    let stricter = set_of(&[&k[0], &k[1], &k[2]], 3, &[], 0);
    assert!(matches!(
        both(
            &Cmd::new(&b, 1, &approval),
            &quorum(&stricter, &domain),
            &mut memo,
            NOW
        ),
        Err(AdmissionRefusal::TooFewApprovals {
            valid: 2,
            required: 3,
            ..
        })
    ));
    // Another trust domain.
    let staging = td("staging.example.org");
    assert!(matches!(
        both(
            &Cmd::new(&b, 1, &approval),
            &quorum(&set, &staging),
            &mut memo,
            NOW
        ),
        Err(AdmissionRefusal::TooFewApprovals { valid: 0, .. })
    ));
    both(
        &Cmd::new(&b, 1, &approval),
        &quorum(&set, &domain),
        &mut memo,
        NOW,
    )
    .expect("genuine");
}

#[test]
fn refusals_are_not_kept_and_the_memo_is_bounded() {
    let k = keys();
    let set = set_of(&[&k[0], &k[1], &k[2]], 2, &[], 0);
    let domain = td("prod.example.org");
    let q = quorum(&set, &domain);
    let mut memo = VerifiedApprovals::new();
    let b = batch("k", 4);
    let short = b.approval(&[&k[0]], &domain);
    assert!(both(&Cmd::new(&b, 0, &short), &q, &mut memo, NOW).is_err());
    assert!(
        memo.is_empty(),
        "a verdict below the requirement is not kept"
    );

    for n in 0..MAX_VERIFIED_APPROVALS + 10 {
        let b = batch(&format!("k{n}"), 2);
        let approval = b.approval(&[&k[0], &k[1]], &domain);
        both(&Cmd::new(&b, 0, &approval), &q, &mut memo, NOW).expect("admitted");
        assert!(memo.len() <= MAX_VERIFIED_APPROVALS);
    }
    assert_eq!(memo.len(), MAX_VERIFIED_APPROVALS);
    memo.clear();
    assert!(memo.is_empty());
}
