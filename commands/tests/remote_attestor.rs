//! An out-of-process attestor's answers held to what the built-ins are held to (issue 40 item
//! 9), through the real JoinService on both backends: a remote attestor here answers a scripted
//! verdict, as `gateway::join::external_attestor` hands one over after its own format checks.
//!
//! - a single-use subject whose expiry is not after the join's time (or more than
//!   `MAX_REMOTE_USE_LIFE` after it) is an invalid answer: nothing spent, no node, and so no
//!   second admission of the same evidence once maintenance pruned the record;
//! - a challenge whose deadline is not after the join's time (or too far after it) is an
//!   invalid answer, never passed on to the agent;
//! - the tenants `deployment` and the root tenant are refused `join:reserved-tenant`, a tenant
//!   without a site or a pool `join:unknown-tenant`, both recorded in the root tenant.

use std::sync::{Arc, Mutex};

use commands::attest::{NewPool, Pools, BUILTIN_ATTESTORS};
use commands::identity::attestors::{
    RemoteAttestor, RemoteAttestorError, RemoteVerdict, RemoteVerifyRequest,
};
use commands::identity::{AttestorRegistry, IdentityError, JoinOutcome, JoinRequest, JoinService};
use commands::site::{NewSite, Sites};
use commands::Clock;
use domain::attest::{
    AttestationResult, AttestorPolicy, Challenge, NodeKeyStatement, SingleUse, Verdict,
};
use domain::identity::JoinInput;
use domain::pki::NodeRole;
use events::store::testkit::TestDb;

use crate::identity_support::*;

const ID: &str = "py-remote";
const NODE_ONLY: &[NodeRole] = &[NodeRole::Node];
const SECOND_US: i64 = 1_000_000;
const DAY_US: i64 = 24 * 3600 * SECOND_US;

/// A remote attestor that answers whatever the test last put in it.
struct Scripted(Mutex<Verdict>);

impl Scripted {
    fn answer(&self, verdict: Verdict) {
        *self.0.lock().unwrap() = verdict;
    }
}

impl RemoteAttestor for Scripted {
    fn id(&self) -> &str {
        ID
    }
    fn roles(&self) -> &[NodeRole] {
        NODE_ONLY
    }
    fn verify<'a>(&'a self, _request: &'a RemoteVerifyRequest) -> RemoteVerdict<'a> {
        let verdict = self.0.lock().unwrap().clone();
        Box::pin(async move { Ok(verdict) })
    }
}

fn admit(tenant: &str, single_use: Vec<SingleUse>) -> Verdict {
    Verdict::Admit(Box::new(AttestationResult {
        tenant_id: tenant.into(),
        role: NodeRole::Node,
        site_id: "site-7".into(),
        pool_id: "racks".into(),
        reclaim_node_id: None,
        token: None,
        bind: Vec::new(),
        single_use,
        node_key: NodeKeyStatement::Unattested,
        allowed_kinds: Vec::new(),
        approval: None,
    }))
}

fn once(subject: u8, expires_at_us: Option<i64>) -> Vec<SingleUse> {
    vec![SingleUse {
        attestor: ID.into(),
        subject: [subject; 32],
        expires_at_us,
        reason_if_used: "reused".into(),
    }]
}

/// The fixture's JoinService with the scripted remote attestor, and tenant `acme` known (a pool
/// an operator created in it).
async fn setup(f: &Fixture) -> (JoinService, Arc<Scripted>) {
    let remote = Arc::new(Scripted(Mutex::new(admit("acme", Vec::new()))));
    let mut registry = AttestorRegistry::builtin();
    registry.register_remote(remote.clone());
    let mut known: Vec<String> = BUILTIN_ATTESTORS.iter().map(|s| s.to_string()).collect();
    known.push(ID.into());
    Pools::new(f.store.clone(), Arc::new(f.clock.clone()), known)
        .create(&NewPool {
            pool_id: "racks".into(),
            tenant_id: "acme".into(),
            description: String::new(),
            join_attestors: AttestorPolicy::Any,
        })
        .await
        .unwrap();
    (f.svc.clone().with_attestors(registry), remote)
}

fn request(agent: &Agent) -> JoinRequest {
    JoinRequest {
        attestor: ID.into(),
        input: JoinInput {
            csr_der: agent.csr.clone(),
            role: "node".into(),
            attestation: b"the same evidence".to_vec(),
            ..JoinInput::default()
        },
    }
}

/// The join fails as an invalid answer whose text contains `why` (UNAVAILABLE at the edge).
fn assert_invalid<T: std::fmt::Debug>(r: Result<T, IdentityError>, why: &str) {
    match r {
        Err(IdentityError::AttestorUnavailable(RemoteAttestorError::InvalidAnswer {
            attestor,
            why: got,
        })) => {
            assert_eq!(attestor, ID);
            assert!(got.contains(why), "{got:?} does not say {why:?}");
        }
        other => panic!("expected an invalid answer ({why}), got {other:?}"),
    }
}

