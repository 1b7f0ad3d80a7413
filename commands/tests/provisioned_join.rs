//! The `provisioned` attestor through the real JoinService, on both backends: one test per
//! refusal reason (ACCESS_DENIED "Join refused", the exact `provisioned:<reason>` of the
//! `security.join.refused` event, in the right tenant), the token creation rules, a token minted
//! for a node re-keying that node in place (same id, generation + 1, older certificates
//! revoked) and refusing a second time; and (Postgres) 50 joins at once with one token, exactly
//! one admitted.

use crate::identity_support;

use std::sync::Arc;

use commands::append_and_project;
use commands::identity::{CreatedToken, IdentityError, JoinAnswer, JoinRequest, NewToken};
use domain::identity::{ExpectBinding, HardwareClaims, IdentityEvent, TokenRole};
use domain::pki::TokenSecret;
use events::store::testkit::TestDb;
use events::store::{EventStore, ExpectedVersion, LogStore, LogTx};
use identity_support::*;

const UUID: &str = "4c4c4544-0042-3510-8052-b4c04f4e3332";
const OTHER_UUID: &str = "00000000-0000-4000-8000-000000000001";
const TENANT: &str = "t1";

fn claims(uuid: Option<&str>) -> HardwareClaims {
    HardwareClaims {
        product_uuid: uuid.map(str::to_owned),
        macs: vec!["52:54:00:12:34:56".into()],
        hardware_key: None,
    }
}

fn provisioned_spec() -> NewToken {
    NewToken {
        role: TokenRole::Provisioned,
        uses: 1,
        ..token_spec(TENANT)
    }
}

/// A `provisioned` join of `agent` with `secret`, claiming `uuid`.
fn provisioned_request(
    f: &Fixture,
    agent: &Agent,
    secret: &str,
    role: &str,
    uuid: Option<&str>,
) -> JoinRequest {
    let mut req = join_request(f, agent, secret, role, claims(uuid));
    req.attestor = "provisioned".into();
    req
}

async fn join(f: &Fixture, req: &JoinRequest) -> Result<JoinAnswer, IdentityError> {
    f.svc.join(req).await
}

/// A node joined with a join-token claiming `UUID`: the provisioned token's target.
async fn target_node(f: &Fixture) -> (Agent, JoinAnswer) {
    let created = f.svc.create_token(&token_spec(TENANT)).await.unwrap();
    let agent = Agent::new();
    let req = join_request(f, &agent, &created.secret, "node", claims(Some(UUID)));
    let answer = join(f, &req).await.expect("the target joins");
    (agent, answer)
}

fn for_node(spec: NewToken, node: &str) -> NewToken {
    NewToken {
        for_node_id: Some(node.into()),
        ..spec
    }
}

async fn token_for(f: &Fixture, node: &str) -> CreatedToken {
    f.svc
        .create_token(&for_node(provisioned_spec(), node))
        .await
        .expect("provisioned token")
}

async fn token_expecting(f: &Fixture, uuid: &str) -> CreatedToken {
    f.svc
        .create_token(&NewToken {
            expect: ExpectBinding {
                product_uuid: Some(uuid.into()),
                mac: None,
            },
            ..provisioned_spec()
        })
        .await
        .expect("provisioned token")
}

async fn refused_as(f: &Fixture, req: &JoinRequest, tenant: &str, reason: &str) {
    assert_join_denied(join(f, req).await);
    assert_last_refusal(&f.store, tenant, reason).await;
}

