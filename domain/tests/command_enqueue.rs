//! The queue's decision (`domain::command::enqueue`): one test per refusal reason, and the plan
//! (held, the leaf used, destructive, the body's lifetime).

use domain::command::enqueue::{
    pattern_allows, plan_enqueue, BatchFacts, EnqueueCommand, EnqueueRefusal, EnqueueState,
    NodeFacts, StoredLeaf, MAX_LIFETIME_US, UNBATCHED_LIFETIME_US,
};
use domain::command::payloads::NodeReboot;
use domain::quorum::{BatchId, BatchStatus, PayloadDigest, ScopeLeaf};
use prost::Message;

const NOW: i64 = 1_790_000_000_000_000;
const NODE: &str = "node-a";

fn batch_id() -> BatchId {
    BatchId::derive("t1", "alice", "key-1").unwrap()
}

fn node() -> NodeFacts {
    NodeFacts {
        tenant_id: "t1".into(),
        role: "node".into(),
        status: "active".into(),
        has_live_certificate: true,
        allowed_kinds: vec![],
    }
}

fn leaf(digest: Option<PayloadDigest>, kind: &str) -> StoredLeaf {
    StoredLeaf {
        payload_sha256: digest,
        leaf_hash: ScopeLeaf::new(NODE, kind, digest)
            .unwrap()
            .hash(&batch_id()),
    }
}

fn batch(status: BatchStatus, leaves: Vec<StoredLeaf>) -> BatchFacts {
    BatchFacts {
        tenant_id: "t1".into(),
        status,
        not_after_us: NOW + 3_600_000_000,
        required_approvals: 2,
        leaves,
    }
}

fn state(batch: Option<BatchFacts>) -> EnqueueState {
    EnqueueState {
        node: Some(node()),
        batch,
        approver_keys_published: true,
        unbatched_per_hour: 0,
        now_us: NOW,
    }
}

fn cmd(kind: &str, payload: Vec<u8>, batched: bool) -> EnqueueCommand {
    EnqueueCommand {
        node_id: NODE.into(),
        kind: kind.into(),
        payload,
        batch_id: batched.then(batch_id),
        lifetime_us: None,
    }
}

fn reboot() -> Vec<u8> {
    NodeReboot {
        reason: "kernel".into(),
        delay_seconds: 5,
    }
    .encode_to_vec()
}

fn refusal(c: &EnqueueCommand, s: &EnqueueState) -> EnqueueRefusal {
    plan_enqueue(c, s).expect_err("refused")
}

#[test]
fn an_unbatched_diag_command_is_queued_for_24_hours() {
    let plan = plan_enqueue(&cmd("diag.ping", vec![], false), &state(None)).unwrap();
    assert!(!plan.held && !plan.destructive && plan.leaf_hash.is_none());
    assert_eq!(plan.not_after_us, NOW + UNBATCHED_LIFETIME_US);
    assert_eq!(
        plan.payload_type_url,
        "type.googleapis.com/bc.command.v1.DiagPing"
    );
    assert_eq!(plan.tenant_id, "t1");
}

#[test]
fn a_batched_command_is_held_on_a_pending_batch_and_uses_the_bound_leaf_first() {
    let p = reboot();
    let d = PayloadDigest::of(&p);
    let both = vec![leaf(None, "node.reboot"), leaf(Some(d), "node.reboot")];
    let plan = plan_enqueue(
        &cmd("node.reboot", p.clone(), true),
        &state(Some(batch(BatchStatus::Pending, both.clone()))),
    )
    .unwrap();
    assert!(plan.held && plan.destructive);
    assert_eq!(plan.leaf_hash, Some(both[1].leaf_hash));
    assert_eq!(plan.not_after_us, NOW + 3_600_000_000);
    // Another payload falls back to the unbound leaf; an approved batch does not hold.
    let other = NodeReboot::default().encode_to_vec();
    let plan = plan_enqueue(
        &cmd("node.reboot", other, true),
        &state(Some(batch(BatchStatus::Approved, both.clone()))),
    )
    .unwrap();
    assert!(!plan.held);
    assert_eq!(plan.leaf_hash, Some(both[0].leaf_hash));
    // A batch that needs no approvals (no keys) does not hold either.
    let mut free = batch(BatchStatus::Pending, both);
    free.required_approvals = 0;
    assert!(
        !plan_enqueue(&cmd("node.reboot", p, true), &state(Some(free)))
            .unwrap()
            .held
    );
}

