//! The admission step through the real JoinService (issue 18): every refusal of its own is
//! ACCESS_DENIED with its exact reason in the right tenant; an approval defers and spends nothing
//! until an operator approves; a claimed hardware key reclaims nothing.

use std::sync::Arc;

use commands::identity::{
    AttestorRegistry, CreatedToken, IdentityError, JoinOutcome, JoinRequest, JoinService, NewToken,
};
use commands::Clock;
use domain::attest::{
    ApprovalAsk, AttestRequest, AttestationResult, Attestor, AttestorRefusal, FactKey, Facts,
    NodeKeyStatement, Planned, Verdict,
};
use domain::identity::{sha256, JoinInput};
use domain::pki::{NodeRole, TokenSecret};
use events::schema::{
    JoinRequestApproved, JoinRequestCreated, JoinRequestRejected, JoinTokenCreated, PoolCreated,
};
use events::store::testkit::TestDb;
use events::store::ExpectedVersion;
use events::{new_event_id, EventPayload, NewEvent};

use crate::identity_support::*;

/// A custom attestor for the tests: admits into `pool` of tenant t9, with the given statement,
/// binding SHA-256 of the evidence when `bind`.
struct Custom {
    id: &'static str,
    pool: &'static str,
    node_key: NodeKeyStatement,
    bind: bool,
}

const NODE_ONLY: &[NodeRole] = &[NodeRole::Node];

impl Attestor for Custom {
    type Plan = ();
    fn id(&self) -> &str {
        self.id
    }
    fn roles(&self) -> &[NodeRole] {
        NODE_ONLY
    }
    fn plan(&self, request: &AttestRequest<'_>) -> Result<Planned<()>, AttestorRefusal> {
        Ok(Planned::new(
            if self.bind {
                vec![FactKey::Binding(sha256(request.evidence))]
            } else {
                Vec::new()
            },
            (),
        ))
    }
    fn verify(&self, request: &AttestRequest<'_>, _plan: &(), _facts: &Facts) -> Verdict {
        Verdict::Admit(Box::new(AttestationResult {
            tenant_id: "t9".into(),
            role: request.role,
            site_id: "site-1".into(),
            pool_id: self.pool.into(),
            reclaim_node_id: None,
            token: None,
            bind: if self.bind {
                vec![sha256(request.evidence)]
            } else {
                Vec::new()
            },
            single_use: Vec::new(),
            node_key: self.node_key.clone(),
            allowed_kinds: vec!["inventory.refresh".into()],
            approval: None::<ApprovalAsk>,
        }))
    }
}

fn with_customs(f: &Fixture) -> JoinService {
    let mut registry = AttestorRegistry::builtin();
    registry
        .register_in_process(Arc::new(Custom {
            id: "test-key",
            pool: "pool-9",
            node_key: NodeKeyStatement::Statement {
                label: "other".into(),
                uri: "urn:bc:other-key:1".into(),
            },
            bind: false,
        }))
        .register_in_process(Arc::new(Custom {
            id: "test-bind",
            pool: "pool-9",
            node_key: NodeKeyStatement::Unattested,
            bind: true,
        }))
        .register_in_process(Arc::new(Custom {
            id: "test-pooled",
            pool: "pool-owned",
            node_key: NodeKeyStatement::Unattested,
            bind: false,
        }));
    f.svc.clone().with_attestors(registry)
}

fn custom_request(attestor: &str, agent: &Agent, evidence: &[u8]) -> JoinRequest {
    JoinRequest {
        attestor: attestor.into(),
        input: JoinInput {
            csr_der: agent.csr.clone(),
            role: "node".into(),
            attestation: evidence.to_vec(),
            ..JoinInput::default()
        },
    }
}

async fn append<P: EventPayload>(f: &Fixture, stream: &str, tenant: &str, payload: &P) {
    let mut tx = commands::run::begin(&f.store).await.unwrap();
    let event = NewEvent::from_payload(new_event_id(), tenant, f.clock.now_us(), payload);
    commands::append_and_project(
        &mut tx,
        &projections::identity::all(),
        stream,
        ExpectedVersion::Any,
        &[event],
    )
    .await
    .unwrap();
    commands::run::commit(tx).await.unwrap();
}

