//! The pool and join-request operator commands, on Postgres and SQLite: pool create / update
//! and every validation refusal, join-request approve / reject and their state refusals, and
//! the expiry identity maintenance runs (then a rebuild gives the same tables).

use std::sync::Arc;

use commands::attest::{AttestError, JoinRequests, NewPool, Pools, BUILTIN_ATTESTORS};
use commands::Clock;
use domain::attest::{AttestorPolicy, UpdatePool};
use events::store::testkit::TestDb;

use crate::attest_projections::{append, approved, consumed, request_created};
use crate::identity_support::{all_events, fixture, Fixture};

fn pools(f: &Fixture) -> Pools {
    let mut known: Vec<String> = BUILTIN_ATTESTORS.iter().map(|s| s.to_string()).collect();
    known.push("tpm-remote".into());
    Pools::new(f.store.clone(), Arc::new(f.clock.clone()), known)
}

fn requests(f: &Fixture) -> JoinRequests {
    JoinRequests::new(f.store.clone(), Arc::new(f.clock.clone()))
}

fn only(ids: &[&str]) -> AttestorPolicy {
    AttestorPolicy::Only(ids.iter().map(|s| s.to_string()).collect())
}

fn new_pool(id: &str, policy: AttestorPolicy) -> NewPool {
    NewPool {
        pool_id: id.into(),
        tenant_id: "acme".into(),
        description: "edge boxes".into(),
        join_attestors: policy,
    }
}

fn refused<T: std::fmt::Debug>(r: Result<T, AttestError>) -> String {
    match r {
        Err(AttestError::Refused(e)) => e.to_string(),
        other => panic!("not a refusal: {other:?}"),
    }
}

async fn event_types(f: &Fixture) -> Vec<String> {
    all_events(&f.store)
        .await
        .into_iter()
        .map(|e| e.event_type)
        .filter(|t| t.starts_with("pool.") || t.starts_with("join_request."))
        .collect()
}

