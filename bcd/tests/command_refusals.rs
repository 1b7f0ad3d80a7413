//! Commands on the machine, refused before anything runs: one test per refusal, each with its
//! wire reason and detail, and the hook's marker file proving nothing ran.

use crate::command_support::*;

use bcd::signed_commands::CommandRunner;
use domain::pki::{KeyRole, PrivateKey};
use prost::Message as _;
use proto::CommandRejectReason as R;

fn assert_rejected(result: &proto::CommandResult, reason: R, detail_prefix: &str) {
    assert_eq!(
        result.outcome,
        proto::CommandOutcome::Rejected as i32,
        "{result:?}"
    );
    assert_eq!(result.reject_reason, reason as i32, "{result:?}");
    assert!(
        result.detail.starts_with(detail_prefix),
        "detail {:?} should start with {detail_prefix:?}",
        result.detail
    );
}

/// A quorum of 2 of {a, b, c}, no unbatched allowance.
fn quorum_machine() -> (Machine, Vec<Approver>) {
    let approvers: Vec<Approver> = (0..3).map(|_| Approver::generate()).collect();
    let set = set_of(&approvers.iter().collect::<Vec<_>>(), 2, 0);
    (Machine::new(&set, 1), approvers)
}

fn batched(
    m: &Machine,
    b: &Batch,
    approval: proto::BatchApproval,
    proof: proto::BatchProof,
) -> proto::Command {
    let body = body(&new_id(), NODE, "node.reboot", reboot(), Some(&b.id));
    let mut c = signed(&m.worker, &body, TD);
    c.batch_approval = Some(approval);
    c.batch_proof = Some(proof);
    c
}

fn run(m: &Machine, c: &proto::Command) -> proto::CommandResult {
    m.runner().handle(c, now_ms())
}

#[test]
fn an_approved_batched_reboot_runs_its_hook_once() {
    let (m, a) = quorum_machine();
    let b = batch(&[NODE, "node_b"], "k1");
    let c = batched(
        &m,
        &b,
        b.approval(&[&a[0], &a[1]], in_an_hour_us(), TD),
        b.proof_for(NODE),
    );
    let result = run(&m, &c);
    assert_eq!(
        result.outcome,
        proto::CommandOutcome::Succeeded as i32,
        "{result:?}"
    );
    assert!(result.has_exit_code);
    assert_eq!(result.exit_code, 0);
    let output = String::from_utf8_lossy(&result.output_tail).to_string();
    assert_eq!(output, format!("ran node.reboot batch={}\n", b.id.to_hex()));
    assert_eq!(m.ran(), vec![c.command_id.clone()]);
}

#[test]
fn an_approval_by_a_key_outside_the_set_is_refused() {
    let (m, a) = quorum_machine();
    let stranger = Approver::generate();
    let b = batch(&[NODE], "k1");
    let c = batched(
        &m,
        &b,
        b.approval(&[&a[0], &stranger], in_an_hour_us(), TD),
        b.proof_for(NODE),
    );
    assert_rejected(
        &run(&m, &c),
        R::BatchUnapproved,
        "too-few-approvals: 1 valid",
    );
    assert!(m.ran().is_empty());
}

#[test]
fn an_approval_signed_for_another_trust_domain_is_refused() {
    let (m, a) = quorum_machine();
    let b = batch(&[NODE], "k1");
    let approval = b.approval(&[&a[0], &a[1]], in_an_hour_us(), "staging.example.org");
    let c = batched(&m, &b, approval, b.proof_for(NODE));
    assert_rejected(
        &run(&m, &c),
        R::BatchUnapproved,
        "too-few-approvals: 0 valid",
    );
    assert!(m.ran().is_empty());
}

