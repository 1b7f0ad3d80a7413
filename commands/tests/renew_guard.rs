//! Issue 17: a certificate already renewed never renews again (it is flagged as a clone and the
//! node's certificates revoked), and a node renews at most 6 times an hour, the bound counted
//! from the log's projection (a second service over the same store, with nothing in memory,
//! refuses the same renewal). A renewal retried after its answer was lost (same old leaf, same
//! next key) gets the same certificate back and is no clone. On Postgres and SQLite.

use crate::identity_support;

use std::sync::Arc;

use commands::identity::{IdentityConfig, IdentityError, JoinService};
use commands::Clock;
use domain::pki::{NodeIdentity, TrustDomain};
use events::schema::{NodeIdentityRevoked, RenewCloned};
use events::store::testkit::TestDb;
use identity_support::*;

fn serial(leaf: &[u8]) -> String {
    let td = TrustDomain::new(TD).unwrap();
    NodeIdentity::from_leaf_der(leaf, &td)
        .unwrap()
        .serial
        .to_hex()
}

#[tokio::test]
async fn a_superseded_certificate_renewing_is_refused_flagged_as_a_clone_and_revoked() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let (agent, body) = join_new(&f, "t1").await;
        let node = body.node_id.clone();
        let leaf = body.certificate_chain[0].clone();

        f.clock.advance_secs(3600);
        let next = Agent::new();
        let renewed = f
            .svc
            .renew(&renew_request(&agent, &leaf, &node, &next, now_ms(&f)))
            .await
            .expect("the first renewal");
        let new_leaf = renewed.certificate_chain[0].clone();

        // The same old certificate and key again, with a fresh, valid proof: a second holder.
        f.clock.advance_secs(5);
        let clone = renew_request(&agent, &leaf, &node, &Agent::new(), now_ms(&f));
        assert_renew_denied(f.svc.renew(&clone).await);
        assert_last_refusal(&f.store, "t1", "renew:superseded").await;

        let all = all_events(&f.store).await;
        let cloned: Vec<_> = all
            .iter()
            .filter(|e| e.event_type == "security.renew.cloned")
            .collect();
        assert_eq!(cloned.len(), 1);
        assert_eq!(cloned[0].tenant_id, "t1");
        assert_eq!(cloned[0].stream_id, format!("node/{node}"));
        let event: RenewCloned = cloned[0].decode().unwrap();
        let both = vec![serial(&leaf), serial(&new_leaf)];
        assert_eq!(
            event,
            RenewCloned {
                node_id: node.clone(),
                presented_serial: serial(&leaf),
                successor_serial: serial(&new_leaf),
                csr_sha256: domain::identity::sha256(&clone.csr_der).to_vec(),
                revoked_serials: both.clone(),
            }
        );
        let revoked: Vec<NodeIdentityRevoked> = all
            .iter()
            .filter(|e| e.event_type == "node.identity.revoked")
            .map(|e| e.decode().unwrap())
            .collect();
        assert_eq!(revoked.len(), 1);
        assert_eq!(revoked[0].revoked_serials, both);
        assert_eq!(revoked[0].new_identity_generation, 2);
        assert_eq!(
            revoked[0].reason,
            format!(
                "cloned certificate: serial {} renewed again after {} superseded it",
                serial(&leaf),
                serial(&new_leaf)
            )
        );

        // Neither holder keeps an identity: the newer certificate is of an old generation now.
        let req = renew_request(&next, &new_leaf, &node, &Agent::new(), now_ms(&f));
        assert_renew_denied(f.svc.renew(&req).await);
        assert_last_refusal(&f.store, "t1", "renew:old-generation").await;
        let detail = f.svc.show_node(&node).await.unwrap();
        assert_eq!(detail.certificates.len(), 2);
        assert!(detail
            .certificates
            .iter()
            .all(|c| c.revoked_at_us.is_some()));
    }
}