/// Decides a pending join request as an operator would: the event on its stream (the
/// join_requests projection applies it).
async fn decide_request(f: &Fixture, created: &JoinRequestCreated, approve: bool) {
    let stream = format!("join-request/{}", created.request_id);
    if approve {
        let e = JoinRequestApproved {
            request_id: created.request_id.clone(),
            actor: "op".into(),
            reason: "ok".into(),
        };
        append(f, &stream, &created.tenant_id, &e).await;
    } else {
        let e = JoinRequestRejected {
            request_id: created.request_id.clone(),
            actor: "op".into(),
            reason: "no".into(),
        };
        append(f, &stream, &created.tenant_id, &e).await;
    }
}

fn count(all: &[events::RecordedEvent], event_type: &str) -> usize {
    all.iter().filter(|e| e.event_type == event_type).count()
}

/// Issue 18 item 9, the attack: a token holder claims another node's hardware key with a token
/// written before issue 18 with allow-reclaim. On the old code that reclaimed the victim (same
/// id, its certificates revoked); now the key has no power: a node of its own, the victim kept.
#[tokio::test]
async fn a_claimed_hardware_key_reclaims_no_other_node() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let victim_token = f.svc.create_token(&token_spec("t1")).await.unwrap();
        let hw = b"the victim's EK public area".to_vec();
        let victim = Agent::new();
        let claims = domain::identity::HardwareClaims {
            hardware_key: Some(hw.clone()),
            ..Default::default()
        };
        let joined = f
            .svc
            .join(&join_request(
                &f,
                &victim,
                &victim_token.secret,
                "node",
                claims.clone(),
            ))
            .await
            .unwrap();

        // An allow-reclaim token of the same tenant, site and pool, as old logs hold them.
        let secret = TokenSecret::generate().unwrap();
        let old = JoinTokenCreated {
            token_id: "tok_allowreclaim".into(),
            tenant_id: "t1".into(),
            site_id: "site-1".into(),
            pool_id: "pool-1".into(),
            role: "node".into(),
            uses: 5,
            expires_at_us: f.clock.now_us() + 3_600_000_000,
            secret_sha256: secret.hash().as_bytes().to_vec(),
            allow_reclaim: true,
            ..Default::default()
        };
        append(&f, "token/tok_allowreclaim", "t1", &old).await;

        let attacker = Agent::new();
        let answer = f
            .svc
            .join(&join_request(
                &f,
                &attacker,
                secret.expose(),
                "node",
                claims,
            ))
            .await
            .expect("the attacker's machine joins as a node of its own");
        assert_ne!(
            answer.node_id, joined.node_id,
            "the victim was not reclaimed"
        );
        assert_eq!(answer.identity_generation, 1);
        let detail = f.svc.show_node(&joined.node_id).await.unwrap();
        assert_eq!(detail.node.identity_generation, 1);
        assert_eq!(detail.node.status, "active");
        assert!(detail
            .certificates
            .iter()
            .all(|c| c.revoked_at_us.is_none()));
        let all = all_events(&f.store).await;
        assert_eq!(count(&all, "node.identity.revoked"), 0);
    }
}