#[test]
fn another_batchs_approved_root_is_refused() {
    let (m, a) = quorum_machine();
    let mine = batch(&[NODE], "k1");
    let other = batch(&[NODE, "node_b"], "k2");
    // The other batch's approval (its own id and root) does not admit this batch's command...
    let c = batched(
        &m,
        &mine,
        other.approval(&[&a[0], &a[1]], in_an_hour_us(), TD),
        mine.proof_for(NODE),
    );
    assert_rejected(&run(&m, &c), R::BatchUnapproved, "batch-mismatch: ");
    // ...nor does its root relabelled with this batch's id (the signatures no longer match, and
    // the leaf, hashed with this batch's id, is not under that root).
    let mut relabelled = other.approval(&[&a[0], &a[1]], in_an_hour_us(), TD);
    relabelled.batch_id = mine.id.as_bytes().to_vec();
    let c = batched(&m, &mine, relabelled, other.proof_for(NODE));
    assert_rejected(&run(&m, &c), R::BatchUnapproved, "leaf-not-in-scope: ");
    assert!(m.ran().is_empty());
}

#[test]
fn an_approval_past_its_not_after_is_refused() {
    let (m, a) = quorum_machine();
    let b = batch(&[NODE], "k1");
    let expired = (now_ms() - 1000) * 1000;
    let c = batched(
        &m,
        &b,
        b.approval(&[&a[0], &a[1]], expired, TD),
        b.proof_for(NODE),
    );
    assert_rejected(&run(&m, &c), R::BatchUnapproved, "approval-expired: ");
    assert!(m.ran().is_empty());
}

#[test]
fn a_proof_for_another_leaf_is_refused() {
    let (m, a) = quorum_machine();
    let b = batch(&[NODE, "node_b"], "k1");
    let c = batched(
        &m,
        &b,
        b.approval(&[&a[0], &a[1]], in_an_hour_us(), TD),
        b.proof_for("node_b"),
    );
    assert_rejected(&run(&m, &c), R::BatchUnapproved, "leaf-not-in-scope: ");
    assert!(m.ran().is_empty());
}

#[test]
fn a_used_leaf_is_refused_to_a_second_command() {
    let (m, a) = quorum_machine();
    let b = batch(&[NODE], "k1");
    let approval = b.approval(&[&a[0], &a[1]], in_an_hour_us(), TD);
    let first = batched(&m, &b, approval.clone(), b.proof_for(NODE));
    assert_eq!(
        run(&m, &first).outcome,
        proto::CommandOutcome::Succeeded as i32
    );
    let second = batched(&m, &b, approval, b.proof_for(NODE));
    assert_rejected(&run(&m, &second), R::BatchUnapproved, "leaf-used: ");
    assert_eq!(m.ran(), vec![first.command_id.clone()]);
    // The used leaf survives a restart (batch-leaves.json).
    let third = batched(
        &m,
        &b,
        b.approval(&[&a[0], &a[1]], in_an_hour_us(), TD),
        b.proof_for(NODE),
    );
    assert_rejected(
        &m.runner().handle(&third, now_ms()),
        R::BatchUnapproved,
        "leaf-used: ",
    );
}

#[test]
fn an_unbatched_destructive_command_is_refused_beyond_the_allowance() {
    let (m, _) = quorum_machine();
    let c = signed(
        &m.worker,
        &body(&new_id(), NODE, "node.reboot", reboot(), None),
        TD,
    );
    assert_rejected(
        &run(&m, &c),
        R::UnbatchedLimit,
        "unbatched-limit: 0 unbatched",
    );
    assert!(m.ran().is_empty());
}

#[test]
fn a_command_signed_by_a_non_worker_key_is_refused() {
    let (m, _) = quorum_machine();
    // The command-signing root's own certificate (a CA) as the signer, with a worker key.
    let key = PrivateKey::generate(KeyRole::Worker).unwrap();
    let as_root = Worker {
        key,
        der: m.root.cert_der().to_vec(),
    };
    let c = signed(
        &as_root,
        &body(&new_id(), NODE, "node.reboot", reboot(), None),
        TD,
    );
    assert_rejected(
        &run(&m, &c),
        R::SignatureInvalid,
        "untrusted signer: not-a-worker",
    );
    assert!(m.ran().is_empty());
}

#[test]
fn a_command_by_a_worker_of_an_untrusted_root_is_refused() {
    let (m, _) = quorum_machine();
    let foreign = worker_of(&new_root());
    let c = signed(
        &foreign,
        &body(&new_id(), NODE, "node.reboot", reboot(), None),
        TD,
    );
    assert_rejected(
        &run(&m, &c),
        R::SignatureInvalid,
        "untrusted signer: untrusted",
    );
    assert!(m.ran().is_empty());
}