#[tokio::test]
async fn a_lost_answer_retried_with_the_same_key_gets_the_same_certificate() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let (agent, body) = join_new(&f, "t1").await;
        let node = body.node_id.clone();
        let leaf = body.certificate_chain[0].clone();

        f.clock.advance_secs(3600);
        let next = Agent::new();
        let first = f
            .svc
            .renew(&renew_request(&agent, &leaf, &node, &next, now_ms(&f)))
            .await
            .expect("the first renewal (committed; its answer is lost on the way)");

        // bcd retries with the old leaf, a fresh proof and a new CSR for the SAME next key.
        f.clock.advance_secs(30);
        let again = Agent {
            csr: domain::pki::build_csr(&next.key).unwrap(),
            key: domain::pki::PrivateKey::from_pkcs8_der(
                domain::pki::KeyRole::Node,
                next.key.pkcs8_der(),
            )
            .unwrap(),
        };
        assert_ne!(again.csr, next.csr);
        let retried = f
            .svc
            .renew(&renew_request(&agent, &leaf, &node, &again, now_ms(&f)))
            .await
            .expect("the retried renewal is answered");
        assert_eq!(retried.certificate_chain, first.certificate_chain);
        assert_eq!(retried.csr_sha256, again.csr_sha256());

        let types: Vec<String> = all_events(&f.store)
            .await
            .into_iter()
            .map(|e| e.event_type)
            .collect();
        let issued = types
            .iter()
            .filter(|t| *t == "node.certificate.issued")
            .count();
        assert_eq!(
            issued, 2,
            "the join's certificate and one renewal: {types:?}"
        );
        assert!(!types.iter().any(|t| t == "security.renew.cloned"));
        assert!(!types.iter().any(|t| t == "node.identity.revoked"));
        let detail = f.svc.show_node(&node).await.unwrap();
        assert_eq!(detail.certificates.len(), 2);
        assert!(detail
            .certificates
            .iter()
            .all(|c| c.revoked_at_us.is_none()));

        // The renewed certificate still renews.
        let new_leaf = first.certificate_chain[0].clone();
        f.svc
            .renew(&renew_request(
                &next,
                &new_leaf,
                &node,
                &Agent::new(),
                now_ms(&f),
            ))
            .await
            .expect("the renewed certificate renews");
    }
}

#[tokio::test]
async fn a_replayed_renewal_is_a_replay_not_a_clone() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let (agent, body) = join_new(&f, "t1").await;
        let leaf = body.certificate_chain[0].clone();
        let req = renew_request(&agent, &leaf, &body.node_id, &Agent::new(), now_ms(&f));
        f.svc.renew(&req).await.expect("renewal");
        assert_renew_denied(f.svc.renew(&req).await);
        assert_last_refusal(&f.store, "t1", "renew:replay").await;
        let types: Vec<String> = all_events(&f.store)
            .await
            .into_iter()
            .map(|e| e.event_type)
            .collect();
        assert!(!types.iter().any(|t| t == "security.renew.cloned"));
        assert!(!types.iter().any(|t| t == "node.identity.revoked"));
    }
}

#[tokio::test]
async fn the_seventh_renewal_in_an_hour_is_refused_with_the_time_the_next_is_allowed() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let (agent, body) = join_new(&f, "t1").await;
        let node = body.node_id.clone();
        let (mut agent, mut leaf) = (agent, body.certificate_chain[0].clone());
        f.clock.advance_secs(60);
        let first_us = f.clock.now_us();
        // Six renewals, ten minutes apart: the first at t, the sixth at t + 50 min.
        for i in 0..6 {
            if i > 0 {
                f.clock.advance_secs(600);
            }
            let next = Agent::new();
            let renewed = f
                .svc
                .renew(&renew_request(&agent, &leaf, &node, &next, now_ms(&f)))
                .await
                .unwrap_or_else(|e| panic!("renewal {}: {e}", i + 1));
            (agent, leaf) = (next, renewed.certificate_chain[0].clone());
        }
        // The 7th, 5 min later (t + 55 min): refused until the first leaves the window (t + 1 h).
        f.clock.advance_secs(300);
        let req = renew_request(&agent, &leaf, &node, &Agent::new(), now_ms(&f));
        match f.svc.renew(&req).await {
            Err(IdentityError::RenewalsExhausted {
                node_id,
                per_hour,
                retry_after_ms,
            }) => assert_eq!(
                (node_id.as_str(), per_hour, retry_after_ms),
                (node.as_str(), 6, 300_000)
            ),
            other => panic!("expected RenewalsExhausted, got {other:?}"),
        }
        assert_last_refusal(&f.store, "t1", "renew:rate-limited").await;

        // The count is the log's, not this service's memory: a second service over the store.
        let other = JoinService::new(
            f.store.clone(),
            f.keys.clone(),
            Arc::new(f.clock.clone()),
            IdentityConfig::new(TrustDomain::new(TD).unwrap()),
        )
        .unwrap();
        f.clock.advance_secs(299);
        let req = renew_request(&agent, &leaf, &node, &Agent::new(), now_ms(&f));
        match other.renew(&req).await {
            Err(IdentityError::RenewalsExhausted { retry_after_ms, .. }) => {
                assert_eq!(retry_after_ms, 1_000)
            }
            other => panic!("expected RenewalsExhausted, got {other:?}"),
        }
        // Exactly at the retry time it renews.
        f.clock.set_us(first_us + 3_600_000_000);
        let req = renew_request(&agent, &leaf, &node, &Agent::new(), now_ms(&f));
        other
            .renew(&req)
            .await
            .expect("the renewal the pushback named");
    }
}
