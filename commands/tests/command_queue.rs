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
use commands::quorum::{approve_batch, create_batch, settle_trust_bundle, CreatedBatch};
use domain::command::enqueue::EnqueueRefusal;
use domain::command::verify_command;
use domain::pki::{CommandSigningRoot, KeyRole, PrivateKey, TrustDomain};
use domain::quorum::{BatchId, CreateBatch, ScopeLeafRequest};
use events::store::testkit::TestDb;
use events::store::EventStore;

pub(crate) const TD: &str = crate::identity_support::TD;

/// A signer under a fresh command-signing root of the fixture's trust domain, and that root.
pub(crate) fn signer(f: &Fixture) -> (WorkerSigner, Vec<u8>) {
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

pub(crate) fn request(
    node: &str,
    kind: &str,
    payload: Vec<u8>,
    batch: Option<BatchId>,
) -> EnqueueRequest {
    EnqueueRequest {
        node_id: node.into(),
        kind: kind.into(),
        payload,
        batch_id: batch,
        caller: "alice".into(),
        lifetime_us: None,
    }
}

pub(crate) fn refused<T: std::fmt::Debug>(r: Result<T, CommandQueueError>) -> EnqueueRefusal {
    match r {
        Err(CommandQueueError::Refused(r)) => r,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

pub(crate) async fn events_of(store: &EventStore, event_type: &str) -> Vec<events::RecordedEvent> {
    crate::identity_support::all_events(store)
        .await
        .into_iter()
        .filter(|e| e.event_type == event_type)
        .collect()
}

pub(crate) async fn fixtures() -> Vec<Fixture> {
    let mut out = Vec::new();
    for db in TestDb::each().await.unwrap() {
        out.push(fixture(db).await);
    }
    out
}

/// Publishes a 2-of-3 quorum.
pub(crate) async fn publish_quorum(f: &Fixture) -> Vec<Approver> {
    let a = approvers(3);
    let set = set_of(&[&a[0], &a[1], &a[2]], 2, vec![]);
    settle_trust_bundle(&f.store, &f.clock, &config(set, 1, vec![]))
        .await
        .unwrap();
    a
}

pub(crate) async fn batch_over(
    f: &Fixture,
    tenant: &str,
    subjects: &[&str],
    key: &str,
) -> CreatedBatch {
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

pub(crate) async fn approve(f: &Fixture, a: &[Approver], b: &CreatedBatch) {
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

pub(crate) fn answer(id: &str, outcome: NodeAnswerOutcome) -> NodeAnswer {
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
        assert!(!record_node_answer(
            &f.store,
            &f.clock,
            &node_id,
            &answer("cmd_nope", NodeAnswerOutcome::Succeeded)
        )
        .await
        .unwrap());
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

#[tokio::test]
async fn ready_since_advances_its_cursor_and_looks_back_for_undispatched_commands() {
    for f in fixtures().await {
        let node_id = join_new(&f, "t1").await.1.node_id;
        let (signer, _) = signer(&f);
        let mut ids = Vec::new();
        for _ in 0..3 {
            let c = enqueue_command(
                &f.store,
                &f.clock,
                &signer,
                &request(&node_id, "diag.ping", vec![], None),
            )
            .await
            .unwrap();
            ids.push(c.command_id);
        }
        let (nodes, p1) = ready_since(&f.store, 0, 1).await.unwrap();
        assert_eq!(nodes, vec![node_id.clone()]);
        let (nodes, p2) = ready_since(&f.store, p1, 1).await.unwrap();
        assert_eq!(nodes, vec![node_id.clone()]);
        assert!(p2 > p1);
        let (_, p3) = ready_since(&f.store, p2, 1).await.unwrap();
        assert!(p3 > p2);
        // Nothing new: the cursor stays, the undispatched commands behind it still wake the node.
        let (nodes, same) = ready_since(&f.store, p3, 10).await.unwrap();
        assert_eq!((nodes, same), (vec![node_id.clone()], p3));
        record_dispatched(&f.store, &f.clock, &node_id, &ids, DispatchCause::Ready)
            .await
            .unwrap();
        let (nodes, next) = ready_since(&f.store, 0, 10).await.unwrap();
        assert_eq!((nodes.len(), next), (0, 0));
        let (nodes, _) = ready_since(&f.store, p3, 10).await.unwrap();
        assert!(nodes.is_empty());
    }
}