#[test]
fn a_command_signed_for_another_trust_domain_or_node_is_refused() {
    let (m, _) = quorum_machine();
    let c = signed(
        &m.worker,
        &body(&new_id(), NODE, "diag.ping", ping("x"), None),
        "staging.example.org",
    );
    assert_rejected(&run(&m, &c), R::SignatureInvalid, "bad-signature: ");
    let c = signed(
        &m.worker,
        &body(&new_id(), "node_b", "diag.ping", ping("x"), None),
        TD,
    );
    assert_rejected(&run(&m, &c), R::SignatureInvalid, "wrong-node: ");
}

#[test]
fn a_wire_id_other_than_the_bodys_is_refused() {
    let (m, _) = quorum_machine();
    let mut c = signed(
        &m.worker,
        &body(&new_id(), NODE, "diag.ping", ping("x"), None),
        TD,
    );
    c.command_id = new_id();
    assert_rejected(&run(&m, &c), R::SignatureInvalid, "command-id-mismatch: ");
}

#[test]
fn an_unknown_kind_or_one_the_role_may_not_run_is_refused() {
    let (m, _) = quorum_machine();
    let mut b = body(&new_id(), NODE, "node.frobnicate", Vec::new(), None);
    b.payload_type_url = "type.googleapis.com/x.Y".into();
    assert_rejected(
        &run(&m, &signed(&m.worker, &b, TD)),
        R::KindUnsupported,
        "kind-unknown: ",
    );
    // A node-tenant certificate runs no destructive platform command.
    let mut stored = m.stored();
    stored.role = "node-tenant".into();
    m.data
        .write(bcd::files::IDENTITY_FILE, &stored.to_json())
        .unwrap();
    let c = signed(
        &m.worker,
        &body(&new_id(), NODE, "node.reboot", reboot(), None),
        TD,
    );
    assert_rejected(&run(&m, &c), R::KindUnsupported, "kind-not-allowed: ");
    assert!(m.ran().is_empty());
}

/// Issue 40 item 16: bcd runs only the kinds its certificate allows (`allowedKinds` in
/// identity.json, from the signed join or renewal answer), and a ramdisk never reboots through a
/// command (the registry agrees with discovery's default allowed kinds).
#[test]
fn a_kind_the_certificate_does_not_allow_is_refused() {
    let (m, _) = quorum_machine();
    // identity.json as a ramdisk's join wrote it (written as JSON, as a join writes it).
    let mut json: serde_json::Value = serde_json::from_slice(&m.stored().to_json()).unwrap();
    json["role"] = "ramdisk".into();
    json["allowedKinds"] = serde_json::json!(["diag.*", "logs.collect"]);
    m.data
        .write(bcd::files::IDENTITY_FILE, json.to_string().as_bytes())
        .unwrap();
    // A kind a ramdisk may run, which this certificate does not allow.
    let c = signed(
        &m.worker,
        &body(&new_id(), NODE, "inventory.refresh", Vec::new(), None),
        TD,
    );
    let result = run(&m, &c);
    assert_rejected(&result, R::KindUnsupported, "kind-not-allowed: ");
    assert_eq!(
        result.detail,
        "kind-not-allowed: this node's certificate allows only diag.*,logs.collect, not \
         inventory.refresh"
    );
    // A kind it allows runs.
    let c = signed(
        &m.worker,
        &body(&new_id(), NODE, "diag.ping", ping("x"), None),
        TD,
    );
    let result = run(&m, &c);
    assert_eq!(
        result.outcome,
        proto::CommandOutcome::Succeeded as i32,
        "{result:?}"
    );
    // A ramdisk's role runs no node.reboot, whatever its certificate lists.
    json["allowedKinds"] = serde_json::json!(["node.reboot", "diag.*"]);
    m.data
        .write(bcd::files::IDENTITY_FILE, json.to_string().as_bytes())
        .unwrap();
    let c = signed(
        &m.worker,
        &body(&new_id(), NODE, "node.reboot", reboot(), None),
        TD,
    );
    let result = run(&m, &c);
    assert_rejected(&result, R::KindUnsupported, "kind-not-allowed: ");
    assert_eq!(
        result.detail,
        "kind-not-allowed: a ramdisk may not run node.reboot"
    );
    assert!(m.ran().is_empty());
}