#[tokio::test]
async fn pools_are_created_and_updated_and_each_bad_input_is_refused() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let p = pools(&f);
        let edge = p
            .create(&new_pool("edge", only(&["x509pop", "tpm-remote"])))
            .await
            .unwrap();
        assert_eq!(
            edge.join_attestors,
            Some(vec!["x509pop".to_string(), "tpm-remote".to_string()])
        );
        assert_eq!((edge.tenant_id.as_str(), edge.version), ("acme", 1));
        let any = p
            .create(&new_pool("any", AttestorPolicy::Any))
            .await
            .unwrap();
        assert_eq!(any.join_attestors, None);

        let known = "join-token, x509pop, provisioned, tpm, discovery, cloud-iid, tpm-remote";
        assert_eq!(
            refused(p.create(&new_pool("p2", only(&["tpm-nope"]))).await),
            format!(
                "INVALID_INPUT: join attestor \"tpm-nope\" is not one the control plane runs \
                 (it runs: {known})"
            )
        );
        assert_eq!(
            refused(p.create(&new_pool("p2", only(&[]))).await),
            "INVALID_INPUT: join attestors must be 1 to 16 ids, got 0"
        );
        let seventeen = AttestorPolicy::Only(vec!["x509pop".to_string(); 17]);
        assert_eq!(
            refused(p.create(&new_pool("p2", seventeen)).await),
            "INVALID_INPUT: join attestors must be 1 to 16 ids, got 17"
        );
        assert_eq!(
            refused(
                p.create(&new_pool("p2", only(&["x509pop", "x509pop"])))
                    .await
            ),
            "INVALID_INPUT: join attestor \"x509pop\" is listed twice"
        );
        assert_eq!(
            refused(p.create(&new_pool("bad pool", AttestorPolicy::Any)).await),
            "INVALID_INPUT: pool id \"bad pool\" must be 1 to 128 of A-Z, a-z, 0-9, '.', '-', '_'"
        );
        let mut bad_tenant = new_pool("p2", AttestorPolicy::Any);
        bad_tenant.tenant_id = String::new();
        assert_eq!(
            refused(p.create(&bad_tenant).await),
            "INVALID_INPUT: tenant id \"\" must be 1 to 128 of A-Z, a-z, 0-9, '.', '-', '_'"
        );
        let mut long = new_pool("p2", AttestorPolicy::Any);
        long.description = "x".repeat(1025);
        assert_eq!(
            refused(p.create(&long).await),
            "INVALID_INPUT: the description is 1025 bytes, at most 1024"
        );
        assert_eq!(
            refused(p.create(&new_pool("edge", AttestorPolicy::Any)).await),
            "INVALID_STATE: pool edge already exists"
        );

        let update = |id: &str, text: Option<&str>, policy: Option<AttestorPolicy>| UpdatePool {
            pool_id: id.into(),
            description: text.map(str::to_owned),
            join_attestors: policy,
        };
        let edge = p
            .update(&update("edge", None, Some(only(&["provisioned"]))))
            .await
            .unwrap();
        assert_eq!(edge.join_attestors, Some(vec!["provisioned".to_string()]));
        assert_eq!((edge.description.as_str(), edge.version), ("edge boxes", 2));
        let edge = p
            .update(&update("edge", Some("racks"), Some(AttestorPolicy::Any)))
            .await
            .unwrap();
        assert_eq!(
            (edge.description.as_str(), edge.join_attestors.clone()),
            ("racks", None)
        );
        assert_eq!(
            refused(
                p.update(&update("nope", None, Some(AttestorPolicy::Any)))
                    .await
            ),
            "NOT_FOUND: no pool nope"
        );
        assert_eq!(
            refused(p.update(&update("edge", None, None)).await),
            "INVALID_INPUT: an update names a new description or new join attestors"
        );
        assert!(refused(
            p.update(&update("edge", None, Some(only(&["tpm-nope"]))))
                .await
        )
        .starts_with("INVALID_INPUT: join attestor \"tpm-nope\""));
        assert_eq!(refused(p.show("nope").await), "NOT_FOUND: no pool nope");
        assert_eq!(p.show("edge").await.unwrap(), edge);
        let ids: Vec<String> = p
            .list(Some("acme"))
            .await
            .unwrap()
            .into_iter()
            .map(|v| v.pool_id)
            .collect();
        assert_eq!(ids, ["any", "edge"]);
        assert!(p.list(Some("other")).await.unwrap().is_empty());
        // Refusals write nothing.
        assert_eq!(
            event_types(&f).await,
            [
                "pool.created",
                "pool.created",
                "pool.updated",
                "pool.updated"
            ]
        );
    }
}

