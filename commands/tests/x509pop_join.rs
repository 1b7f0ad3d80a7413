//! x509pop through the real JoinService, on both backends: a node whose certificate expired
//! re-joins as itself (generation + 1, the old certificate revoked); every refusal reason the
//! service can reach is ACCESS_DENIED with its exact `x509pop:<reason>` in the right tenant; a
//! replayed proof is answered again while its re-join's identity is current and refused after;
//! the grace period on the simulated clock; and (Postgres) 50 joins sent at once with one proof
//! admit exactly one, the 49 others answered with its identity.

use crate::identity_support::*;
use crate::x509pop_support::*;

use std::sync::Arc;

use commands::identity::{IdentityConfig, JoinService};
use commands::Clock;
use domain::pki::{
    issue_node_certificate, KeySet, KeySetLifetimes, NodeCertificateDecision, NodeId, NodeRole,
    Serial, SiteId, SpiffeId, TrustDomain, VerifiedCsr,
};
use events::store::testkit::TestDb;
use events::store::EventStore;

const DAY_US: i64 = 86_400_000_000;

/// Runs `case` on a fresh fixture of each backend.
async fn each(case: impl AsyncFn(&Fixture)) {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        case(&f).await;
    }
}

/// Sends `request`, expects ACCESS_DENIED, and `reason` recorded in `tenant`.
async fn refused(
    f: &Fixture,
    request: &commands::identity::JoinRequest,
    tenant: &str,
    reason: &str,
) {
    assert_join_denied(f.svc.join(request).await);
    assert_last_refusal(&f.store, tenant, reason).await;
}

#[tokio::test]
async fn an_expired_certificate_re_joins_in_place() {
    each(async |f| {
        let node = joined(f, "t1").await;
        expire(f, &node);
        let next = Agent::new();
        let request = x509pop_request(&next, evidence(f, &node, &next), "node");
        let answer = f.svc.join(&request).await.unwrap();
        assert_eq!(answer.csr_sha256, next.csr_sha256());
        assert_eq!(answer.node_id, node.node_id());
        assert_eq!(answer.site_id, node.answer.site_id);
        assert_eq!(
            answer.identity_generation,
            node.answer.identity_generation + 1
        );
        assert!(answer.not_after_us > f.clock.now_us());

        let detail = f.svc.show_node(node.node_id()).await.unwrap();
        assert_eq!(detail.node.tenant_id, "t1");
        assert_eq!(detail.node.status, "active");
        assert_eq!(detail.node.identity_generation, 2);
        assert_eq!(detail.node.attestor, "x509pop");
        let old_serial = hex::encode(
            domain::pki::NodeIdentity::from_leaf_der(node.leaf(), &TrustDomain::new(TD).unwrap())
                .unwrap()
                .serial
                .as_bytes(),
        );
        let old = detail
            .certificates
            .iter()
            .find(|c| c.serial == old_serial)
            .expect("the old certificate");
        assert!(
            old.revoked_at_us.is_some(),
            "the old certificate is revoked"
        );
        assert_eq!(
            f.svc.list_nodes(None).await.unwrap().len(),
            1,
            "no new node"
        );

        // The new certificate renews like any other.
        let after = Agent::new();
        let renew = renew_request(
            &next,
            &answer.certificate_chain[0],
            node.node_id(),
            &after,
            now_ms(f),
        );
        f.svc.renew(&renew).await.unwrap();
    })
    .await;
}

#[tokio::test]
async fn a_certificate_not_expired_yet_re_joins_too() {
    each(async |f| {
        let node = joined(f, "t1").await;
        f.clock.advance_secs(3600);
        let next = Agent::new();
        let answer = f
            .svc
            .join(&x509pop_request(&next, evidence(f, &node, &next), "node"))
            .await
            .unwrap();
        assert_eq!(answer.node_id, node.node_id());
        assert_eq!(answer.identity_generation, 2);
    })
    .await;
}

