//! Issue 44 item 5, status that tells the truth, on both backends: a join token's status is
//! `active`, `used up`, `expired` or `revoked` (the first reason a join would be refused), and a
//! tenant counts its nodes by the status each really has (a node whose identity was revoked is
//! `revoked`, one whose newest certificate ran out `expired`; neither is active).

use crate::identity_support::*;

use std::collections::BTreeMap;
use std::sync::Arc;

use commands::identity::{NewToken, TokenStatus};
use commands::tenants::TenantAdmin;
use events::store::testkit::TestDb;

fn spec(uses: u32, ttl_seconds: i64) -> NewToken {
    NewToken {
        uses,
        ttl_seconds,
        ..token_spec("acme")
    }
}

/// Each listed token's status, by id.
async fn statuses(f: &Fixture) -> BTreeMap<String, String> {
    f.svc
        .list_tokens(Some("acme"))
        .await
        .unwrap()
        .into_iter()
        .map(|t| {
            let json = serde_json::to_value(&t).unwrap();
            assert_eq!(json["status"], t.status.as_str(), "{json}");
            (t.token_id, t.status.as_str().to_owned())
        })
        .collect()
}

fn counts(pairs: &[(&str, usize)]) -> BTreeMap<String, usize> {
    pairs.iter().map(|(s, n)| (s.to_string(), *n)).collect()
}

#[tokio::test]
async fn a_token_is_active_used_up_expired_or_revoked() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let once = f.svc.create_token(&spec(1, 3600)).await.unwrap();
        assert_eq!(once.token.status, TokenStatus::Active);
        let req = join_request(&f, &Agent::new(), &once.secret, "node", Default::default());
        f.svc.join(&req).await.unwrap();
        let spare = f.svc.create_token(&spec(2, 3600)).await.unwrap();
        let revoked = f.svc.create_token(&spec(2, 3600)).await.unwrap();
        let done = f
            .svc
            .revoke_token(&revoked.token.token_id, "leaked")
            .await
            .unwrap();
        assert_eq!(done.status, TokenStatus::Revoked);
        let short = f.svc.create_token(&spec(2, 60)).await.unwrap();
        let id = |t: &commands::identity::CreatedToken| t.token.token_id.clone();
        let want = |pairs: [(&commands::identity::CreatedToken, &str); 4]| {
            pairs
                .iter()
                .map(|(t, s)| (id(t), s.to_string()))
                .collect::<BTreeMap<_, _>>()
        };
        assert_eq!(
            statuses(&f).await,
            want([
                (&once, "used up"),
                (&spare, "active"),
                (&revoked, "revoked"),
                (&short, "active"),
            ])
        );
        // At its expiry a join is refused as expired, and so the status says.
        f.clock.advance_secs(60);
        assert_eq!(
            statuses(&f).await,
            want([
                (&once, "used up"),
                (&spare, "active"),
                (&revoked, "revoked"),
                (&short, "expired"),
            ])
        );
        let req = join_request(&f, &Agent::new(), &short.secret, "node", Default::default());
        assert_join_denied(f.svc.join(&req).await);
        assert_last_refusal(&f.store, "acme", "join-token:expired").await;
        // Past every expiry: the revoked one stays revoked, the used one reads expired (the
        // join's order: revoked, expired, no use left).
        f.clock.advance_secs(3600);
        assert_eq!(
            statuses(&f).await,
            want([
                (&once, "expired"),
                (&spare, "expired"),
                (&revoked, "revoked"),
                (&short, "expired"),
            ])
        );
    }
}

#[tokio::test]
async fn a_tenant_counts_its_nodes_by_the_status_they_really_have() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let tenants = TenantAdmin::new(f.store.clone(), Arc::new(f.clock.clone()));
        let mut nodes = Vec::new();
        for _ in 0..4 {
            nodes.push(join_new(&f, "acme").await.1.node_id);
        }
        let revoked = f
            .svc
            .revoke_identity(&nodes[1], "key leaked")
            .await
            .unwrap();
        // The row stays active; the identity is revoked.
        assert_eq!(revoked.status, "active");
        f.svc
            .retire_node(&nodes[2], "decommissioned")
            .await
            .unwrap();
        let shown = tenants.show("acme").await.unwrap();
        assert_eq!(shown.nodes, 4);
        assert_eq!(
            shown.nodes_by_status,
            counts(&[("active", 2), ("retired", 1), ("revoked", 1)])
        );
        assert_eq!(shown.active_nodes, 2, "a revoked node is not active");
        // Four tokens of 5 uses, one spent each.
        assert_eq!(shown.live_tokens, 4);
        let json = serde_json::to_value(&shown).unwrap();
        assert_eq!(
            json["nodesByStatus"],
            serde_json::json!({"active": 2, "retired": 1, "revoked": 1})
        );
        assert_eq!(json["activeNodes"], 2);
        let listed = tenants.list().await.unwrap();
        let acme = listed.iter().find(|t| t.tenant_id == "acme").unwrap();
        assert_eq!(acme, &shown);
        // A day and an hour on, the two active nodes' 24-hour certificates ran out and every
        // token expired.
        f.clock.advance_secs(25 * 3600);
        let shown = tenants.show("acme").await.unwrap();
        assert_eq!(
            shown.nodes_by_status,
            counts(&[("expired", 2), ("retired", 1), ("revoked", 1)])
        );
        assert_eq!((shown.active_nodes, shown.live_tokens), (0, 0));
    }
}