#[test]
fn a_payload_with_unknown_fields_is_refused() {
    let (m, _) = quorum_machine();
    let mut payload = ping("x");
    payload.extend_from_slice(&[0x50, 0x01]); // field 10, varint 1: not in DiagPing
    let c = signed(
        &m.worker,
        &body(&new_id(), NODE, "diag.ping", payload, None),
        TD,
    );
    assert_rejected(
        &run(&m, &c),
        R::SignatureInvalid,
        "payload-unknown-fields: ",
    );
}

#[test]
fn a_destructive_kind_without_a_hook_is_refused_and_uses_no_leaf() {
    let (mut m, a) = quorum_machine();
    m.settings.hooks.clear();
    let b = batch(&[NODE], "k1");
    let approval = b.approval(&[&a[0], &a[1]], in_an_hour_us(), TD);
    let c = batched(&m, &b, approval.clone(), b.proof_for(NODE));
    assert_rejected(&run(&m, &c), R::NoHook, "no-hook: node.reboot");
    assert!(
        !m.data.exists("batch-leaves.json"),
        "no leaf is used before admission"
    );
}

#[test]
fn an_unreadable_admission_state_refuses_destructive_commands() {
    let (m, a) = quorum_machine();
    m.data.write("batch-leaves.json", b"{not json").unwrap();
    let b = batch(&[NODE], "k1");
    let c = batched(
        &m,
        &b,
        b.approval(&[&a[0], &a[1]], in_an_hour_us(), TD),
        b.proof_for(NODE),
    );
    assert_rejected(
        &run(&m, &c),
        R::BatchUnapproved,
        "trust-bundle-unreadable: ",
    );
    // A non-destructive kind still runs.
    let ping_cmd = signed(
        &m.worker,
        &body(&new_id(), NODE, "diag.ping", ping("hi"), None),
        TD,
    );
    assert_eq!(
        run(&m, &ping_cmd).outcome,
        proto::CommandOutcome::Succeeded as i32
    );
    assert!(m.ran().is_empty());
}

#[test]
fn an_unreadable_held_set_refuses_destructive_commands() {
    let (m, a) = quorum_machine();
    m.data
        .write(bcd::trust::approver_set::APPROVER_SET_FILE, b"[]")
        .unwrap();
    let b = batch(&[NODE], "k1");
    let c = batched(
        &m,
        &b,
        b.approval(&[&a[0], &a[1]], in_an_hour_us(), TD),
        b.proof_for(NODE),
    );
    assert_rejected(
        &run(&m, &c),
        R::BatchUnapproved,
        "trust-bundle-unreadable: ",
    );
    let mut stored = m.stored();
    stored.trust_bundle = Some(vec![0xff, 0xff]);
    m.data
        .write(bcd::files::IDENTITY_FILE, &stored.to_json())
        .unwrap();
    std::fs::remove_file(m.data.file(bcd::trust::approver_set::APPROVER_SET_FILE)).unwrap();
    assert_rejected(
        &run(&m, &c),
        R::BatchUnapproved,
        "trust-bundle-unreadable: ",
    );
    assert!(m.ran().is_empty());
}

#[test]
fn without_a_quorum_a_destructive_command_runs_with_its_hook() {
    let m = Machine::new(&domain::quorum::ApproverSet::none(), 0);
    let c = signed(
        &m.worker,
        &body(&new_id(), NODE, "node.reboot", reboot(), None),
        TD,
    );
    let result = CommandRunner::open(m.context())
        .unwrap()
        .handle(&c, now_ms());
    assert_eq!(
        result.outcome,
        proto::CommandOutcome::Succeeded as i32,
        "{result:?}"
    );
    assert_eq!(m.ran(), vec![c.command_id.clone()]);
    let _ = proto::CommandResult::decode(result.encode_to_vec().as_slice()).unwrap();
}
