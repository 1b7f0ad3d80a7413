//! Issue 45 item 6: a tenant's life cycle through `TenantAdmin` on both backends (each refusal
//! by its exact text; a deletion retires, revokes and cancels in one transaction), and on
//! Postgres a deletion racing token creations and another deletion of the same tenant.

use crate::identity_support::*;
use crate::quorum_support::{approvers, config, seed_nodes, set_of};

use std::sync::Arc;

use commands::identity::{IdentityError, NewToken};
use commands::quorum::{batch_view, cancel_batch, create_batch, settle_trust_bundle};
use commands::tenants::{TenantAdmin, TenantError};
use domain::quorum::{BatchStatus, CreateBatch, ScopeLeafRequest};
use events::store::testkit::TestDb;
use events::store::EventStore;

fn admin(f: &Fixture) -> TenantAdmin {
    TenantAdmin::new(f.store.clone(), Arc::new(f.clock.clone()))
}

fn refusal<T: std::fmt::Debug>(r: Result<T, TenantError>) -> String {
    match r {
        Err(TenantError::Refused(r)) => r.to_string(),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn count(events: &[events::RecordedEvent], event_type: &str) -> usize {
    events.iter().filter(|e| e.event_type == event_type).count()
}

#[tokio::test]
async fn active_nodes_refuse_a_deletion_and_retire_nodes_retires_them_and_revokes_the_tokens() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let tenants = admin(&f);
        join_new(&f, "acme").await;
        join_new(&f, "acme").await;
        let spare = f.svc.create_token(&token_spec("acme")).await.unwrap();
        join_new(&f, "other").await;
        assert_eq!(
            refusal(tenants.delete("acme", "customer left", false).await),
            format!(
                "INVALID_STATE: tenant acme has 2 active node(s) ({}): retire them first, or \
                 delete with --retire-nodes",
                f.svc
                    .list_nodes(Some("acme"))
                    .await
                    .unwrap()
                    .iter()
                    .map(|n| n.node_id.clone())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        );
        let before = all_events(&f.store).await.len();
        let done = tenants.delete("acme", "customer left", true).await.unwrap();
        assert_eq!(done.retired_nodes.len(), 2);
        // The two joined nodes' tokens (5 uses each, 4 left) and the spare one.
        assert_eq!(done.revoked_tokens.len(), 3);
        assert!(done.revoked_tokens.contains(&spare.token.token_id));
        assert_eq!(done.tenant.status, "deleted");
        assert_eq!(
            (
                done.tenant.active_nodes,
                done.tenant.live_tokens,
                done.tenant.retired_nodes
            ),
            (0, 0, 2)
        );
        let after = all_events(&f.store).await;
        let new = &after[before..];
        assert_eq!(new.len(), 1 + 2 + 3);
        assert_eq!(
            (
                count(new, "tenant.deleted"),
                count(new, "node.retired"),
                count(new, "token.revoked")
            ),
            (1, 2, 3)
        );
        // One transaction: one commit, every event of it in the same tx.
        assert!(new.iter().all(|e| e.tenant_id == "acme"));
        let nodes = f.svc.list_nodes(Some("acme")).await.unwrap();
        assert!(nodes.iter().all(|n| n.status == "retired"), "{nodes:?}");
        // The other tenant is untouched.
        let other = f.svc.list_nodes(Some("other")).await.unwrap();
        assert_eq!(other[0].status, "active");
        // A join with a token of the deleted tenant is refused as revoked.
        let req = join_request(&f, &Agent::new(), &spare.secret, "node", Default::default());
        assert_join_denied(f.svc.join(&req).await);
        assert_last_refusal(&f.store, "acme", "join-token:revoked").await;
    }
}

fn leaves(n: usize) -> Vec<ScopeLeafRequest> {
    (0..n)
        .map(|i| ScopeLeafRequest {
            subject: format!("node-{i}"),
            kind: "node.reimage".into(),
            payload_sha256: None,
            payload: None,
        })
        .collect()
}

fn batch(tenant: &str, key: &str) -> CreateBatch {
    CreateBatch {
        tenant: tenant.into(),
        caller: "alice@example.org".into(),
        idempotency_key: key.into(),
        reason: "reimage the rack".into(),
        leaves: leaves(2),
        not_after_seconds: None,
    }
}

#[tokio::test]
async fn a_deletion_cancels_exactly_the_tenants_open_batches() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        seed_nodes(&f.store, "acme", 2).await;
        let a = approvers(2);
        let set = set_of(&[&a[0], &a[1]], 2, vec![]);
        settle_trust_bundle(&f.store, &f.clock, &config(set, 1, vec![]))
            .await
            .unwrap();
        let mut ids = Vec::new();
        for key in ["k1", "k2", "k3", "k4"] {
            let created = create_batch(&f.store, &f.clock, &batch("acme", key))
                .await
                .unwrap();
            assert_eq!(created.status, BatchStatus::Pending);
            ids.push(created.batch_id);
        }
        cancel_batch(&f.store, &f.clock, &ids[3], "not needed", "ops")
            .await
            .unwrap();
        let done = admin(&f)
            .delete("acme", "customer left", true)
            .await
            .unwrap();
        assert_eq!(done.cancelled_batches.len(), 3);
        assert_eq!(done.retired_nodes.len(), 2);
        assert_eq!(done.tenant.cancelled_batches, 3);
        for id in &ids {
            let view = batch_view(&f.store, id).await.unwrap().unwrap();
            assert_eq!(view.state.status, BatchStatus::Cancelled);
        }
        let all = all_events(&f.store).await;
        assert_eq!(count(&all, "batch.cancelled"), 4);
        let deleted = all
            .iter()
            .find(|e| e.event_type == "tenant.deleted")
            .unwrap();
        let p: events::schema::TenantDeleted = deleted.decode().unwrap();
        assert_eq!(p.cancelled_batch_ids.len(), 3);
        assert_eq!(p.reason, "customer left");
    }
}

