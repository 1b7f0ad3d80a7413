//! The server-side batch deciders as the command layer calls them: a create's events or a
//! retry's answer (and the CONFLICT of a reused key), an approval's events with the batch's
//! approvals and status after it. The handlers run the same end to end in
//! `commands/tests/quorum_commands.rs`.

use crate::quorum_support as support;

use std::collections::BTreeMap;

use domain::quorum::{
    batch_approval_signing_input, decide_approval, decide_batch_creation, AddApproval,
    ApprovalRefusal, ApprovalSignature, ApproverSet, BatchApprovalState, BatchEvent, BatchRefusal,
    BatchStatus, CreateBatch, ExistingBatch, HeldApproverSet, PayloadDigest, RequestDigest,
    ScopeLeafRequest,
};
use support::{keys, set_of, td, TestKey};

const NOW: i64 = 1_700_000_000_000_000;

fn request(reason: &str) -> CreateBatch {
    CreateBatch {
        tenant: "t1".into(),
        caller: "ops".into(),
        idempotency_key: "k1".into(),
        reason: reason.into(),
        leaves: (0..3)
            .map(|i| ScopeLeafRequest {
                subject: format!("node-{i}"),
                kind: "node.reimage".into(),
                payload_sha256: Some(PayloadDigest::of(format!("image-{i}").as_bytes())),
                payload: None,
            })
            .collect(),
        not_after_seconds: None,
    }
}

/// The tenants of the request's subjects, as the shell loads them: all of tenant t1.
fn tenants() -> BTreeMap<String, String> {
    (0..3)
        .map(|i| (format!("node-{i}"), "t1".to_string()))
        .collect()
}

fn held(set: ApproverSet, epoch: u64) -> HeldApproverSet {
    HeldApproverSet { set, epoch }
}

#[test]
fn a_new_batch_is_created_pending_or_approved_by_its_requirement() {
    let k = keys();
    let quorum = held(set_of(&[&k[0], &k[1]], 2, &[], 0), 4);
    let pending =
        decide_batch_creation(&request("reimage"), None, &quorum, &tenants(), NOW).unwrap();
    assert_eq!(pending.outcome.status, BatchStatus::Pending);
    assert_eq!(pending.outcome.required_approvals, 2);
    assert!(!pending.outcome.retry);
    match pending.events.as_slice() {
        [BatchEvent::Created(created)] => {
            assert_eq!(created.batch_id, pending.outcome.batch_id.as_bytes());
            assert_eq!(created.approver_set_epoch, 4);
            assert_eq!(created.scope_size, 3);
            assert_eq!(created.leaves.len(), 3);
            assert_eq!(created.tenant_id, "t1");
        }
        other => panic!("unexpected events {other:?}"),
    }

    // Without approver keys a batch needs no approvals and is approved at creation.
    let open = decide_batch_creation(
        &request("reimage"),
        None,
        &HeldApproverSet::initial(),
        &tenants(),
        NOW,
    )
    .unwrap();
    assert_eq!(open.outcome.status, BatchStatus::Approved);
    assert!(matches!(
        open.events.as_slice(),
        [BatchEvent::Created(_), BatchEvent::Approved(a)] if a.approvers.is_empty()
    ));
}

#[test]
fn a_retry_answers_the_stored_batch_and_a_reused_key_is_a_conflict() {
    let quorum = HeldApproverSet::initial();
    let first = decide_batch_creation(&request("reimage"), None, &quorum, &tenants(), NOW).unwrap();
    let BatchEvent::Created(created) = &first.events[0] else {
        panic!("a created event first");
    };
    let digest = RequestDigest::from_slice(&created.request_digest).unwrap();
    let stored = BatchApprovalState {
        batch_id: first.outcome.batch_id,
        scope_root: first.outcome.scope_root,
        scope_size: first.outcome.scope_size,
        not_after_us: first.outcome.not_after_us,
        required: 0,
        status: BatchStatus::Cancelled,
        approvals: BTreeMap::new(),
    };
    let existing = ExistingBatch {
        request_digest: &digest,
        state: &stored,
    };
    // A retry (even later) writes nothing and answers the batch as stored.
    let retry = decide_batch_creation(
        &request("reimage"),
        Some(existing),
        &quorum,
        &tenants(),
        NOW + 5,
    )
    .unwrap();
    assert!(retry.events.is_empty());
    assert!(retry.outcome.retry);
    assert_eq!(retry.outcome.status, BatchStatus::Cancelled);
    assert_eq!(retry.outcome.not_after_us, first.outcome.not_after_us);
    // The same key for another request is CONFLICT.
    assert_eq!(
        decide_batch_creation(
            &request("another reason"),
            Some(existing),
            &quorum,
            &tenants(),
            NOW
        ),
        Err(BatchRefusal::Conflict {
            batch_id: first.outcome.batch_id
        })
    );
}

