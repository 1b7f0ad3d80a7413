//! Quorum commands end to end on both backends: settling the trust bundle (content versions,
//! history, floor), approver-set refusals, root rotation gates, batches, and admission with the
//! stored approval and proofs.

use crate::quorum_support as support;

use commands::quorum::{
    approve_batch, batch_view, cancel_batch, create_batch, drop_command_root, expire_due_batches,
    leaf_proof, published_bundle, report_node_trust, rotate_add_command_root, scope_page,
    settle_trust_bundle, switch_command_root, QuorumError, QuorumRefusal, SettleOutcome,
    TrustReport,
};
use commands::SimClock;
use domain::quorum::{
    admit, AdmissionClock, AdmissionRefusal, AdmissionState, AgentQuorum, ApprovalRefusal,
    ApproverSet, BatchRefusal, BatchStatus, CreateBatch, DestructiveCommand, PayloadDigest,
    ScopeLeafRequest, SetChangeRefusal, Tier,
};
use events::store::testkit::TestDb;
use events::store::EventStore;
use support::*;

fn refusal(result: Result<impl std::fmt::Debug, QuorumError>) -> QuorumRefusal {
    match result {
        Err(QuorumError::Refused(r)) => r,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

async fn stores() -> Vec<(TestDb, EventStore)> {
    let mut out = Vec::new();
    for db in TestDb::each().await.unwrap() {
        let store = db.store().await.unwrap();
        out.push((db, store));
    }
    out
}

#[tokio::test]
async fn bundle_version_follows_content_history_and_floor() {
    for (_db, store) in stores().await {
        let clock = SimClock::new();
        let a = approvers(3);
        let s1 = set_of(&[&a[0], &a[1], &a[2]], 2, vec![]);
        let c1 = config(s1.clone(), 1, vec![]);

        // First bundle, first set without signatures.
        let first = settle_trust_bundle(&store, &clock, &c1).await.unwrap();
        assert_eq!(first.version, 1);
        assert_eq!(first.outcome, SettleOutcome::Published { previous: 0 });
        // Unchanged content keeps its version.
        let again = settle_trust_bundle(&store, &clock, &c1).await.unwrap();
        assert_eq!(
            (again.version, again.outcome),
            (1, SettleOutcome::Unchanged)
        );

        // A signed change (threshold 2 of the current keys) at a higher epoch: next version.
        let s2 = set_of(&[&a[0], &a[1]], 1, vec![]);
        let sigs = vec![a[0].sign_set(&s2, 2, &td()), a[2].sign_set(&s2, 2, &td())];
        let c2 = config(s2.clone(), 2, sigs);
        let second = settle_trust_bundle(&store, &clock, &c2).await.unwrap();
        assert_eq!(second.version, 2);

        // A stale replica on the old configuration serves it at its old version and warns.
        let stale = settle_trust_bundle(&store, &clock, &c1).await.unwrap();
        assert_eq!(stale.version, 1);
        assert_eq!(stale.outcome, SettleOutcome::Stale { published: 2 });
        assert!(stale.warning.is_some());
        let published = published_bundle(&store).await.unwrap().unwrap();
        assert_eq!(published.version, 2);
        assert_eq!(published.held.set, s2);
        assert_eq!(published.held.epoch, 2);

        // The floor: the same content republished at the floor, never below it.
        let mut floored = c2.clone();
        floored.floor = 7;
        let at_floor = settle_trust_bundle(&store, &clock, &floored).await.unwrap();
        assert_eq!(at_floor.version, 7);
        let below = settle_trust_bundle(&store, &clock, &c2).await.unwrap();
        assert_eq!(
            (below.version, below.outcome),
            (7, SettleOutcome::Unchanged)
        );
        // New content after a floor takes the next version.
        let mut more_roots = c2.clone();
        more_roots.command_signing_roots.push(root(9));
        let next = settle_trust_bundle(&store, &clock, &more_roots)
            .await
            .unwrap();
        assert_eq!(next.version, 8);
        let history = published_bundle(&store).await.unwrap().unwrap().history;
        let versions: Vec<u64> = history.iter().map(|h| h.version).collect();
        assert_eq!(versions, vec![1, 2, 7, 8]);
    }
}

#[tokio::test]
async fn approver_set_changes_are_refused_per_rule() {
    for (_db, store) in stores().await {
        let clock = SimClock::new();
        let a = approvers(4);
        let s1 = set_of(&[&a[0], &a[1], &a[2]], 2, vec![]);
        settle_trust_bundle(&store, &clock, &config(s1.clone(), 3, vec![]))
            .await
            .unwrap();
        let s2 = set_of(&[&a[0], &a[1], &a[3]], 2, vec![]);

        // A stale epoch, and an equal one.
        for epoch in [2, 3] {
            let sigs = vec![
                a[0].sign_set(&s2, epoch, &td()),
                a[1].sign_set(&s2, epoch, &td()),
            ];
            let r = refusal(
                settle_trust_bundle(&store, &clock, &config(s2.clone(), epoch, sigs)).await,
            );
            assert!(
                matches!(
                    r,
                    QuorumRefusal::SetChange(SetChangeRefusal::StaleEpoch { held: 3, .. })
                ),
                "{r}"
            );
        }
        // Signed by too few current keys (one of threshold two; the new key does not count).
        let sigs = vec![a[0].sign_set(&s2, 4, &td()), a[3].sign_set(&s2, 4, &td())];
        let r = refusal(settle_trust_bundle(&store, &clock, &config(s2.clone(), 4, sigs)).await);
        assert!(
            matches!(
                r,
                QuorumRefusal::SetChange(SetChangeRefusal::Unsigned {
                    valid: 1,
                    required: 2,
                    ..
                })
            ),
            "{r}"
        );
        // Signatures for another trust domain.
        let sigs = vec![
            a[0].sign_set(&s2, 4, &staging()),
            a[1].sign_set(&s2, 4, &staging()),
        ];
        let r = refusal(settle_trust_bundle(&store, &clock, &config(s2.clone(), 4, sigs)).await);
        assert!(
            matches!(
                r,
                QuorumRefusal::SetChange(SetChangeRefusal::Unsigned { valid: 0, .. })
            ),
            "{r}"
        );
        // Nothing was published by the refusals.
        assert_eq!(published_bundle(&store).await.unwrap().unwrap().version, 1);
        // Approvers without a command-signing root are an invalid configuration.
        let mut no_root = config(s2.clone(), 4, vec![]);
        no_root.command_signing_roots.clear();
        no_root.active_root.clear();
        assert!(matches!(
            refusal(settle_trust_bundle(&store, &clock, &no_root).await),
            QuorumRefusal::InvalidConfig(_)
        ));
    }
}

#[tokio::test]
async fn a_pinned_first_set_must_match() {
    for (_db, store) in stores().await {
        let clock = SimClock::new();
        let a = approvers(3);
        let wanted = set_of(&[&a[0], &a[1]], 2, vec![]);
        let offered = set_of(&[&a[2]], 1, vec![]);
        let mut c = config(offered, 1, vec![]);
        c.pin = Some(wanted.digest());
        let r = refusal(settle_trust_bundle(&store, &clock, &c).await);
        assert!(
            matches!(
                r,
                QuorumRefusal::SetChange(SetChangeRefusal::PinMismatch { .. })
            ),
            "{r}"
        );
        assert!(published_bundle(&store).await.unwrap().is_none());
        let mut good = config(wanted.clone(), 1, vec![]);
        good.pin = Some(wanted.digest());
        assert_eq!(
            settle_trust_bundle(&store, &clock, &good)
                .await
                .unwrap()
                .version,
            1
        );
    }
}

#[tokio::test]
async fn root_rotation_runs_in_three_gated_stages() {
    for (_db, store) in stores().await {
        let clock = SimClock::new();
        let c = config(ApproverSet::none(), 0, vec![]);
        settle_trust_bundle(&store, &clock, &c).await.unwrap();
        // Out of order.
        assert!(matches!(
            refusal(switch_command_root(&store, &clock, false).await),
            QuorumRefusal::InvalidState(_)
        ));
        assert!(matches!(
            refusal(drop_command_root(&store, &clock, false).await),
            QuorumRefusal::InvalidState(_)
        ));
        let report = |node: &str, version: u64| TrustReport {
            tenant_id: "t1".into(),
            node_id: node.into(),
            trust_version: version,
            session_start: true,
            connected: true,
            approver_set_epoch: 0,
            approver_set_sha256: Vec::new(),
        };
        report_node_trust(&store, &clock, &report("node_old", 1))
            .await
            .unwrap();
        report_node_trust(&store, &clock, &report("node_new", 1))
            .await
            .unwrap();

        let added = rotate_add_command_root(&store, &clock, &root(2))
            .await
            .unwrap();
        assert_eq!(added.version, 2);
        assert!(matches!(
            refusal(rotate_add_command_root(&store, &clock, &root(3)).await),
            QuorumRefusal::InvalidState(_)
        ));
        // A stale replica on the one-root configuration does not undo the rotation.
        let stale = settle_trust_bundle(&store, &clock, &c).await.unwrap();
        assert_eq!(stale.outcome, SettleOutcome::Stale { published: 2 });

        // A status report raises node_new; node_old stays behind.
        let mut raised = report("node_new", 2);
        raised.session_start = false;
        report_node_trust(&store, &clock, &raised).await.unwrap();
        let r = refusal(switch_command_root(&store, &clock, false).await);
        match &r {
            QuorumRefusal::NodesBehind {
                behind,
                connected,
                version,
                sample,
            } => {
                assert_eq!((*behind, *connected, *version), (1, 2, 2));
                assert!(sample.contains("node_old at 1"), "{sample}");
            }
            other => panic!("{other}"),
        }
        // A node whose session ended, or not seen for 2 minutes, is not connected.
        let mut ended = report("node_old", 1);
        ended.connected = false;
        ended.session_start = false;
        report_node_trust(&store, &clock, &ended).await.unwrap();
        report_node_trust(&store, &clock, &report("node_quiet", 1))
            .await
            .unwrap();
        clock.advance_secs(121);
        report_node_trust(&store, &clock, &raised).await.unwrap();
        let switched = switch_command_root(&store, &clock, false).await.unwrap();
        assert_eq!((switched.connected, switched.behind), (1, 0));

        // Drop waits 24 hours after the switch.
        assert!(matches!(
            refusal(drop_command_root(&store, &clock, false).await),
            QuorumRefusal::InvalidState(_)
        ));
        clock.advance_secs(24 * 3600);
        let dropped = drop_command_root(&store, &clock, false).await.unwrap();
        assert_eq!(dropped.version, 3);
        let published = published_bundle(&store).await.unwrap().unwrap();
        assert_eq!(published.command_signing_roots, vec![root(2)]);
        assert_eq!(published.rotation_stage, "none");
    }
}

#[tokio::test]
async fn switch_with_force_skips_the_gate() {
    for (_db, store) in stores().await {
        let clock = SimClock::new();
        settle_trust_bundle(&store, &clock, &config(ApproverSet::none(), 0, vec![]))
            .await
            .unwrap();
        rotate_add_command_root(&store, &clock, &root(2))
            .await
            .unwrap();
        let behind = TrustReport {
            tenant_id: "t1".into(),
            node_id: "n1".into(),
            trust_version: 1,
            session_start: true,
            connected: true,
            approver_set_epoch: 0,
            approver_set_sha256: Vec::new(),
        };
        report_node_trust(&store, &clock, &behind).await.unwrap();
        assert!(switch_command_root(&store, &clock, false).await.is_err());
        let forced = switch_command_root(&store, &clock, true).await.unwrap();
        assert_eq!(forced.behind, 1);
        // --force also lets drop run early.
        assert_eq!(
            drop_command_root(&store, &clock, true)
                .await
                .unwrap()
                .version,
            3
        );
    }
}

fn leaves(n: usize, bound: bool) -> Vec<ScopeLeafRequest> {
    (0..n)
        .map(|i| ScopeLeafRequest {
            subject: format!("node-{i}"),
            kind: "node.reimage".into(),
            payload_sha256: bound.then(|| PayloadDigest::of(format!("image-{i}").as_bytes())),
            payload: None,
        })
        .collect()
}

fn request(key: &str, leaves: Vec<ScopeLeafRequest>) -> CreateBatch {
    CreateBatch {
        tenant: "t1".into(),
        caller: "alice@example.org".into(),
        idempotency_key: key.into(),
        reason: "reimage the rack".into(),
        leaves,
        not_after_seconds: None,
    }
}

#[tokio::test]
async fn batches_create_approve_expire_cancel() {
    for (_db, store) in stores().await {
        seed_nodes(&store, "t1", 8).await;
        let clock = SimClock::new();
        let a = approvers(3);
        // Tier: up to 2 leaves need 1 approval; bigger batches need the threshold, 2.
        let set = set_of(
            &[&a[0], &a[1], &a[2]],
            2,
            vec![Tier {
                max_scope_size: 2,
                threshold: 1,
            }],
        );
        settle_trust_bundle(&store, &clock, &config(set, 1, vec![]))
            .await
            .unwrap();

        let created = create_batch(&store, &clock, &request("k1", leaves(5, true)))
            .await
            .unwrap();
        assert_eq!((created.scope_size, created.required_approvals), (5, 2));
        assert_eq!(created.status, BatchStatus::Pending);
        assert!(!created.retry);
        let small = create_batch(&store, &clock, &request("k2", leaves(2, true)))
            .await
            .unwrap();
        assert_eq!(small.required_approvals, 1);
        // Idempotent retry, and the same key for another request is CONFLICT.
        let retry = create_batch(&store, &clock, &request("k1", leaves(5, true)))
            .await
            .unwrap();
        assert!(retry.retry);
        assert_eq!(retry.batch_id, created.batch_id);
        let conflict = refusal(create_batch(&store, &clock, &request("k1", leaves(4, true))).await);
        assert!(conflict.is_conflict(), "{conflict}");
        // Limits.
        let mut long = request("k3", leaves(1, true));
        long.reason = "x".repeat(501);
        assert!(matches!(
            refusal(create_batch(&store, &clock, &long).await),
            QuorumRefusal::Batch(BatchRefusal::ReasonTooLong { chars: 501 })
        ));
        for seconds in [59, 72 * 3600 + 1] {
            let mut r = request("k4", leaves(1, true));
            r.not_after_seconds = Some(seconds);
            assert!(matches!(
                refusal(create_batch(&store, &clock, &r).await),
                QuorumRefusal::Batch(BatchRefusal::NotAfterOutOfRange { .. })
            ));
        }
        assert!(matches!(
            refusal(create_batch(&store, &clock, &request("k5", vec![])).await),
            QuorumRefusal::Batch(BatchRefusal::Scope(_))
        ));

        // The stored proofs prove each leaf against the stored root.
        let page = scope_page(&store, &created.batch_id, 0, 100).await.unwrap();
        assert_eq!(page.len(), 5);
        for entry in &page {
            domain::quorum::verify_proof(&entry.leaf_hash, &entry.proof, 5, &created.scope_root)
                .unwrap();
        }

        let (id, root, size, end) = (
            created.batch_id,
            created.scope_root,
            created.scope_size,
            created.not_after_us,
        );
        // A signature for another trust domain is refused.
        let r = refusal(
            approve_batch(
                &store,
                &clock,
                &td(),
                &id,
                &a[0].sign_batch(&id, &root, size, end, &staging()),
            )
            .await,
        );
        assert!(
            matches!(
                &r,
                QuorumRefusal::NotForDeployment { kid, trust_domain }
                    if *kid == a[0].kid() && *trust_domain == td()
            ),
            "{r}"
        );
        assert_eq!(r.code(), "PERMISSION_DENIED");
        assert_eq!(
            r.to_string(),
            format!(
                "the approval by {} does not verify for trust domain {} (this deployment's) over this batch's id, root, size and end: an approval signed for another trust domain or another batch is refused; sign it with `bcctl batch approve` against this deployment",
                a[0].kid(),
                td()
            )
        );
        // Duplicates count once; the second key releases the batch.
        let s0 = a[0].sign_batch(&id, &root, size, end, &td());
        let one = approve_batch(&store, &clock, &td(), &id, &s0)
            .await
            .unwrap();
        assert!(one.recorded);
        let dup = approve_batch(&store, &clock, &td(), &id, &s0)
            .await
            .unwrap();
        assert!(!dup.recorded);
        assert_eq!((dup.held, dup.status), (1, BatchStatus::Pending));
        let two = approve_batch(
            &store,
            &clock,
            &td(),
            &id,
            &a[1].sign_batch(&id, &root, size, end, &td()),
        )
        .await
        .unwrap();
        assert_eq!((two.held, two.status), (2, BatchStatus::Approved));
        assert_eq!(
            batch_view(&store, &id).await.unwrap().unwrap().state.status,
            BatchStatus::Approved
        );

        // Expiry: an approval after the end is refused; the reconciler expires pending batches.
        clock.advance_secs(24 * 3600 + 1);
        let small_sig = a[0].sign_batch(
            &small.batch_id,
            &small.scope_root,
            small.scope_size,
            small.not_after_us,
            &td(),
        );
        let r = refusal(approve_batch(&store, &clock, &td(), &small.batch_id, &small_sig).await);
        assert!(
            matches!(r, QuorumRefusal::Approval(ApprovalRefusal::Expired { .. })),
            "{r}"
        );
        let expired = expire_due_batches(&store, &clock, 100).await.unwrap();
        assert_eq!(expired, vec![small.batch_id]);
        assert!(expire_due_batches(&store, &clock, 100)
            .await
            .unwrap()
            .is_empty());
        // Cancel: an approved batch can be cancelled, an expired one cannot.
        cancel_batch(&store, &clock, &id, "rack postponed", "alice")
            .await
            .unwrap();
        assert_eq!(
            batch_view(&store, &id).await.unwrap().unwrap().state.status,
            BatchStatus::Cancelled
        );
        assert!(matches!(
            refusal(cancel_batch(&store, &clock, &small.batch_id, "late", "alice").await),
            QuorumRefusal::InvalidState(_)
        ));
    }
}

#[tokio::test]
async fn admission_with_stored_approval_and_proofs() {
    for (_db, store) in stores().await {
        seed_nodes(&store, "t1", 8).await;
        let clock = SimClock::new();
        let a = approvers(3);
        let set = set_of(
            &[&a[0], &a[1], &a[2]],
            2,
            vec![Tier {
                max_scope_size: 1,
                threshold: 1,
            }],
        );
        settle_trust_bundle(&store, &clock, &config(set.clone(), 1, vec![]))
            .await
            .unwrap();
        let created = create_batch(&store, &clock, &request("adm", leaves(4, true)))
            .await
            .unwrap();
        let (id, root, size, end) = (
            created.batch_id,
            created.scope_root,
            created.scope_size,
            created.not_after_us,
        );
        approve_batch(
            &store,
            &clock,
            &td(),
            &id,
            &a[0].sign_batch(&id, &root, size, end, &td()),
        )
        .await
        .unwrap();
        // Too few approvals for the tier: one of two, as a pending batch's approval would carry.
        let partial = batch_view(&store, &id).await.unwrap().unwrap().approval();
        let trust_domain = td();
        let quorum = AgentQuorum {
            set: &set,
            pin: None,
            trust_domain: &trust_domain,
        };
        let digest = |i: usize| PayloadDigest::of(format!("image-{i}").as_bytes());
        let subject = |i: usize| format!("node-{i}");
        let leaf_of = |i: usize| {
            domain::quorum::leaf_hash(&id, &subject(i), "node.reimage", Some(&digest(i)))
        };
        let proof0 = leaf_proof(&store, &id, &leaf_of(0)).await.unwrap().unwrap();
        let proof1 = leaf_proof(&store, &id, &leaf_of(1)).await.unwrap().unwrap();
        let now = AdmissionClock {
            trusted_now_us: clock_now(&clock),
            local_now_us: clock_now(&clock),
        };
        let (s0, d0) = (subject(0), digest(0));
        let command =
            |cid: &'static str, subj: &'static str, d, approval, proof| DestructiveCommand {
                command_id: cid,
                subject: subj,
                kind: "node.reimage",
                payload_sha256: d,
                batch_id: Some(&id),
                approval,
                proof,
                bound_leaf_only: false,
            };
        let s0: &'static str = Box::leak(s0.into_boxed_str());
        let state = AdmissionState::default();
        let r = admit(
            &command("c0", s0, &d0, Some(&partial), Some(&proof0)),
            &quorum,
            &state,
            now,
        )
        .unwrap_err();
        assert!(
            matches!(
                r,
                AdmissionRefusal::TooFewApprovals {
                    valid: 1,
                    required: 2,
                    ..
                }
            ),
            "{r}"
        );

        approve_batch(
            &store,
            &clock,
            &td(),
            &id,
            &a[1].sign_batch(&id, &root, size, end, &td()),
        )
        .await
        .unwrap();
        let approval = batch_view(&store, &id).await.unwrap().unwrap().approval();
        // A proof for another leaf.
        let r = admit(
            &command("c0", s0, &d0, Some(&approval), Some(&proof1)),
            &quorum,
            &state,
            now,
        )
        .unwrap_err();
        assert!(matches!(r, AdmissionRefusal::LeafNotInScope { .. }), "{r}");
        // Admitted once; a second command on the same leaf is refused, a redelivery is not.
        let (_, state) = admit(
            &command("c0", s0, &d0, Some(&approval), Some(&proof0)),
            &quorum,
            &state,
            now,
        )
        .unwrap();
        let r = admit(
            &command("c0-b", s0, &d0, Some(&approval), Some(&proof0)),
            &quorum,
            &state,
            now,
        )
        .unwrap_err();
        assert!(matches!(r, AdmissionRefusal::LeafUsed { .. }), "{r}");
        admit(
            &command("c0", s0, &d0, Some(&approval), Some(&proof0)),
            &quorum,
            &state,
            now,
        )
        .unwrap();
        // An expired approval.
        let late = AdmissionClock {
            trusted_now_us: end + 1,
            local_now_us: end + 1,
        };
        let s1: &'static str = Box::leak(subject(1).into_boxed_str());
        let d1 = digest(1);
        let r = admit(
            &command("c1", s1, &d1, Some(&approval), Some(&proof1)),
            &quorum,
            &state,
            late,
        )
        .unwrap_err();
        assert!(matches!(r, AdmissionRefusal::Expired { .. }), "{r}");
        assert_eq!(size, 4);
    }
}

fn clock_now(clock: &SimClock) -> i64 {
    use commands::Clock;
    clock.now_us()
}