#[tokio::test]
async fn a_replayed_proof_is_refused_reused() {
    each(async |f| {
        let node = joined(f, "t1").await;
        expire(f, &node);
        let next = Agent::new();
        let request = x509pop_request(&next, evidence(f, &node, &next), "node");
        let first = f.svc.join(&request).await.unwrap();
        // The same request again (its answer lost) gets the identity it was issued (issue 40);
        // once the node renewed, the proof is `reused`.
        let again = f.svc.join(&request).await.expect("answered again");
        assert_eq!(again.certificate_chain, first.certificate_chain);
        let renewed = Agent::new();
        let renew = renew_request(
            &next,
            &first.certificate_chain[0],
            &first.node_id,
            &renewed,
            now_ms(f),
        );
        f.svc.renew(&renew).await.expect("renewed");
        refused(f, &request, "t1", "x509pop:reused").await;
        // The same proof with another CSR proves nothing for it.
        let mut other = request.clone();
        other.input.csr_der = Agent::new().csr;
        refused(f, &other, "t1", "x509pop:bad-signature").await;
        // A fresh proof by the old certificate: its generation is over.
        let again = Agent::new();
        let fresh = x509pop_request(&again, evidence(f, &node, &again), "node");
        refused(f, &fresh, "t1", "x509pop:stale-generation").await;
    })
    .await;
}

#[tokio::test]
async fn malformed_evidence_is_refused_in_the_root_tenant() {
    each(async |f| {
        let node = joined(f, "t1").await;
        expire(f, &node);
        let next = Agent::new();
        let good = evidence(f, &node, &next);
        for bad in [
            b"{".to_vec(),
            edit_json(&good, |v| v["chain"] = serde_json::json!([])),
            edit_json(&good, |v| v["sig"] = "a+b/".into()),
            edit_json(&good, |v| v["more"] = true.into()),
        ] {
            refused(
                f,
                &x509pop_request(&next, bad, "node"),
                "root",
                "x509pop:malformed",
            )
            .await;
        }
    })
    .await;
}

#[tokio::test]
async fn another_version_is_unsupported() {
    each(async |f| {
        let node = joined(f, "t1").await;
        expire(f, &node);
        let next = Agent::new();
        let v2 = edit_json(&evidence(f, &node, &next), |v| v["v"] = 2.into());
        refused(
            f,
            &x509pop_request(&next, v2, "node"),
            "root",
            "x509pop:unsupported-version",
        )
        .await;
    })
    .await;
}

#[tokio::test]
async fn a_certificate_this_service_never_issued_is_unknown() {
    each(async |f| {
        let node = joined(f, "t1").await;
        expire(f, &node);
        // Another deployment's node CA, same trust domain, same node id, same key.
        let other = KeySet::generate(
            TrustDomain::new(TD).unwrap(),
            f.clock.now() - time::Duration::days(2),
            KeySetLifetimes::default(),
        )
        .unwrap();
        let csr = VerifiedCsr::verify(&node.agent.csr).unwrap();
        let decision = NodeCertificateDecision {
            spiffe_id: SpiffeId::new(
                TrustDomain::new(TD).unwrap(),
                SiteId::new(&node.answer.site_id).unwrap(),
                NodeId::new(node.node_id()).unwrap(),
            ),
            role: NodeRole::Node,
            serial: Serial::generate().unwrap(),
            requested_lifetime: None,
            statements: Vec::new(),
        };
        let forged = issue_node_certificate(
            &other.node_ca,
            &csr,
            &decision,
            f.clock.now() - time::Duration::hours(2),
        )
        .unwrap();
        let next = Agent::new();
        let chain = vec![forged.der, other.node_ca.cert_der().to_vec()];
        let ev = evidence_with(&chain, &node.agent, node.node_id(), &next, clock_ms(f));
        refused(
            f,
            &x509pop_request(&next, ev, "node"),
            "root",
            "x509pop:unknown-certificate",
        )
        .await;
    })
    .await;
}