fn pending_state(required: u32) -> BatchApprovalState {
    let quorum = HeldApproverSet::initial();
    let created =
        decide_batch_creation(&request("reimage"), None, &quorum, &tenants(), NOW).unwrap();
    BatchApprovalState {
        batch_id: created.outcome.batch_id,
        scope_root: created.outcome.scope_root,
        scope_size: created.outcome.scope_size,
        not_after_us: created.outcome.not_after_us,
        required,
        status: BatchStatus::Pending,
        approvals: BTreeMap::new(),
    }
}

fn approval(key: &TestKey, state: &BatchApprovalState, domain: &str) -> AddApproval {
    let message = batch_approval_signing_input(
        &state.batch_id,
        &state.scope_root,
        state.scope_size,
        state.not_after_us,
        &td(domain),
    );
    AddApproval {
        signature: ApprovalSignature {
            kid: key.key.kid(),
            sig: key.sign(&message),
        },
    }
}

#[test]
fn an_approval_answers_the_batch_after_it() {
    let k = keys();
    let domain = td("prod.example.org");
    let set = set_of(&[&k[0], &k[1], &k[2]], 2, &[], 0);
    let state = pending_state(2);

    let first = decide_approval(
        &approval(&k[0], &state, "prod.example.org"),
        &state,
        &set,
        &domain,
        NOW,
    )
    .unwrap();
    assert!(first.outcome.recorded);
    assert_eq!((first.outcome.held, first.outcome.required), (1, 2));
    assert_eq!(first.outcome.status, BatchStatus::Pending);
    assert!(matches!(
        first.events.as_slice(),
        [BatchEvent::ApprovalRecorded(r)] if r.signature.as_ref().unwrap().kid == k[0].key.kid().as_bytes()
    ));

    let mut after = state.clone();
    let a0 = approval(&k[0], &state, "prod.example.org").signature;
    after.approvals.insert(a0.kid, a0);
    // A key that already approved records nothing.
    let again = decide_approval(
        &approval(&k[0], &state, "prod.example.org"),
        &after,
        &set,
        &domain,
        NOW,
    )
    .unwrap();
    assert!(again.events.is_empty());
    assert!(!again.outcome.recorded);
    assert_eq!(again.outcome.held, 1);

    // The one that reaches the requirement releases the batch.
    let second = decide_approval(
        &approval(&k[1], &state, "prod.example.org"),
        &after,
        &set,
        &domain,
        NOW,
    )
    .unwrap();
    assert_eq!(second.outcome.status, BatchStatus::Approved);
    assert_eq!(second.outcome.held, 2);
    assert!(matches!(
        second.events.as_slice(),
        [BatchEvent::ApprovalRecorded(_), BatchEvent::Approved(a)] if a.approvers.len() == 2
    ));

    // Refusals come from the approval rules, unchanged.
    assert!(matches!(
        decide_approval(
            &approval(&k[2], &state, "staging.example.org"),
            &state,
            &set,
            &domain,
            NOW
        ),
        Err(ApprovalRefusal::BadSignature { .. })
    ));
    assert!(matches!(
        decide_approval(
            &approval(&k[3], &state, "prod.example.org"),
            &state,
            &set,
            &domain,
            NOW
        ),
        Err(ApprovalRefusal::UnknownApprover { .. })
    ));
}