async fn count(f: &Fixture, event_type: &str) -> usize {
    all_events(&f.store)
        .await
        .iter()
        .filter(|e| e.event_type == event_type)
        .count()
}

/// The attack: an attestor that names a single-use record already expired. The first join was
/// admitted, maintenance pruned the record, and the same evidence admitted a second node.
#[tokio::test]
async fn a_single_use_record_already_expired_admits_nothing_not_even_after_a_prune() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let (svc, remote) = setup(&f).await;
        let now_us = f.clock.now_us();
        for expires in [now_us - SECOND_US, now_us] {
            remote.answer(admit("acme", once(9, Some(expires))));
            assert_invalid(
                svc.join(&request(&Agent::new())).await,
                "is not after the join's time",
            );
            svc.maintenance().prune_all_expired(100).await.unwrap();
            assert_invalid(
                svc.join(&request(&Agent::new())).await,
                "is not after the join's time",
            );
        }
        assert_eq!(count(&f, "node.joined").await, 0);
        assert_eq!(count(&f, "attestation.evidence.used").await, 0);
        assert!(refusals(&f.store).await.is_empty());

        // Past the longest life a record may ask for: invalid too (0 keeps it for good).
        let too_far = now_us + 366 * DAY_US + SECOND_US;
        remote.answer(admit("acme", once(9, Some(too_far))));
        assert_invalid(svc.join(&request(&Agent::new())).await, "at most 366 days");

        // In the future, or kept for good: admitted once, and the evidence is spent.
        remote.answer(admit("acme", once(9, Some(now_us + SECOND_US))));
        svc.join(&request(&Agent::new())).await.unwrap();
        remote.answer(admit("acme", once(8, None)));
        svc.join(&request(&Agent::new())).await.unwrap();
        remote.answer(admit("acme", once(8, None)));
        assert_join_denied(svc.join(&request(&Agent::new())).await);
        assert_last_refusal(&f.store, "acme", "py-remote:reused").await;
        assert_eq!(count(&f, "node.joined").await, 2);
    }
}

#[tokio::test]
async fn a_challenge_past_its_deadline_or_too_far_is_not_passed_on() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let (svc, remote) = setup(&f).await;
        let now_us = f.clock.now_us();
        let challenge = |not_after_us| {
            Verdict::Challenge(Challenge {
                payload: b"nonce".to_vec(),
                not_after_us,
            })
        };
        for (deadline, why) in [
            (now_us - SECOND_US, "is not after the join's time"),
            (now_us, "is not after the join's time"),
            (now_us + DAY_US, "at most 15 minutes"),
        ] {
            remote.answer(challenge(deadline));
            assert_invalid(svc.attest(&request(&Agent::new())).await, why);
        }
        remote.answer(challenge(now_us + 60 * SECOND_US));
        match svc.attest(&request(&Agent::new())).await.unwrap() {
            JoinOutcome::Challenge { not_after_us, .. } => {
                assert_eq!(not_after_us, now_us + 60 * SECOND_US)
            }
            other => panic!("expected a challenge, got {other:?}"),
        }
        assert!(all_events(&f.store)
            .await
            .iter()
            .all(|e| e.event_type == "pool.created"));
    }
}

#[tokio::test]
async fn reserved_tenants_and_tenants_nobody_created_are_refused_in_the_root_tenant() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let (svc, remote) = setup(&f).await;
        for (tenant, reason) in [
            ("deployment", "join:reserved-tenant"),
            ("root", "join:reserved-tenant"),
            ("nobody", "join:unknown-tenant"),
        ] {
            remote.answer(admit(tenant, Vec::new()));
            assert_join_denied(svc.join(&request(&Agent::new())).await);
            assert_last_refusal(&f.store, "root", reason).await;
        }
        assert_eq!(count(&f, "node.joined").await, 0);
        let tenants: Vec<String> = all_events(&f.store)
            .await
            .iter()
            .map(|e| e.tenant_id.clone())
            .collect();
        assert!(
            tenants.iter().all(|t| t == "acme" || t == "root"),
            "{tenants:?}"
        );

        // A tenant becomes known when an operator creates a site (or a pool) in it.
        Sites::new(f.store.clone(), Arc::new(f.clock.clone()))
            .create(&NewSite {
                site_id: "site-7".into(),
                tenant_id: "nobody".into(),
                description: String::new(),
                default_pool_id: None,
                actor: "alice".into(),
            })
            .await
            .unwrap();
        remote.answer(admit("nobody", Vec::new()));
        let joined = svc.join(&request(&Agent::new())).await.unwrap();
        assert_eq!(joined.site_id, "site-7");
        remote.answer(admit("acme", Vec::new()));
        svc.join(&request(&Agent::new())).await.unwrap();
        assert_eq!(count(&f, "node.joined").await, 2);
    }
}