#[tokio::test]
async fn another_nodes_certificate_is_a_node_mismatch() {
    each(async |f| {
        let a = joined(f, "t1").await;
        let b = joined(f, "t2").await;
        expire(f, &a);
        let next = Agent::new();
        let ev = evidence_with(&a.chain(), &a.agent, b.node_id(), &next, clock_ms(f));
        // Attributed to the presented certificate's node's tenant, not the one claimed.
        refused(
            f,
            &x509pop_request(&next, ev, "node"),
            "t1",
            "x509pop:node-mismatch",
        )
        .await;
    })
    .await;
}

#[tokio::test]
async fn a_chain_to_another_issuer_is_a_bad_chain() {
    each(async |f| {
        let node = joined(f, "t1").await;
        expire(f, &node);
        let next = Agent::new();
        let root = b64url(f.keys.root_ca.cert_der());
        for chain in [
            edit_json(&evidence(f, &node, &next), |v| {
                v["chain"][1] = root.clone().into()
            }),
            edit_json(&evidence(f, &node, &next), |v| {
                v["chain"] = serde_json::json!([v["chain"][0]])
            }),
        ] {
            refused(
                f,
                &x509pop_request(&next, chain, "node"),
                "t1",
                "x509pop:bad-chain",
            )
            .await;
        }
    })
    .await;
}

#[tokio::test]
async fn a_proof_by_another_key_is_a_bad_signature() {
    each(async |f| {
        let node = joined(f, "t1").await;
        expire(f, &node);
        let next = Agent::new();
        let stranger = Agent::new();
        let ev = evidence_with(&node.chain(), &stranger, node.node_id(), &next, clock_ms(f));
        refused(
            f,
            &x509pop_request(&next, ev, "node"),
            "t1",
            "x509pop:bad-signature",
        )
        .await;
    })
    .await;
}

#[tokio::test]
async fn a_retired_or_deleted_node_is_inactive() {
    each(async |f| {
        let retired = joined(f, "t1").await;
        let deleted = joined(f, "t1").await;
        f.svc
            .retire_node(retired.node_id(), "decommissioned")
            .await
            .unwrap();
        f.svc.delete_node(deleted.node_id(), "gone").await.unwrap();
        expire(f, &retired);
        for node in [&retired, &deleted] {
            let next = Agent::new();
            refused(
                f,
                &x509pop_request(&next, evidence(f, node, &next), "node"),
                "t1",
                "x509pop:node-inactive",
            )
            .await;
        }
    })
    .await;
}

#[tokio::test]
async fn a_certificate_from_before_node_revoke_is_stale() {
    each(async |f| {
        let node = joined(f, "t1").await;
        f.svc.revoke_identity(node.node_id(), "lost").await.unwrap();
        expire(f, &node);
        let next = Agent::new();
        refused(
            f,
            &x509pop_request(&next, evidence(f, &node, &next), "node"),
            "t1",
            "x509pop:stale-generation",
        )
        .await;
    })
    .await;
}

#[tokio::test]
async fn a_node_certificate_does_not_re_join_as_a_site() {
    each(async |f| {
        let node = joined(f, "t1").await;
        expire(f, &node);
        let next = Agent::new();
        refused(
            f,
            &x509pop_request(&next, evidence(f, &node, &next), "site"),
            "t1",
            "x509pop:wrong-role",
        )
        .await;
        // A role x509pop does not list is refused before the evidence is read.
        refused(
            f,
            &x509pop_request(&next, evidence(f, &node, &next), "ramdisk"),
            "root",
            "x509pop:wrong-role",
        )
        .await;
    })
    .await;
}

#[tokio::test]
async fn a_proof_outside_the_clock_window_is_clock_skew() {
    each(async |f| {
        let node = joined(f, "t1").await;
        expire(f, &node);
        for skew in [-61_000i64, 61_000] {
            let next = Agent::new();
            let at = u64::try_from(i64::try_from(clock_ms(f)).unwrap() + skew).unwrap();
            let ev = evidence_with(&node.chain(), &node.agent, node.node_id(), &next, at);
            refused(
                f,
                &x509pop_request(&next, ev, "node"),
                "t1",
                "x509pop:clock-skew",
            )
            .await;
        }
    })
    .await;
}