#[test]
fn a_batched_command_never_outlives_72_hours_or_its_asked_lifetime() {
    let mut long = batch(BatchStatus::Approved, vec![leaf(None, "node.reboot")]);
    long.not_after_us = NOW + 2 * MAX_LIFETIME_US;
    let plan = plan_enqueue(
        &cmd("node.reboot", vec![], true),
        &state(Some(long.clone())),
    )
    .unwrap();
    assert_eq!(plan.not_after_us, NOW + MAX_LIFETIME_US);
    let mut c = cmd("node.reboot", vec![], true);
    c.lifetime_us = Some(60_000_000);
    assert_eq!(
        plan_enqueue(&c, &state(Some(long))).unwrap().not_after_us,
        NOW + 60_000_000
    );
}

#[test]
fn unknown_kind() {
    let r = refusal(&cmd("node.rebooot", vec![], false), &state(None));
    assert_eq!(r.reason(), "unknown-kind");
    assert_eq!(r.code(), "INVALID_INPUT");
}

#[test]
fn node_not_found() {
    let mut s = state(None);
    s.node = None;
    let r = refusal(&cmd("diag.ping", vec![], false), &s);
    assert_eq!(r.reason(), "node-not-found");
    assert_eq!(r.code(), "NOT_FOUND");
}

#[test]
fn node_not_active() {
    let mut s = state(None);
    s.node.as_mut().unwrap().status = "retired".into();
    let r = refusal(&cmd("diag.ping", vec![], false), &s);
    assert_eq!(r.reason(), "node-not-active");
    assert!(r.to_string().contains("is retired"), "{r}");
}

#[test]
fn node_revoked() {
    let mut s = state(None);
    s.node.as_mut().unwrap().has_live_certificate = false;
    assert_eq!(
        refusal(&cmd("diag.ping", vec![], false), &s).reason(),
        "node-revoked"
    );
}

#[test]
fn role_not_allowed() {
    let mut s = state(None);
    s.node.as_mut().unwrap().role = "node-tenant".into();
    let r = refusal(&cmd("node.reboot", vec![], false), &s);
    assert_eq!(r.reason(), "role-not-allowed");
    assert_eq!(r.code(), "PERMISSION_DENIED");
    // A site agent may reboot but not wipe.
    s.node.as_mut().unwrap().role = "site".into();
    s.approver_keys_published = false;
    assert!(plan_enqueue(&cmd("node.reboot", vec![], false), &s).is_ok());
    assert_eq!(
        refusal(&cmd("disk.wipe", vec![], false), &s).reason(),
        "role-not-allowed"
    );
}

#[test]
fn kind_not_allowed_by_a_ramdisk_certificate() {
    let mut s = state(None);
    let n = s.node.as_mut().unwrap();
    n.role = "ramdisk".into();
    n.allowed_kinds = vec!["diag.*".into(), "inventory.refresh".into()];
    assert!(plan_enqueue(&cmd("diag.ping", vec![], false), &s).is_ok());
    assert!(plan_enqueue(&cmd("inventory.refresh", vec![], false), &s).is_ok());
    let r = refusal(&cmd("logs.collect", vec![], false), &s);
    assert_eq!(r.reason(), "kind-not-allowed");
    assert!(r.to_string().contains("diag.*,inventory.refresh"), "{r}");
    assert!(pattern_allows("diag.*", "diag.ping"));
    assert!(!pattern_allows("diag.*", "diag"));
    assert!(!pattern_allows("diag.*", "diagx.ping"));
    assert!(!pattern_allows("wipe", "disk.wipe"));
}

