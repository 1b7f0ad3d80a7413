//! The command queue's batches on both backends: a batched command held until its batch is
//! approved, then handed out with the approval and its own leaf's proof; cancel and expiry
//! cancelling held commands in the batch's transaction; the subject rule at batch creation; and
//! a rebuild of every projection giving the same tables.

use crate::command_queue::{
    answer, approve, batch_over, events_of, fixtures, publish_quorum, refused, request, signer,
};
use crate::identity_support::join_new;

use commands::command_queue::{
    command_show, enqueue_command, pending_for_node, ready_since, record_dispatched,
    record_node_answer, DispatchCause, NodeAnswerOutcome,
};
use commands::quorum::{cancel_batch, create_batch, expire_due_batches, CreatedBatch, QuorumError};
use domain::command::payloads::NodeReboot;
use domain::command::CommandBody;
use domain::quorum::{verify_proof, BatchRefusal, CreateBatch, ScopeLeaf, ScopeLeafRequest};
use prost::Message;
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
    }
}