#[tokio::test]
async fn expired_beyond_grace_on_the_simulated_clock() {
    each(async |f| {
        let node = joined(f, "t1").await;
        // One millisecond past the seven days: refused.
        after_expiry(f, &node, 7 * DAY_US + 1000);
        let next = Agent::new();
        refused(
            f,
            &x509pop_request(&next, evidence(f, &node, &next), "node"),
            "t1",
            "x509pop:expired-beyond-grace",
        )
        .await;
        // Exactly seven days: admitted.
        after_expiry(f, &node, 7 * DAY_US);
        let next = Agent::new();
        let answer = f
            .svc
            .join(&x509pop_request(&next, evidence(f, &node, &next), "node"))
            .await
            .unwrap();
        assert_eq!(answer.node_id, node.node_id());
    })
    .await;
}

#[tokio::test]
async fn the_grace_period_is_configurable() {
    for db in TestDb::each().await.unwrap() {
        let base = fixture(db).await;
        let mut config = IdentityConfig::new(TrustDomain::new(TD).unwrap());
        config.x509pop_grace = std::time::Duration::from_secs(3600);
        let svc = JoinService::new(
            base.store.clone(),
            base.keys.clone(),
            Arc::new(base.clock.clone()),
            config,
        )
        .unwrap();
        let f = Fixture { svc, ..base };
        let node = joined(&f, "t1").await;
        after_expiry(&f, &node, 2 * 3_600_000_000);
        let next = Agent::new();
        refused(
            &f,
            &x509pop_request(&next, evidence(&f, &node, &next), "node"),
            "t1",
            "x509pop:expired-beyond-grace",
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_joins_with_one_proof_admit_exactly_one() {
    let db = TestDb::postgres().await.unwrap();
    let store = EventStore::Postgres(db.pg_store(70).await.unwrap());
    let f = Arc::new(fixture_on(db, store).await);
    let node = joined(&f, "t1").await;
    expire(&f, &node);
    let next = Agent::new();
    let request = Arc::new(x509pop_request(&next, evidence(&f, &node, &next), "node"));
    let barrier = Arc::new(tokio::sync::Barrier::new(50));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..50 {
        let (f, request, barrier) = (f.clone(), request.clone(), barrier.clone());
        tasks.spawn(async move {
            barrier.wait().await;
            f.svc.join(&request).await
        });
    }
    // One admission; the 49 others find the proof used by the join of this same request and
    // get its identity again (issue 40): one certificate for all fifty.
    let mut chains = Vec::new();
    while let Some(r) = tasks.join_next().await {
        match r.unwrap() {
            Ok(answer) => {
                assert_eq!(answer.node_id, node.node_id());
                chains.push(answer.certificate_chain);
            }
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    assert_eq!(chains.len(), 50);
    assert!(chains.iter().all(|c| *c == chains[0]));
    let detail = f.svc.show_node(node.node_id()).await.unwrap();
    assert_eq!(detail.node.identity_generation, 2, "re-keyed exactly once");
    assert_eq!(detail.certificates.len(), 2, "the join's and the re-join's");
    let refusals = join_refusals(&f).await;
    assert_eq!(
        refusals,
        vec![],
        "nothing refused, nothing appended for a replay"
    );
    let uses: Vec<events::schema::EvidenceUsed> = all_events(&f.store)
        .await
        .into_iter()
        .filter(|e| e.event_type == "attestation.evidence.used")
        .map(|e| e.decode().unwrap())
        .filter(|u: &events::schema::EvidenceUsed| u.attestor == "x509pop")
        .collect();
    assert_eq!(uses.len(), 1, "one use of the proof");
    assert_eq!(uses[0].node_id, node.node_id());
    assert_eq!(
        uses[0].expires_at_us,
        (i64::try_from(clock_ms(&f)).unwrap() + 120_000) * 1000,
        "remembered for the window and a minute more"
    );
}