#[tokio::test]
async fn each_admission_refusal_is_access_denied_with_its_reason_and_tenant() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let svc = with_customs(&f);

        // join:reclaim-inactive: the token's node was retired after the token was minted.
        let (_, victim) = join_new(&f, "t1").await;
        let reclaim = svc
            .create_token(&NewToken {
                uses: 1,
                reclaim_node_id: Some(victim.node_id.clone()),
                ..token_spec("t1")
            })
            .await
            .unwrap();
        svc.retire_node(&victim.node_id, "gone").await.unwrap();
        let agent = Agent::new();
        assert_join_denied(
            svc.join(&join_request(
                &f,
                &agent,
                &reclaim.secret,
                "node",
                Default::default(),
            ))
            .await,
        );
        assert_last_refusal(&f.store, "t1", "join:reclaim-inactive").await;
        let (_, event) = last_join_refusal(&f.store).await;
        assert_eq!(event.node_id, victim.node_id);
        assert_eq!(event.token_id, reclaim.token.token_id);
        // A token cannot be minted for a node that is not active, nor for more than one use.
        let refused = |r: Result<CreatedToken, IdentityError>| match r {
            Err(IdentityError::Admin(domain::identity::AdminRefusal::Invalid(m))) => m,
            other => panic!("expected INVALID_INPUT, got {other:?}"),
        };
        assert_eq!(
            refused(
                svc.create_token(&NewToken {
                    uses: 1,
                    reclaim_node_id: Some(victim.node_id.clone()),
                    ..token_spec("t1")
                })
                .await
            ),
            format!(
                "node {} is not active: only an active node can be reclaimed",
                victim.node_id
            )
        );
        assert_eq!(
            refused(
                svc.create_token(&NewToken {
                    uses: 2,
                    reclaim_node_id: Some(victim.node_id.clone()),
                    ..token_spec("t1")
                })
                .await
            ),
            format!(
                "a token that reclaims node {} is single use: uses must be 1, not 2",
                victim.node_id
            )
        );

        // join:node-key-statement: a statement the renewal path cannot prove.
        assert_join_denied(
            svc.join(&custom_request("test-key", &Agent::new(), b"k"))
                .await,
        );
        assert_last_refusal(&f.store, "t9", "join:node-key-statement").await;
        let (_, event) = last_join_refusal(&f.store).await;
        assert_eq!(event.attestor, "test-key");

        // join:bound-elsewhere: the first join binds the subject, a second machine proving it
        // is refused.
        let first = svc
            .join(&custom_request("test-bind", &Agent::new(), b"asset-42"))
            .await
            .expect("the first join binds");
        let all = all_events(&f.store).await;
        assert_eq!(count(&all, "node.bound"), 1);
        assert_join_denied(
            svc.join(&custom_request("test-bind", &Agent::new(), b"asset-42"))
                .await,
        );
        assert_last_refusal(&f.store, "t9", "join:bound-elsewhere").await;
        // Retiring the node drops its bindings: the subject admits again.
        svc.retire_node(&first.node_id, "gone").await.unwrap();
        svc.join(&custom_request("test-bind", &Agent::new(), b"asset-42"))
            .await
            .expect("a dropped binding binds again");

        // join:pool-attestor, in the pool owner's tenant.
        let pool = PoolCreated {
            pool_id: "pool-owned".into(),
            tenant_id: "owner".into(),
            description: String::new(),
            join_attestors: vec!["x509pop".into(), "join-token".into()],
        };
        append(&f, "pool/pool-owned", "owner", &pool).await;
        assert_join_denied(
            svc.join(&custom_request("test-pooled", &Agent::new(), b"p"))
                .await,
        );
        assert_last_refusal(&f.store, "owner", "join:pool-attestor").await;
        // A pool that lists the attestor admits it.
        let pooled = svc
            .create_token(&NewToken {
                pool_id: "pool-owned".into(),
                ..token_spec("t1")
            })
            .await
            .unwrap();
        svc.join(&join_request(
            &f,
            &Agent::new(),
            &pooled.secret,
            "node",
            Default::default(),
        ))
        .await
        .expect("join-token is listed");

        // The node records the attestor that admitted it.
        let node = svc.show_node(&first.node_id).await.unwrap();
        assert_eq!(node.node.attestor, "test-bind");
    }
}