#[tokio::test]
async fn unknown_twice_default_and_a_deleted_name_never_comes_back() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let tenants = admin(&f);
        assert_eq!(
            refusal(tenants.delete("ghost", "r", false).await),
            "NOT_FOUND: no tenant ghost"
        );
        assert_eq!(
            refusal(tenants.show("ghost").await),
            "NOT_FOUND: no tenant ghost"
        );
        let created = tenants.create("acme", "the acme fleet").await.unwrap();
        assert_eq!(
            (created.status, created.description.as_str(), created.nodes),
            ("active", "the acme fleet", 0)
        );
        assert!(created.created_at_us.is_some());
        assert_eq!(
            refusal(tenants.create("acme", "").await),
            "ALREADY_EXISTS: tenant acme exists"
        );
        // A tenant a token named first exists too.
        f.svc.create_token(&token_spec("beta")).await.unwrap();
        assert_eq!(
            refusal(tenants.create("beta", "").await),
            "ALREADY_EXISTS: tenant beta exists"
        );
        let done = tenants
            .delete("acme", "customer left", false)
            .await
            .unwrap();
        assert_eq!(
            (
                done.retired_nodes.len(),
                done.revoked_tokens.len(),
                done.cancelled_batches.len()
            ),
            (0, 0, 0)
        );
        let deleted =
            "INVALID_STATE: tenant acme was deleted; a deleted tenant's name is not reused";
        assert_eq!(
            refusal(tenants.delete("acme", "again", true).await),
            deleted
        );
        assert_eq!(refusal(tenants.create("acme", "").await), deleted);
        match f.svc.create_token(&token_spec("acme")).await {
            Err(IdentityError::Admin(r)) => assert_eq!(r.to_string(), deleted),
            other => panic!("expected the token refused, got {other:?}"),
        }
        // The implicit tenant is deleted the same way (its token revoked).
        let beta = tenants.delete("beta", "gone", false).await.unwrap();
        assert_eq!(beta.revoked_tokens.len(), 1);
        assert_eq!(beta.tenant.created_at_us, None);
        f.svc.create_token(&token_spec("default")).await.unwrap();
        assert_eq!(
            refusal(tenants.delete("default", "r", true).await),
            "INVALID_INPUT: the default tenant cannot be deleted (bcctl up and token create \
             fall back to it)"
        );
        let listed: Vec<(String, &str)> = tenants
            .list()
            .await
            .unwrap()
            .into_iter()
            .map(|t| (t.tenant_id, t.status))
            .collect();
        assert_eq!(
            listed,
            vec![
                ("acme".to_string(), "deleted"),
                ("beta".to_string(), "deleted"),
                ("default".to_string(), "active"),
            ]
        );
        let shown = tenants.show("acme").await.unwrap();
        assert_eq!(shown.delete_reason.as_deref(), Some("customer left"));
    }
}