#[tokio::test]
async fn only_a_pending_unexpired_request_is_approved_and_only_a_pending_one_rejected() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let r = requests(&f);
        let now = f.clock.now_us();
        append(&f.store, now, vec![request_created("jr_a", 1, now)]).await;
        append(&f.store, now, vec![request_created("jr_b", 2, now)]).await;
        append(&f.store, now, vec![request_created("jr_c", 3, now)]).await;

        let a = r.approve("jr_a", "alice", "known box").await.unwrap();
        assert_eq!(
            (
                a.status.as_str(),
                a.decided_by.as_deref(),
                a.decision_reason.as_deref()
            ),
            ("approved", Some("alice"), Some("known box"))
        );
        assert_eq!(
            refused(r.approve("jr_a", "alice", "").await),
            "INVALID_STATE: join request jr_a is approved"
        );
        assert_eq!(
            refused(r.reject("jr_a", "bob", "").await),
            "INVALID_STATE: join request jr_a is approved"
        );
        let b = r.reject("jr_b", "bob", "unknown box").await.unwrap();
        assert_eq!(b.status, "rejected");
        assert_eq!(
            refused(r.approve("jr_b", "alice", "").await),
            "INVALID_STATE: join request jr_b is rejected"
        );
        append(&f.store, now, vec![consumed("jr_a")]).await;
        assert_eq!(
            refused(r.reject("jr_a", "bob", "").await),
            "INVALID_STATE: join request jr_a is consumed"
        );
        assert_eq!(
            refused(r.approve("jr_x", "alice", "").await),
            "NOT_FOUND: no join request jr_x"
        );
        assert_eq!(
            refused(r.approve("jr_c", "", "").await),
            "INVALID_INPUT: the actor is empty"
        );
        assert_eq!(
            refused(r.list(None, Some("open")).await),
            "INVALID_INPUT: status \"open\" is none of pending, approved, rejected, consumed, \
             expired"
        );
        // request_created expires 1 ms after creation: past it, a pending request is not
        // approved (maintenance has not expired it yet), but it may still be rejected.
        f.clock.advance_us(1_000);
        assert_eq!(
            refused(r.approve("jr_c", "alice", "").await),
            "INVALID_STATE: join request jr_c has expired"
        );
        let pending: Vec<String> = r
            .list(Some("acme"), Some("pending"))
            .await
            .unwrap()
            .into_iter()
            .map(|v| v.request_id)
            .collect();
        assert_eq!(pending, ["jr_c"]);
        assert_eq!(r.show("jr_c").await.unwrap().status, "pending");
        assert_eq!(
            r.reject("jr_c", "bob", "late").await.unwrap().status,
            "rejected"
        );
        assert_eq!(
            refused(r.show("jr_x").await),
            "NOT_FOUND: no join request jr_x"
        );
        assert_eq!(r.list(None, None).await.unwrap().len(), 3);
    }
}

#[tokio::test]
async fn maintenance_expires_open_requests_at_their_expiry_and_leaves_decided_ones() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let now = f.clock.now_us();
        // Expiring at now + 1000 µs: pending jr_p, approved jr_q, consumed jr_r; jr_s later.
        append(&f.store, now, vec![request_created("jr_p", 1, now)]).await;
        append(&f.store, now, vec![request_created("jr_q", 2, now)]).await;
        append(&f.store, now, vec![request_created("jr_r", 3, now)]).await;
        append(&f.store, now, vec![request_created("jr_s", 4, now + 5_000)]).await;
        append(&f.store, now, vec![approved("jr_q")]).await;
        append(&f.store, now, vec![approved("jr_r"), consumed("jr_r")]).await;

        f.clock.advance_us(999);
        assert_eq!(f.svc.maintain().await.unwrap().expired_join_requests, 0);
        f.clock.advance_us(1);
        assert_eq!(f.svc.maintain().await.unwrap().expired_join_requests, 2);
        assert_eq!(f.svc.maintain().await.unwrap().expired_join_requests, 0);
        let r = requests(&f);
        let status = |v: Vec<commands::attest::JoinRequestView>| {
            v.into_iter()
                .map(|v| (v.request_id, v.status))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            status(r.list(None, None).await.unwrap()),
            [
                ("jr_p".to_string(), "expired".to_string()),
                ("jr_q".into(), "expired".into()),
                ("jr_r".into(), "consumed".into()),
                ("jr_s".into(), "pending".into()),
            ]
        );
        assert_eq!(
            refused(r.approve("jr_p", "alice", "").await),
            "INVALID_STATE: join request jr_p is expired"
        );
        f.clock.advance_us(5_000);
        assert_eq!(r.expire_due(10).await.unwrap(), 1);

        let tables = projections::identity::tables();
        let inline = projections::digest_tables(&f.store, &tables).await.unwrap();
        projections::rebuild(&f.store, &projections::identity::all(), None, 2, |_| {})
            .await
            .unwrap();
        assert_eq!(
            inline,
            projections::digest_tables(&f.store, &tables).await.unwrap()
        );
    }
}
