//! The command queue end to end on both backends: enqueue (signed, recorded, its refusals as the
//! shell loads them), batches (held until approved, the approval and the member's own proof
//! handed out, cancel and expiry cancelling held commands), dispatch, answers (first wins, also
//! under real concurrency on Postgres), the subject rule at batch creation, and rebuilds.

use crate::identity_support::{fixture, join_new, Fixture};
use crate::quorum_support::{approvers, config, set_of, td, Approver};

use commands::command_queue::{
    command_list, command_show, enqueue_command, pending_for_node, ready_since, record_dispatched,
    record_node_answer, CommandFilter, CommandQueueError, DispatchCause, EnqueueRequest,
    NodeAnswer, NodeAnswerOutcome, WorkerSigner,
};
use commands::quorum::{
    approve_batch, cancel_batch, create_batch, expire_due_batches, settle_trust_bundle,
    CreatedBatch, QuorumError,
};
use domain::command::enqueue::EnqueueRefusal;
use domain::command::payloads::NodeReboot;
use domain::command::{verify_command, CommandBody};
use domain::pki::{CommandSigningRoot, KeyRole, PrivateKey, TrustDomain};
use domain::quorum::{
    verify_proof, BatchId, BatchRefusal, CreateBatch, ScopeLeaf, ScopeLeafRequest,
};
use events::store::testkit::TestDb;
use events::store::{EventStore, LogStore};
use prost::Message;

const TD: &str = crate::identity_support::TD;

/// A signer under a fresh command-signing root of the fixture's trust domain, and that root.
fn signer(f: &Fixture) -> (WorkerSigner, Vec<u8>) {
    let td = TrustDomain::new(TD).unwrap();
    let root = CommandSigningRoot::generate(
        &td,
        PrivateKey::generate(KeyRole::CommandSigningRoot).unwrap(),
        commands::Clock::now(&f.clock),
        time::Duration::days(365),
    )
    .unwrap();
    let der = root.cert_der().to_vec();
    (
        WorkerSigner::new(root, td, "api-1", time::Duration::hours(24)),
        der,
    )
}

fn request(node: &str, kind: &str, payload: Vec<u8>, batch: Option<BatchId>) -> EnqueueRequest {
    EnqueueRequest {
        node_id: node.into(),
        kind: kind.into(),
        payload,
        batch_id: batch,
        caller: "alice".into(),
        lifetime_us: None,
    }
}