/// Writes a `token.created` the operator commands would refuse (an older writer's, or one made
/// by hand): what the attestor itself refuses when it meets one.
async fn raw_token(store: &EventStore, token_id: &str, uses: u32, for_node: &str) -> String {
    let secret = TokenSecret::generate().unwrap();
    let event = IdentityEvent::TokenCreated(events::schema::JoinTokenCreated {
        token_id: token_id.into(),
        tenant_id: TENANT.into(),
        site_id: "site-1".into(),
        pool_id: "pool-1".into(),
        role: "provisioned".into(),
        uses,
        expires_at_us: 4_000_000_000_000_000,
        secret_sha256: secret.hash().as_bytes().to_vec(),
        for_node_id: for_node.into(),
        ..Default::default()
    });
    let mut tx = store.begin().await.unwrap();
    append_and_project(
        &mut tx,
        &projections::identity::all(),
        &event.stream(),
        ExpectedVersion::NoStream,
        &[event.to_new_event(events::new_event_id(), TENANT, 1_800_000_000_000_000)],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    secret.expose().to_owned()
}

async fn each(test: impl AsyncFn(Fixture)) {
    for db in TestDb::each().await.unwrap() {
        test(fixture(db).await).await;
    }
}

#[tokio::test]
async fn a_token_for_a_node_rekeys_it_once() {
    each(async |f: Fixture| {
        let (_, first) = target_node(&f).await;
        let node = first.node_id.clone();
        let before = f.svc.show_node(&node).await.unwrap();
        assert_eq!(before.node.identity_generation, 1);
        let created = token_for(&f, &node).await;
        assert_eq!(created.token.role, "provisioned");

        // A second machine directory: a new key, the same product UUID (upper case: compared
        // as the digest of the lower-cased claim).
        let agent = Agent::new();
        let upper = UUID.to_ascii_uppercase();
        let req = provisioned_request(&f, &agent, &created.secret, "node", Some(&upper));
        let answer = join(&f, &req).await.expect("the provisioned join");
        assert_eq!(answer.node_id, node, "re-keyed in place");
        assert_eq!(answer.identity_generation, 2);
        assert_eq!(answer.csr_sha256, agent.csr_sha256());

        let after = f.svc.show_node(&node).await.unwrap();
        assert_eq!(after.node.identity_generation, 2);
        assert_eq!(after.node.attestor, "provisioned");
        assert_eq!(after.node.status, "active");
        assert_eq!(f.svc.list_nodes(None).await.unwrap().len(), 1);
        for cert in &after.certificates {
            if cert.identity_generation == 1 {
                assert!(
                    cert.revoked_at_us.is_some(),
                    "old certificate revoked: {cert:?}"
                );
            } else {
                assert_eq!(cert.revoked_at_us, None, "{cert:?}");
            }
        }
        assert_eq!(
            after
                .certificates
                .iter()
                .filter(|c| c.identity_generation == 2)
                .count(),
            1
        );
        let token = &f.svc.list_tokens(Some(TENANT)).await.unwrap();
        let token = token
            .iter()
            .find(|t| t.token_id == created.token.token_id)
            .unwrap();
        assert_eq!(token.uses_left, 0);

        // The same token a second time, from a third machine: refused, spending nothing.
        let again = provisioned_request(&f, &Agent::new(), &created.secret, "node", Some(UUID));
        refused_as(&f, &again, TENANT, "provisioned:not-single-use").await;
        // The same request replayed (its answer lost): the identity it was issued, nothing
        // re-keyed again (issue 40); the same key in another CSR: its CSR key was used.
        let replayed = join(&f, &req).await.expect("answered again");
        assert_eq!(
            (replayed.identity_generation, &replayed.certificate_chain),
            (2, &answer.certificate_chain)
        );
        let same_key = domain::pki::PrivateKey::from_pkcs8_der(
            domain::pki::KeyRole::Node,
            agent.key.pkcs8_der(),
        )
        .unwrap();
        let other_csr = Agent {
            csr: domain::pki::build_csr(&same_key).unwrap(),
            key: same_key,
        };
        let replay = provisioned_request(&f, &other_csr, &created.secret, "node", Some(&upper));
        refused_as(&f, &replay, TENANT, "provisioned:csr-key-used").await;
        assert_eq!(
            f.svc
                .show_node(&node)
                .await
                .unwrap()
                .node
                .identity_generation,
            2
        );
    })
    .await;
}

#[tokio::test]
async fn a_token_expecting_a_uuid_makes_a_new_node() {
    each(async |f: Fixture| {
        let created = token_expecting(&f, &UUID.to_ascii_uppercase()).await;
        let agent = Agent::new();
        let req = provisioned_request(&f, &agent, &created.secret, "node", Some(UUID));
        let answer = join(&f, &req).await.expect("joins");
        assert_eq!(answer.identity_generation, 1);
        let node = f.svc.show_node(&answer.node_id).await.unwrap();
        assert_eq!(node.node.attestor, "provisioned");
        assert_eq!(node.node.tenant_id, TENANT);
        let again = provisioned_request(&f, &Agent::new(), &created.secret, "node", Some(UUID));
        refused_as(&f, &again, TENANT, "provisioned:not-single-use").await;
    })
    .await;
}

#[tokio::test]
async fn token_does_not_open_and_unknown_token() {
    each(async |f: Fixture| {
        let created = token_expecting(&f, UUID).await;
        // No sealed token at all.
        let mut req = provisioned_request(&f, &Agent::new(), &created.secret, "node", Some(UUID));
        req.input.sealed_token.clear();
        refused_as(&f, &req, "root", "provisioned:token-does-not-open").await;
        // A sealed token bound to another CSR does not open for this one.
        let other = provisioned_request(&f, &Agent::new(), &created.secret, "node", Some(UUID));
        let mut req = provisioned_request(&f, &Agent::new(), &created.secret, "node", Some(UUID));
        req.input.sealed_token = other.input.sealed_token;
        refused_as(&f, &req, "root", "provisioned:token-does-not-open").await;
        // A secret no token has.
        let stranger = TokenSecret::generate().unwrap();
        let req = provisioned_request(&f, &Agent::new(), stranger.expose(), "node", Some(UUID));
        refused_as(&f, &req, "root", "provisioned:unknown-token").await;
    })
    .await;
}

#[tokio::test]
async fn revoked_and_expired() {
    each(async |f: Fixture| {
        let created = token_expecting(&f, UUID).await;
        f.svc
            .revoke_token(&created.token.token_id, "test")
            .await
            .unwrap();
        let req = provisioned_request(&f, &Agent::new(), &created.secret, "node", Some(UUID));
        refused_as(&f, &req, TENANT, "provisioned:revoked").await;

        let created = token_expecting(&f, UUID).await;
        f.clock.advance_us(3_601_000_000);
        let req = provisioned_request(&f, &Agent::new(), &created.secret, "node", Some(UUID));
        refused_as(&f, &req, TENANT, "provisioned:expired").await;
    })
    .await;
}

#[tokio::test]
async fn wrong_token_role_and_wrong_role() {
    each(async |f: Fixture| {
        // A node token through the provisioned attestor.
        let node_token = f.svc.create_token(&token_spec(TENANT)).await.unwrap();
        let req = provisioned_request(&f, &Agent::new(), &node_token.secret, "node", Some(UUID));
        refused_as(&f, &req, TENANT, "provisioned:wrong-token-role").await;
        // A role the attestor does not list.
        let created = token_expecting(&f, UUID).await;
        let req = provisioned_request(&f, &Agent::new(), &created.secret, "site", Some(UUID));
        refused_as(&f, &req, "root", "provisioned:wrong-role").await;
        // A provisioned token through join-token.
        let req = join_request(
            &f,
            &Agent::new(),
            &created.secret,
            "node",
            claims(Some(UUID)),
        );
        refused_as(&f, &req, TENANT, "join-token:wrong-role").await;
        // None of them spent it: it still admits its machine.
        let req = provisioned_request(&f, &Agent::new(), &created.secret, "node", Some(UUID));
        join(&f, &req).await.expect("joins");
    })
    .await;
}

#[tokio::test]
async fn not_single_use_and_unbound() {
    each(async |f: Fixture| {
        let (_, target) = target_node(&f).await;
        let secret = raw_token(&f.store, "tok_two_uses", 2, &target.node_id).await;
        let req = provisioned_request(&f, &Agent::new(), &secret, "node", Some(UUID));
        refused_as(&f, &req, TENANT, "provisioned:not-single-use").await;
        let secret = raw_token(&f.store, "tok_unbound", 1, "").await;
        let req = provisioned_request(&f, &Agent::new(), &secret, "node", Some(UUID));
        refused_as(&f, &req, TENANT, "provisioned:unbound").await;
    })
    .await;
}

#[tokio::test]
async fn no_product_uuid_and_mismatches() {
    each(async |f: Fixture| {
        let (_, target) = target_node(&f).await;
        let created = token_for(&f, &target.node_id).await;
        let req = provisioned_request(&f, &Agent::new(), &created.secret, "node", None);
        refused_as(&f, &req, TENANT, "provisioned:no-product-uuid").await;
        // Another machine than the node the token was minted for.
        let req = provisioned_request(&f, &Agent::new(), &created.secret, "node", Some(OTHER_UUID));
        refused_as(&f, &req, TENANT, "provisioned:product-uuid-mismatch").await;
        let (_, refusal) = last_join_refusal(&f.store).await;
        assert_eq!(refusal.node_id, target.node_id);
        // Another machine than the one the token expects.
        let created = token_expecting(&f, UUID).await;
        let req = provisioned_request(&f, &Agent::new(), &created.secret, "node", Some(OTHER_UUID));
        refused_as(&f, &req, TENANT, "provisioned:product-uuid-mismatch").await;
        assert_eq!(
            f.svc
                .show_node(&target.node_id)
                .await
                .unwrap()
                .node
                .identity_generation,
            1
        );
    })
    .await;
}

#[tokio::test]
async fn unknown_target() {
    each(async |f: Fixture| {
        let (_, retired) = target_node(&f).await;
        let created = token_for(&f, &retired.node_id).await;
        f.svc.retire_node(&retired.node_id, "test").await.unwrap();
        let req = provisioned_request(&f, &Agent::new(), &created.secret, "node", Some(UUID));
        refused_as(&f, &req, TENANT, "provisioned:unknown-target").await;

        let (_, deleted) = target_node(&f).await;
        let created = token_for(&f, &deleted.node_id).await;
        f.svc.delete_node(&deleted.node_id, "test").await.unwrap();
        let req = provisioned_request(&f, &Agent::new(), &created.secret, "node", Some(UUID));
        refused_as(&f, &req, TENANT, "provisioned:unknown-target").await;
        let (_, refusal) = last_join_refusal(&f.store).await;
        assert_eq!(refusal.node_id, deleted.node_id);
    })
    .await;
}

fn invalid(r: Result<CreatedToken, IdentityError>, needle: &str) {
    match r {
        Err(e) => {
            let text = e.to_string();
            assert!(text.starts_with("INVALID_INPUT: "), "{text}");
            assert!(text.contains(needle), "{text} should say {needle:?}");
        }
        Ok(t) => panic!("created {t:?}, expected INVALID_INPUT ({needle})"),
    }
}

#[tokio::test]
async fn token_creation_rules() {
    each(async |f: Fixture| {
        let (_, target) = target_node(&f).await;
        let node = target.node_id.as_str();
        let svc = &f.svc;
        let spec = provisioned_spec();
        invalid(
            svc.create_token(&for_node(
                NewToken {
                    uses: 2,
                    ..spec.clone()
                },
                node,
            ))
            .await,
            "uses must be 1",
        );
        invalid(
            svc.create_token(&spec).await,
            "--for-node NODE or --expect-product-uuid",
        );
        invalid(
            svc.create_token(&for_node(spec.clone(), "node_nobody"))
                .await,
            "no such node",
        );
        invalid(
            svc.create_token(&for_node(
                NewToken {
                    tenant_id: "t2".into(),
                    ..spec.clone()
                },
                node,
            ))
            .await,
            "another tenant",
        );
        invalid(
            svc.create_token(&for_node(
                NewToken {
                    pool_id: "pool-2".into(),
                    ..spec.clone()
                },
                node,
            ))
            .await,
            "--site site-1 --pool pool-1",
        );
        invalid(
            svc.create_token(&for_node(token_spec(TENANT), node)).await,
            "role provisioned only",
        );
        invalid(
            svc.create_token(&NewToken {
                reclaim_node_id: Some(node.into()),
                ..for_node(spec.clone(), node)
            })
            .await,
            "not --reclaim",
        );
        // A node that recorded no product UUID needs the token's expected one.
        let plain = f.svc.create_token(&token_spec(TENANT)).await.unwrap();
        let req = join_request(&f, &Agent::new(), &plain.secret, "node", claims(None));
        let bare = join(&f, &req).await.unwrap();
        invalid(
            svc.create_token(&for_node(spec.clone(), &bare.node_id))
                .await,
            "recorded no product UUID",
        );
        let expecting = NewToken {
            expect: ExpectBinding {
                product_uuid: Some(UUID.into()),
                mac: None,
            },
            ..spec.clone()
        };
        svc.create_token(&for_node(expecting, &bare.node_id))
            .await
            .expect("bound by the expected UUID");
        svc.retire_node(node, "test").await.unwrap();
        invalid(
            svc.create_token(&for_node(spec.clone(), node)).await,
            "retired",
        );
    })
    .await;
}

/// (Postgres) 50 machines join at once with one provisioned token minted for one node: exactly
/// one re-keys it; the token is spent once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_joins_one_provisioned_token() {
    let db = TestDb::postgres().await.unwrap();
    let store = EventStore::Postgres(db.pg_store(70).await.unwrap());
    let f = Arc::new(fixture_on(db, store).await);
    let (_, target) = target_node(&f).await;
    let created = token_for(&f, &target.node_id).await;
    let requests: Vec<JoinRequest> = (0..50)
        .map(|_| provisioned_request(&f, &Agent::new(), &created.secret, "node", Some(UUID)))
        .collect();
    let barrier = Arc::new(tokio::sync::Barrier::new(requests.len()));
    let mut tasks = tokio::task::JoinSet::new();
    for req in requests {
        let f = f.clone();
        let barrier = barrier.clone();
        tasks.spawn(async move {
            barrier.wait().await;
            join(&f, &req).await
        });
    }
    let (mut admitted, mut denied) = (Vec::new(), 0);
    while let Some(r) = tasks.join_next().await {
        match r.unwrap() {
            Ok(answer) => admitted.push(answer),
            Err(IdentityError::AccessDenied(_)) => denied += 1,
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    assert_eq!((admitted.len(), denied), (1, 49));
    assert_eq!(admitted[0].node_id, target.node_id);
    assert_eq!(admitted[0].identity_generation, 2);
    assert_eq!(f.svc.list_nodes(None).await.unwrap().len(), 1);
    let node = f.svc.show_node(&target.node_id).await.unwrap();
    assert_eq!(node.node.identity_generation, 2);
    let live: Vec<_> = node
        .certificates
        .iter()
        .filter(|c| c.revoked_at_us.is_none())
        .collect();
    assert_eq!(
        live.len(),
        1,
        "one live certificate: {:?}",
        node.certificates
    );
    let events = all_events(&f.store).await;
    let count = |t: &str| events.iter().filter(|e| e.event_type == t).count();
    // The target's own join, then the one provisioned join.
    assert_eq!(count("token.used"), 2);
    assert_eq!(count("node.identity.revoked"), 1);
    let refused = refusals(&f.store).await;
    assert!(!refused.is_empty());
    assert!(
        refused
            .iter()
            .all(|(t, r)| t == TENANT && r == "provisioned:not-single-use"),
        "{refused:?}"
    );
}