/// (Postgres) A deletion racing 30 token creations and a second deletion of the same tenant,
/// on two connection pools: exactly one deletion wins, every token created before it is
/// revoked by it, every one after it is refused, and none is left live.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deletion_races_token_creations_and_another_deletion() {
    let db = TestDb::postgres().await.unwrap();
    let first = EventStore::Postgres(db.pg_store(40).await.unwrap());
    let second = EventStore::Postgres(db.pg_store(40).await.unwrap());
    let f = Arc::new(fixture_on(db, first).await);
    f.svc.create_token(&token_spec("acme")).await.unwrap();
    let other = Arc::new(TenantAdmin::new(second, Arc::new(f.clock.clone())));
    let barrier = Arc::new(tokio::sync::Barrier::new(32));
    let mut tokens = tokio::task::JoinSet::new();
    for _ in 0..30 {
        let (f, barrier) = (f.clone(), barrier.clone());
        tokens.spawn(async move {
            barrier.wait().await;
            f.svc
                .create_token(&NewToken {
                    ..token_spec("acme")
                })
                .await
        });
    }
    let mut deletes = tokio::task::JoinSet::new();
    for i in 0..2 {
        let (f, other, barrier) = (f.clone(), other.clone(), barrier.clone());
        deletes.spawn(async move {
            barrier.wait().await;
            if i == 0 {
                admin(&f).delete("acme", "race", false).await
            } else {
                other.delete("acme", "race", false).await
            }
        });
    }
    let (mut created, mut refused) = (0, 0);
    while let Some(r) = tokens.join_next().await {
        match r.unwrap() {
            Ok(_) => created += 1,
            Err(IdentityError::Admin(r)) => {
                assert_eq!(
                    r.to_string(),
                    "INVALID_STATE: tenant acme was deleted; a deleted tenant's name is not reused"
                );
                refused += 1;
            }
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    let (mut won, mut lost, mut revoked) = (0, 0, 0);
    while let Some(r) = deletes.join_next().await {
        match r.unwrap() {
            Ok(done) => {
                won += 1;
                revoked = done.revoked_tokens.len();
            }
            Err(e) => {
                assert_eq!(
                    e.to_string(),
                    "INVALID_STATE: tenant acme was deleted; a deleted tenant's name is not reused"
                );
                lost += 1;
            }
        }
    }
    assert_eq!((won, lost), (1, 1));
    assert_eq!(created + refused, 30);
    // The token made before the race and every one created before the deletion.
    assert_eq!(revoked, created + 1);
    let live = f
        .svc
        .list_tokens(Some("acme"))
        .await
        .unwrap()
        .into_iter()
        .filter(|t| t.revoked_at_us.is_none())
        .count();
    assert_eq!(live, 0);
    let all = all_events(&f.store).await;
    assert_eq!(count(&all, "tenant.deleted"), 1);
    assert_eq!(count(&all, "token.created"), created + 1);
    assert_eq!(count(&all, "token.revoked"), created + 1);
    eprintln!("race: {created} tokens created before the deletion, {refused} refused after it");
}