#[tokio::test]
async fn an_approval_defers_spends_nothing_and_joins_once_approved() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let token = f
            .svc
            .create_token(&NewToken {
                require_approval: true,
                ..token_spec("t1")
            })
            .await
            .unwrap();
        let agent = Agent::new();
        let request = join_request(&f, &agent, &token.secret, "node", Default::default());

        let JoinOutcome::Pending {
            request_id,
            retry_after_seconds,
            csr_sha256,
            ..
        } = f.svc.attest(&request).await.unwrap()
        else {
            panic!("a join waiting for approval is pending")
        };
        assert_eq!(csr_sha256, agent.csr_sha256());
        assert_eq!(retry_after_seconds, 30);
        // Nothing spent: no node, no use of the token, no evidence used.
        let all = all_events(&f.store).await;
        assert_eq!(count(&all, "node.joined"), 0);
        assert_eq!(count(&all, "token.used"), 0);
        assert_eq!(count(&all, "attestation.evidence.used"), 0);
        let created: JoinRequestCreated = all
            .iter()
            .find(|e| e.event_type == "join_request.created")
            .expect("join_request.created")
            .decode()
            .unwrap();
        assert_eq!(created.request_id, request_id);
        assert_eq!(created.tenant_id, "t1");
        assert_eq!(created.token_id, token.token.token_id);
        assert_eq!(created.subject, agent.csr_sha256().to_vec());
        let listed = f.svc.list_tokens(Some("t1")).await.unwrap();
        assert_eq!(listed[0].uses_left, 5);
        // Retried while pending: the same request, nothing new written.
        let JoinOutcome::Pending {
            request_id: again, ..
        } = f.svc.attest(&request).await.unwrap()
        else {
            panic!("still pending")
        };
        assert_eq!(again, request_id);
        let all = all_events(&f.store).await;
        assert_eq!(count(&all, "join_request.created"), 1);
        // `join` (no deferral path) says so.
        assert!(matches!(
            f.svc.join(&request).await,
            Err(commands::identity::IdentityError::Deferred(_))
        ));

        decide_request(&f, &created, true).await;
        let JoinOutcome::Joined(answer) = f.svc.attest(&request).await.unwrap() else {
            panic!("an approved join joins")
        };
        let all = all_events(&f.store).await;
        assert_eq!(count(&all, "node.joined"), 1);
        assert_eq!(count(&all, "join_request.consumed"), 1);
        let consumed: events::schema::JoinRequestConsumed = all
            .iter()
            .find(|e| e.event_type == "join_request.consumed")
            .unwrap()
            .decode()
            .unwrap();
        assert_eq!(consumed.node_id, answer.node_id);
        // The same request again (its answer lost): the identity already issued, the consumed
        // request and the key's use untouched, nothing appended (issue 40).
        let before = all_events(&f.store).await.len();
        let again = f.svc.join(&request).await.expect("answered again");
        assert_eq!(
            (again.node_id.as_str(), &again.certificate_chain),
            (answer.node_id.as_str(), &answer.certificate_chain)
        );
        assert_eq!(all_events(&f.store).await.len(), before);
        // The same key in another CSR: its key joined already.
        let same_key = domain::pki::PrivateKey::from_pkcs8_der(
            domain::pki::KeyRole::Node,
            agent.key.pkcs8_der(),
        )
        .unwrap();
        let other_csr = Agent {
            csr: domain::pki::build_csr(&same_key).unwrap(),
            key: same_key,
        };
        let replay = join_request(&f, &other_csr, &token.secret, "node", Default::default());
        assert_join_denied(f.svc.join(&replay).await);
        assert_last_refusal(&f.store, "t1", "join-token:csr-key-used").await;

        // Rejected: retries are refused.
        let other = Agent::new();
        let request = join_request(&f, &other, &token.secret, "node", Default::default());
        assert!(matches!(
            f.svc.attest(&request).await.unwrap(),
            JoinOutcome::Pending { .. }
        ));
        let all = all_events(&f.store).await;
        let created: JoinRequestCreated = all
            .iter()
            .rev()
            .find(|e| e.event_type == "join_request.created")
            .unwrap()
            .decode()
            .unwrap();
        decide_request(&f, &created, false).await;
        assert_join_denied(f.svc.join(&request).await);
        assert_last_refusal(&f.store, "t1", "join:request-rejected").await;
    }
}