fn refused<T: std::fmt::Debug>(r: Result<T, CommandQueueError>) -> EnqueueRefusal {
    match r {
        Err(CommandQueueError::Refused(r)) => r,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

async fn events_of(store: &EventStore, event_type: &str) -> Vec<events::RecordedEvent> {
    crate::identity_support::all_events(store)
        .await
        .into_iter()
        .filter(|e| e.event_type == event_type)
        .collect()
}

async fn fixtures() -> Vec<Fixture> {
    let mut out = Vec::new();
    for db in TestDb::each().await.unwrap() {
        out.push(fixture(db).await);
    }
    out
}

/// Publishes a 2-of-3 quorum.
async fn publish_quorum(f: &Fixture) -> Vec<Approver> {
    let a = approvers(3);
    let set = set_of(&[&a[0], &a[1], &a[2]], 2, vec![]);
    settle_trust_bundle(&f.store, &f.clock, &config(set, 1, vec![]))
        .await
        .unwrap();
    a
}

async fn batch_over(f: &Fixture, tenant: &str, subjects: &[&str], key: &str) -> CreatedBatch {
    create_batch(
        &f.store,
        &f.clock,
        &CreateBatch {
            tenant: tenant.into(),
            caller: "alice".into(),
            idempotency_key: key.into(),
            reason: "kernel update".into(),
            leaves: subjects
                .iter()
                .map(|s| ScopeLeafRequest {
                    subject: (*s).into(),
                    kind: "node.reboot".into(),
                    payload_sha256: None,
                    payload: None,
                })
                .collect(),
            not_after_seconds: Some(3600),
        },
    )
    .await
    .unwrap()
}

async fn approve(f: &Fixture, a: &[Approver], b: &CreatedBatch) {
    for approver in &a[..2] {
        let sig = approver.sign_batch(
            &b.batch_id,
            &b.scope_root,
            b.scope_size,
            b.not_after_us,
            &td(),
        );
        approve_batch(&f.store, &f.clock, &td(), &b.batch_id, &sig)
            .await
            .unwrap();
    }
}

fn answer(id: &str, outcome: NodeAnswerOutcome) -> NodeAnswer {
    NodeAnswer {
        command_id: id.into(),
        outcome,
        detail: "done".into(),
        exit_code: Some(0),
        output_tail: vec![b'x'; 5000],
        started_at_ms: 1,
        finished_at_ms: 2,
    }
}

#[tokio::test]
async fn an_unbatched_command_is_signed_queued_dispatched_and_answered_once() {
    for f in fixtures().await {
        let (node, _) = join_new(&f, "t1").await;
        let _ = node;
        let node_id = {
            let (_, a) = join_new(&f, "t1").await;
            a.node_id
        };
        let (signer, root) = signer(&f);
        let first = enqueue_command(
            &f.store,
            &f.clock,
            &signer,
            &request(&node_id, "diag.ping", vec![], None),
        )
        .await
        .unwrap();
        assert!(first.command_id.starts_with("cmd_") && first.command_id.len() == 36);
        assert!(!first.held && !first.destructive && first.batch_id.is_none());
        assert_eq!(
            first.not_after_us,
            commands::Clock::now_us(&f.clock) + 24 * 3_600_000_000
        );
        let second = enqueue_command(
            &f.store,
            &f.clock,
            &signer,
            &request(&node_id, "inventory.refresh", vec![], None),
        )
        .await
        .unwrap();
        // One worker certificate for both.
        assert_eq!(
            events_of(&f.store, "command.worker.certified").await.len(),
            1
        );
        assert_eq!(events_of(&f.store, "command.enqueued").await.len(), 2);

        let pending = pending_for_node(&f.store, &node_id, 10).await.unwrap();
        let ids: Vec<&str> = pending.iter().map(|p| p.command_id.as_str()).collect();
        assert_eq!(ids, [first.command_id.as_str(), second.command_id.as_str()]);
        assert!(pending[0].approval.is_none() && pending[0].proof.is_none());
        assert!(!pending[0].dispatched_before);
        // The node verifies what it is handed under the root.
        let now_ms = commands::Clock::now_us(&f.clock) / 1000;
        let verified = verify_command(
            &pending[0].signed,
            std::slice::from_ref(&root),
            &TrustDomain::new(TD).unwrap(),
            &node_id,
            now_ms,
        )
        .unwrap();
        assert_eq!(verified.body.kind, "diag.ping");
        assert_eq!(verified.body.tenant_id, "t1");

        let (nodes, cursor) = ready_since(&f.store, 0, 100).await.unwrap();
        assert_eq!(nodes, vec![node_id.clone()]);
        assert!(cursor > 0);

        record_dispatched(
            &f.store,
            &f.clock,
            &node_id,
            std::slice::from_ref(&first.command_id),
            DispatchCause::Ready,
        )
        .await
        .unwrap();
        // Another node's dispatch of it records nothing.
        record_dispatched(
            &f.store,
            &f.clock,
            "someone-else",
            std::slice::from_ref(&first.command_id),
            DispatchCause::Ready,
        )
        .await
        .unwrap();
        let shown = command_show(&f.store, &first.command_id).await.unwrap();
        assert_eq!(
            (shown.status.as_str(), shown.dispatch_count),
            ("dispatched", 1)
        );
        let pending = pending_for_node(&f.store, &node_id, 10).await.unwrap();
        assert!(pending[0].dispatched_before);

        // First answer wins; a second, and another node's, record nothing.
        assert!(!record_node_answer(
            &f.store,
            &f.clock,
            "someone-else",
            &answer(&first.command_id, NodeAnswerOutcome::Failed)
        )
        .await
        .unwrap());
        assert!(record_node_answer(
            &f.store,
            &f.clock,
            &node_id,
            &answer(&first.command_id, NodeAnswerOutcome::Succeeded)
        )
        .await
        .unwrap());
        assert!(!record_node_answer(
            &f.store,
            &f.clock,
            &node_id,
            &answer(&first.command_id, NodeAnswerOutcome::Failed)
        )
        .await
        .unwrap());
        let shown = command_show(&f.store, &first.command_id).await.unwrap();
        assert_eq!(shown.status, "succeeded");
        assert_eq!(shown.exit_code, Some(0));
        assert_eq!(shown.output_tail.as_ref().map(String::len), Some(4096));
        assert_eq!(
            events_of(&f.store, "command.result.recorded").await.len(),
            1
        );

        let rejected = NodeAnswer {
            exit_code: None,
            ..answer(
                &second.command_id,
                NodeAnswerOutcome::Rejected {
                    reason: "KIND_UNSUPPORTED".into(),
                },
            )
        };
        assert!(record_node_answer(&f.store, &f.clock, &node_id, &rejected)
            .await
            .unwrap());
        let shown = command_show(&f.store, &second.command_id).await.unwrap();
        assert_eq!(
            (shown.status.as_str(), shown.reject_reason.as_deref()),
            ("rejected", Some("KIND_UNSUPPORTED"))
        );
        assert!(pending_for_node(&f.store, &node_id, 10)
            .await
            .unwrap()
            .is_empty());

        let listed = command_list(
            &f.store,
            &CommandFilter {
                node_id: Some(node_id.clone()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
        assert_eq!(listed.len(), 2);
        assert_eq!(listed[0].command_id, second.command_id, "newest first");
        let only = command_list(
            &f.store,
            &CommandFilter {
                status: Some("succeeded".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
        assert_eq!(only.len(), 1);
        assert!(matches!(
            command_show(&f.store, "cmd_nope").await,
            Err(CommandQueueError::NotFound(_))
        ));
        assert!(matches!(
            record_node_answer(
                &f.store,
                &f.clock,
                &node_id,
                &answer("cmd_nope", NodeAnswerOutcome::Succeeded)
            )
            .await,
            Err(CommandQueueError::NotFound(_))
        ));
    }
}

#[tokio::test]
async fn the_shell_refuses_with_the_loaded_facts() {
    for f in fixtures().await {
        let (_, a) = join_new(&f, "t1").await;
        let node_id = a.node_id;
        let (signer, _) = signer(&f);
        let r = refused(
            enqueue_command(
                &f.store,
                &f.clock,
                &signer,
                &request("nobody", "diag.ping", vec![], None),
            )
            .await,
        );
        assert_eq!(r.reason(), "node-not-found");
        let _ = publish_quorum(&f).await;
        let r = refused(
            enqueue_command(
                &f.store,
                &f.clock,
                &signer,
                &request(&node_id, "node.reboot", vec![], None),
            )
            .await,
        );
        assert_eq!(r.reason(), "batch-required");
        let r = refused(
            enqueue_command(
                &f.store,
                &f.clock,
                &signer,
                &request(
                    &node_id,
                    "node.reboot",
                    vec![],
                    Some(BatchId::derive("t1", "x", "y").unwrap()),
                ),
            )
            .await,
        );
        assert_eq!(r.reason(), "batch-not-found");
        f.svc.retire_node(&node_id, "decommissioned").await.unwrap();
        let r = refused(
            enqueue_command(
                &f.store,
                &f.clock,
                &signer,
                &request(&node_id, "diag.ping", vec![], None),
            )
            .await,
        );
        assert_eq!(r.reason(), "node-not-active");
        assert!(events_of(&f.store, "command.enqueued").await.is_empty());
    }
}

#[tokio::test]
async fn a_batched_command_is_held_until_approval_then_carries_the_approval_and_its_own_proof() {
    for f in fixtures().await {
        let a = publish_quorum(&f).await;
        let n1 = join_new(&f, "t1").await.1.node_id;
        let n2 = join_new(&f, "t1").await.1.node_id;
        let b = batch_over(&f, "t1", &[&n1, &n2], "k1").await;
        let (signer, _) = signer(&f);
        let payload = NodeReboot {
            reason: "kernel".into(),
            delay_seconds: 0,
        }
        .encode_to_vec();
        let c1 = enqueue_command(
            &f.store,
            &f.clock,
            &signer,
            &request(&n1, "node.reboot", payload.clone(), Some(b.batch_id)),
        )
        .await
        .unwrap();
        assert!(c1.held && c1.destructive);
        assert_eq!(c1.not_after_us, b.not_after_us);
        assert_eq!(
            command_show(&f.store, &c1.command_id).await.unwrap().status,
            "held"
        );
        assert!(pending_for_node(&f.store, &n1, 10)
            .await
            .unwrap()
            .is_empty());
        let (nodes, cursor) = ready_since(&f.store, 0, 100).await.unwrap();
        assert!(nodes.is_empty());

        // Not in scope: the batch does not name the node for disk.wipe.
        let r = refused(
            enqueue_command(
                &f.store,
                &f.clock,
                &signer,
                &request(&n1, "disk.wipe", vec![], Some(b.batch_id)),
            )
            .await,
        );
        assert_eq!(r.reason(), "not-in-scope");

        approve(&f, &a, &b).await;
        assert_eq!(
            command_show(&f.store, &c1.command_id).await.unwrap().status,
            "queued"
        );
        let (nodes, next) = ready_since(&f.store, cursor, 100).await.unwrap();
        assert_eq!(nodes, vec![n1.clone()]);
        assert!(next > cursor);
        let pending = pending_for_node(&f.store, &n1, 10).await.unwrap();
        assert_eq!(pending.len(), 1);
        let approval = pending[0].approval.clone().expect("approval");
        assert_eq!(approval.signatures.len(), 2);
        let proof = pending[0].proof.clone().expect("proof");
        let leaf = ScopeLeaf::new(n1.clone(), "node.reboot", None)
            .unwrap()
            .hash(&b.batch_id);
        verify_proof(&leaf, &proof, b.scope_size, &b.scope_root).unwrap();
        let body = CommandBody::decode(pending[0].signed.body.as_slice()).unwrap();
        assert_eq!(body.batch_id, b.batch_id.as_bytes().to_vec());
        assert_eq!(body.payload, payload);

        // Enqueued into the approved batch: queued at once.
        let c2 = enqueue_command(
            &f.store,
            &f.clock,
            &signer,
            &request(&n2, "node.reboot", vec![], Some(b.batch_id)),
        )
        .await
        .unwrap();
        assert!(!c2.held);
        assert_eq!(pending_for_node(&f.store, &n2, 10).await.unwrap().len(), 1);
    }
}

#[tokio::test]
async fn a_cancelled_or_expired_batch_cancels_its_held_commands_in_the_same_transaction() {
    for f in fixtures().await {
        let _a = publish_quorum(&f).await;
        let n1 = join_new(&f, "t1").await.1.node_id;
        let (signer, _) = signer(&f);
        let b1 = batch_over(&f, "t1", &[&n1], "k1").await;
        let b2 = batch_over(&f, "t1", &[&n1], "k2").await;
        let c1 = enqueue_command(
            &f.store,
            &f.clock,
            &signer,
            &request(&n1, "node.reboot", vec![], Some(b1.batch_id)),
        )
        .await
        .unwrap();
        let c2 = enqueue_command(
            &f.store,
            &f.clock,
            &signer,
            &request(&n1, "node.reboot", vec![], Some(b1.batch_id)),
        )
        .await
        .unwrap();
        let c3 = enqueue_command(
            &f.store,
            &f.clock,
            &signer,
            &request(&n1, "node.reboot", vec![], Some(b2.batch_id)),
        )
        .await
        .unwrap();
        cancel_batch(&f.store, &f.clock, &b1.batch_id, "wrong window", "bob")
            .await
            .unwrap();
        let cancelled = events_of(&f.store, "command.cancelled").await;
        assert_eq!(cancelled.len(), 2);
        let batch_events = events_of(&f.store, "batch.cancelled").await;
        assert_eq!(batch_events.len(), 1);
        assert!(
            cancelled.iter().all(|e| e.tx_id == batch_events[0].tx_id),
            "one transaction"
        );
        for id in [&c1.command_id, &c2.command_id] {
            assert_eq!(
                command_show(&f.store, id).await.unwrap().status,
                "cancelled"
            );
        }
        assert_eq!(
            command_show(&f.store, &c3.command_id).await.unwrap().status,
            "held"
        );

        f.clock.advance_secs(3601);
        let expired = expire_due_batches(&f.store, &f.clock, 10).await.unwrap();
        assert_eq!(expired, vec![b2.batch_id]);
        assert_eq!(
            command_show(&f.store, &c3.command_id).await.unwrap().status,
            "cancelled"
        );
        assert_eq!(events_of(&f.store, "command.cancelled").await.len(), 3);
        let r = refused(
            enqueue_command(
                &f.store,
                &f.clock,
                &signer,
                &request(&n1, "node.reboot", vec![], Some(b2.batch_id)),
            )
            .await,
        );
        assert_eq!(r.reason(), "batch-not-open");
        // A cancelled command's late answer records nothing.
        assert!(!record_node_answer(
            &f.store,
            &f.clock,
            &n1,
            &answer(&c3.command_id, NodeAnswerOutcome::Succeeded)
        )
        .await
        .unwrap());
    }
}

#[tokio::test]
async fn batch_subjects_must_be_nodes_of_the_batchs_own_tenant() {
    for f in fixtures().await {
        let n1 = join_new(&f, "t1").await.1.node_id;
        let other = join_new(&f, "t2").await.1.node_id;
        let create = |subject: String, key: &str| CreateBatch {
            tenant: "t1".into(),
            caller: "alice".into(),
            idempotency_key: key.into(),
            reason: "r".into(),
            leaves: vec![ScopeLeafRequest {
                subject,
                kind: "node.reboot".into(),
                payload_sha256: None,
                payload: None,
            }],
            not_after_seconds: None,
        };
        let refusal = |r: Result<CreatedBatch, QuorumError>| match r {
            Err(QuorumError::Refused(r)) => r,
            other => panic!("expected a refusal, got {other:?}"),
        };
        let r = refusal(create_batch(&f.store, &f.clock, &create(other.clone(), "a")).await);
        assert_eq!(r.code(), "NOT_FOUND");
        assert!(matches!(
            r,
            commands::quorum::QuorumRefusal::Batch(BatchRefusal::SubjectNotFound { index: 0, .. })
        ));
        let r =
            refusal(create_batch(&f.store, &f.clock, &create("node-unknown".into(), "b")).await);
        assert_eq!(r.code(), "NOT_FOUND");
        let r = refusal(create_batch(&f.store, &f.clock, &create("bmc:nope".into(), "c")).await);
        assert_eq!(r.code(), "INVALID_INPUT");
        assert!(matches!(
            r,
            commands::quorum::QuorumRefusal::Batch(BatchRefusal::SubjectMalformed { .. })
        ));
        assert!(events_of(&f.store, "batch.created").await.is_empty());
        create_batch(&f.store, &f.clock, &create(n1.clone(), "d"))
            .await
            .unwrap();
        create_batch(&f.store, &f.clock, &create(format!("node:{n1}"), "e"))
            .await
            .unwrap();
        assert_eq!(events_of(&f.store, "batch.created").await.len(), 2);
    }
}

#[tokio::test]
async fn concurrent_answers_record_exactly_one_on_postgres() {
    let f = fixture(TestDb::postgres().await.unwrap()).await;
    let node_id = join_new(&f, "t1").await.1.node_id;
    let (signer, _) = signer(&f);
    let c = enqueue_command(
        &f.store,
        &f.clock,
        &signer,
        &request(&node_id, "diag.ping", vec![], None),
    )
    .await
    .unwrap();
    let mut tasks = Vec::new();
    for i in 0..8 {
        let store = f.store.clone();
        let clock = f.clock.clone();
        let node = node_id.clone();
        let id = c.command_id.clone();
        tasks.push(tokio::spawn(async move {
            let outcome = if i % 2 == 0 {
                NodeAnswerOutcome::Succeeded
            } else {
                NodeAnswerOutcome::Failed
            };
            record_node_answer(&store, &clock, &node, &answer(&id, outcome))
                .await
                .unwrap()
        }));
    }
    let mut recorded = 0;
    for t in tasks {
        if t.await.unwrap() {
            recorded += 1;
        }
    }
    assert_eq!(recorded, 1);
    assert_eq!(
        events_of(&f.store, "command.result.recorded").await.len(),
        1
    );
}

#[tokio::test]
async fn the_command_tables_rebuild_byte_identically() {
    for f in fixtures().await {
        let a = publish_quorum(&f).await;
        let n1 = join_new(&f, "t1").await.1.node_id;
        let (signer, _) = signer(&f);
        let b = batch_over(&f, "t1", &[&n1], "k1").await;
        let held = enqueue_command(
            &f.store,
            &f.clock,
            &signer,
            &request(&n1, "node.reboot", vec![], Some(b.batch_id)),
        )
        .await
        .unwrap();
        let plain = enqueue_command(
            &f.store,
            &f.clock,
            &signer,
            &request(&n1, "diag.ping", vec![], None),
        )
        .await
        .unwrap();
        record_dispatched(
            &f.store,
            &f.clock,
            &n1,
            std::slice::from_ref(&plain.command_id),
            DispatchCause::Hello,
        )
        .await
        .unwrap();
        record_node_answer(
            &f.store,
            &f.clock,
            &n1,
            &answer(&plain.command_id, NodeAnswerOutcome::Failed),
        )
        .await
        .unwrap();
        approve(&f, &a, &b).await;
        let b2 = batch_over(&f, "t1", &[&n1], "k2").await;
        enqueue_command(
            &f.store,
            &f.clock,
            &signer,
            &request(&n1, "node.reboot", vec![], Some(b2.batch_id)),
        )
        .await
        .unwrap();
        cancel_batch(&f.store, &f.clock, &b2.batch_id, "no", "bob")
            .await
            .unwrap();
        let _ = held;

        let all = commands::every_projection();
        let tables: Vec<projections::TableSpec> = all
            .iter()
            .flat_map(|p| p.tables().iter().copied())
            .collect();
        let inline = projections::digest_tables(&f.store, &tables).await.unwrap();
        let mine = projections::commands::tables();
        let inline_mine = projections::digest_tables(&f.store, &mine).await.unwrap();
        projections::rebuild(&f.store, &all, None, 5, |_| {})
            .await
            .unwrap();
        assert_eq!(
            inline,
            projections::digest_tables(&f.store, &tables).await.unwrap()
        );
        assert_eq!(
            inline_mine,
            projections::digest_tables(&f.store, &mine).await.unwrap()
        );
        let _ = f.store.head_position().await.unwrap();
    }
}

#[tokio::test]
async fn concurrent_enqueues_share_one_signer_on_postgres() {
    let f = fixture(TestDb::postgres().await.unwrap()).await;
    let node_id = join_new(&f, "t1").await.1.node_id;
    let (signer, root) = signer(&f);
    let signer = std::sync::Arc::new(signer);
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (store, clock, signer, node) = (
            f.store.clone(),
            f.clock.clone(),
            signer.clone(),
            node_id.clone(),
        );
        tasks.push(tokio::spawn(async move {
            enqueue_command(
                &store,
                &clock,
                &signer,
                &request(&node, "diag.ping", vec![], None),
            )
            .await
            .unwrap()
            .command_id
        }));
    }
    let mut ids = Vec::new();
    for t in tasks {
        ids.push(t.await.unwrap());
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 8);
    let certified = events_of(&f.store, "command.worker.certified").await.len();
    assert!((1..=8).contains(&certified), "{certified} certifications");
    let pending = pending_for_node(&f.store, &node_id, 100).await.unwrap();
    assert_eq!(pending.len(), 8);
    let td = TrustDomain::new(TD).unwrap();
    let now_ms = commands::Clock::now_us(&f.clock) / 1000;
    for p in &pending {
        verify_command(
            &p.signed,
            std::slice::from_ref(&root),
            &td,
            &node_id,
            now_ms,
        )
        .unwrap();
    }
}