#[test]
fn payload_too_large() {
    let r = refusal(&cmd("diag.ping", vec![0; 65537], false), &state(None));
    assert_eq!(r.reason(), "payload-too-large");
}

#[test]
fn payload_invalid() {
    let r = refusal(
        &cmd("diag.ping", vec![0xff, 0xff, 0xff], false),
        &state(None),
    );
    assert_eq!(r.reason(), "payload-invalid");
    assert_eq!(r.code(), "INVALID_INPUT");
}

#[test]
fn lifetime_out_of_range() {
    let mut c = cmd("diag.ping", vec![], false);
    c.lifetime_us = Some(MAX_LIFETIME_US + 1);
    assert_eq!(refusal(&c, &state(None)).reason(), "lifetime-out-of-range");
    c.lifetime_us = Some(0);
    assert_eq!(refusal(&c, &state(None)).reason(), "lifetime-out-of-range");
}

#[test]
fn batch_required_names_the_batch_commands_and_the_allowance() {
    let r = refusal(&cmd("node.reboot", reboot(), false), &state(None));
    assert_eq!(r.reason(), "batch-required");
    let text = r.to_string();
    assert!(text.contains("bcctl batch create"), "{text}");
    assert!(text.contains("[quorum] unbatched_per_hour"), "{text}");
    // The break-glass allowance or no keys at all let it through, unbatched.
    let mut s = state(None);
    s.unbatched_per_hour = 1;
    assert!(plan_enqueue(&cmd("node.reboot", reboot(), false), &s).is_ok());
    let mut s = state(None);
    s.approver_keys_published = false;
    assert!(plan_enqueue(&cmd("node.reboot", reboot(), false), &s).is_ok());
}

#[test]
fn batch_not_found_or_of_another_tenant() {
    let r = refusal(&cmd("node.reboot", vec![], true), &state(None));
    assert_eq!((r.reason(), r.code()), ("batch-not-found", "NOT_FOUND"));
    let mut other = batch(BatchStatus::Approved, vec![leaf(None, "node.reboot")]);
    other.tenant_id = "t2".into();
    let r = refusal(&cmd("node.reboot", vec![], true), &state(Some(other)));
    assert_eq!((r.reason(), r.code()), ("batch-not-found", "NOT_FOUND"));
}

#[test]
fn batch_not_open() {
    for status in [BatchStatus::Expired, BatchStatus::Cancelled] {
        let b = batch(status, vec![leaf(None, "node.reboot")]);
        let r = refusal(&cmd("node.reboot", vec![], true), &state(Some(b)));
        assert_eq!(r.reason(), "batch-not-open");
        assert!(r.to_string().contains(status.as_str()), "{r}");
    }
}

#[test]
fn batch_expired() {
    let mut b = batch(BatchStatus::Pending, vec![leaf(None, "node.reboot")]);
    b.not_after_us = NOW;
    let r = refusal(&cmd("node.reboot", vec![], true), &state(Some(b)));
    assert_eq!(r.reason(), "batch-expired");
}

#[test]
fn not_in_scope() {
    // Only another kind's leaf for this node.
    let b = batch(BatchStatus::Approved, vec![]);
    let r = refusal(&cmd("node.reboot", vec![], true), &state(Some(b)));
    assert_eq!((r.reason(), r.code()), ("not-in-scope", "INVALID_INPUT"));
    // A stored leaf whose hash is not this (subject, kind)'s is not used.
    let b = batch(BatchStatus::Approved, vec![leaf(None, "disk.wipe")]);
    assert_eq!(
        refusal(&cmd("node.reboot", vec![], true), &state(Some(b))).reason(),
        "not-in-scope"
    );
}

#[test]
fn payload_not_in_scope() {
    let d = PayloadDigest::of(&reboot());
    let b = batch(BatchStatus::Approved, vec![leaf(Some(d), "node.reboot")]);
    let other = NodeReboot::default().encode_to_vec();
    let r = refusal(&cmd("node.reboot", other, true), &state(Some(b)));
    assert_eq!(
        (r.reason(), r.code()),
        ("payload-not-in-scope", "INVALID_INPUT")
    );
}
