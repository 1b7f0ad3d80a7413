//! A join answered once is answered again (issue 40, item 1), through the real JoinService on
//! both backends. The answer of an admitted join may be lost on the way back (a connection cut,
//! a gateway restarted after the commit); the machine then sends the same request again: the
//! same token or evidence, the same CSR. Its single-use evidence is spent, but by the join of
//! this very CSR, so the request gets the identity already issued (the same node, the same
//! certificate, signed again by the edge) and nothing new is appended. Another CSR stays refused
//! with the reason it always had. One test per attestor (join-token, x509pop, provisioned,
//! discovery), and one per reason an earlier join is not answered again.

use crate::identity_support::*;
use crate::site_support::{boot_token_by, lease_by, SiteCaller};
use crate::x509pop_support::{evidence, expire, joined, x509pop_request};

use commands::identity::{JoinAnswer, JoinRequest, NewToken};
use commands::site::{
    BootEntries, LeaseAction, NewBootEntry, NewSite, SiteAgent, SiteSettings, Sites,
};
use commands::Clock;
use domain::attest::discovery::{DiscoveryAssertion, SignedDiscoveryAssertion};
use domain::identity::{ExpectBinding, HardwareClaims, JoinInput, TokenRole};
use domain::pki::{build_csr, seal_token, KeyRole, PrivateKey, TokenSecret, TrustDomain};
use events::store::testkit::TestDb;
use std::sync::Arc;
use std::time::Duration;

const UUID: &str = "4c4c4544-0042-3510-8052-b4c04f4e3332";
const MAC: &str = "52:54:00:aa:bb:01";

/// The answer's identity: everything but the decision's time, which is this round's.
fn identity(a: &JoinAnswer) -> JoinAnswer {
    JoinAnswer {
        server_time_us: 0,
        ..a.clone()
    }
}

/// The number of events in the log.
async fn log_len(f: &Fixture) -> usize {
    all_events(&f.store).await.len()
}

/// `request` sent again after `first` admitted it: the same identity, nothing appended.
async fn answered_again(f: &Fixture, request: &JoinRequest, first: &JoinAnswer) {
    let before = log_len(f).await;
    let again = match f.svc.join(request).await {
        Ok(answer) => answer,
        Err(e) => panic!(
            "the same request again: {e}: {:?}",
            refusals(&f.store).await
        ),
    };
    assert_eq!(
        identity(&again),
        identity(first),
        "the identity already issued"
    );
    assert_eq!(log_len(f).await, before, "nothing appended");
}

/// `request` is refused `reason` in `tenant`.
async fn refused(f: &Fixture, request: &JoinRequest, tenant: &str, reason: &str) {
    assert_join_denied(f.svc.join(request).await);
    assert_last_refusal(&f.store, tenant, reason).await;
}

/// The same key as `agent`'s in a new CSR (other bytes, another SHA-256).
fn same_key_new_csr(agent: &Agent) -> Agent {
    let key = PrivateKey::from_pkcs8_der(KeyRole::Node, agent.key.pkcs8_der()).unwrap();
    let again = Agent {
        csr: build_csr(&key).unwrap(),
        key,
    };
    assert_ne!(again.csr, agent.csr);
    again
}

fn count(events: &[events::RecordedEvent], event_type: &str) -> usize {
    events.iter().filter(|e| e.event_type == event_type).count()
}

#[tokio::test]
async fn a_token_join_asked_again_gets_the_same_identity() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let token = f
            .svc
            .create_token(&NewToken {
                uses: 1,
                ..token_spec("t1")
            })
            .await
            .unwrap();
        let agent = Agent::new();
        let request = join_request(&f, &agent, &token.secret, "node", Default::default());
        let first = f.svc.join(&request).await.expect("the first join");
        answered_again(&f, &request, &first).await;
        answered_again(&f, &request, &first).await;
        let all = all_events(&f.store).await;
        assert_eq!(count(&all, "node.joined"), 1);
        assert_eq!(count(&all, "token.used"), 1);
        assert_eq!(f.svc.list_nodes(None).await.unwrap().len(), 1);
        assert_eq!(refusals(&f.store).await, vec![], "no refusal either");

        // Another CSR stays refused, with the reason it always had.
        let other = join_request(&f, &Agent::new(), &token.secret, "node", Default::default());
        refused(&f, &other, "t1", "join-token:no-use-left").await;
        let same_key = same_key_new_csr(&agent);
        let replay = join_request(&f, &same_key, &token.secret, "node", Default::default());
        refused(&f, &replay, "t1", "join-token:csr-key-used").await;
        // And still answered again afterwards.
        answered_again(&f, &request, &first).await;
    }
}

#[tokio::test]
async fn an_x509pop_rejoin_asked_again_gets_the_same_identity() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let node = joined(&f, "t1").await;
        expire(&f, &node);
        let next = Agent::new();
        let request = x509pop_request(&next, evidence(&f, &node, &next), "node");
        let first = f.svc.join(&request).await.expect("the re-join");
        assert_eq!(
            (first.node_id.as_str(), first.identity_generation),
            (node.node_id(), 2)
        );
        f.clock.advance_secs(5);
        answered_again(&f, &request, &first).await;
        let all = all_events(&f.store).await;
        assert_eq!(
            count(&all, "node.joined"),
            2,
            "the join and the one re-join"
        );
        assert_eq!(count(&all, "node.identity.revoked"), 1, "reclaimed once");

        // The same proof with another CSR proves nothing for it; a fresh proof by the old
        // certificate for another CSR: its generation is over.
        let mut other = request.clone();
        other.input.csr_der = Agent::new().csr;
        refused(&f, &other, "t1", "x509pop:bad-signature").await;
        let again = Agent::new();
        let fresh = x509pop_request(&again, evidence(&f, &node, &again), "node");
        refused(&f, &fresh, "t1", "x509pop:stale-generation").await;
        assert_eq!(
            f.svc
                .show_node(node.node_id())
                .await
                .unwrap()
                .node
                .identity_generation,
            2
        );
    }
}

fn provisioned_request(f: &Fixture, agent: &Agent, secret: &str) -> JoinRequest {
    let claims = HardwareClaims {
        product_uuid: Some(UUID.into()),
        macs: vec![MAC.into()],
        hardware_key: None,
    };
    let mut request = join_request(f, agent, secret, "node", claims);
    request.attestor = "provisioned".into();
    request
}

#[tokio::test]
async fn a_provisioned_join_asked_again_gets_the_same_identity() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let token = f
            .svc
            .create_token(&NewToken {
                role: TokenRole::Provisioned,
                uses: 1,
                expect: ExpectBinding {
                    product_uuid: Some(UUID.into()),
                    mac: None,
                },
                ..token_spec("t1")
            })
            .await
            .unwrap();
        let agent = Agent::new();
        let request = provisioned_request(&f, &agent, &token.secret);
        let first = f.svc.join(&request).await.expect("the provisioned join");
        answered_again(&f, &request, &first).await;
        assert_eq!(f.svc.list_nodes(None).await.unwrap().len(), 1);

        let other = provisioned_request(&f, &Agent::new(), &token.secret);
        refused(&f, &other, "t1", "provisioned:not-single-use").await;
        let replay = provisioned_request(&f, &same_key_new_csr(&agent), &token.secret);
        refused(&f, &replay, "t1", "provisioned:csr-key-used").await;
    }
}

/// A discovery join of a ramdisk with `agent`'s CSR, the boot token `secret` and `assertion`.
fn discovery_request(
    f: &Fixture,
    agent: &Agent,
    secret: &TokenSecret,
    assertion: &SignedDiscoveryAssertion,
) -> JoinRequest {
    let sealed = seal_token(
        f.keys.join_encryption.public_key(),
        secret,
        &agent.csr_sha256(),
    )
    .unwrap();
    JoinRequest {
        attestor: "discovery".into(),
        input: JoinInput {
            csr_der: agent.csr.clone(),
            sealed_token: sealed.as_bytes().to_vec(),
            role: "ramdisk".into(),
            claims: HardwareClaims {
                product_uuid: Some(UUID.into()),
                macs: vec![MAC.into()],
                ..HardwareClaims::default()
            },
            attestation: assertion.to_bytes(),
            report: Default::default(),
        },
    }
}

/// A site `par1` with a boot entry for `MAC`, its site agent joined and holding the boot lease,
/// a boot token for `MAC` and the agent's signed assertion.
async fn discovery_setup(f: &Fixture) -> (TokenSecret, SignedDiscoveryAssertion) {
    let clock: Arc<dyn Clock> = Arc::new(f.clock.clone());
    Sites::new(f.store.clone(), clock.clone())
        .create(&NewSite {
            site_id: "par1".into(),
            tenant_id: "acme".into(),
            description: String::new(),
            default_pool_id: Some("edge".into()),
            actor: "alice".into(),
        })
        .await
        .unwrap();
    let entry = BootEntries::new(f.store.clone(), clock.clone())
        .add(&NewBootEntry {
            site_id: "par1".into(),
            mac: MAC.into(),
            product_uuid: Some(UUID.into()),
            kernel_url: "http://boot.example/vmlinuz".into(),
            initrd_url: "http://boot.example/initrd".into(),
            kernel_args: String::new(),
            pool_id: None,
            expires_in_us: None,
            replace: false,
            actor: "alice".into(),
        })
        .await
        .unwrap();
    let site_token = f
        .svc
        .create_token(&NewToken {
            role: TokenRole::Site,
            site_id: "par1".into(),
            ..token_spec("acme")
        })
        .await
        .unwrap();
    let site_agent = Agent::new();
    let joined = f
        .svc
        .join(&join_request(
            f,
            &site_agent,
            &site_token.secret,
            "site",
            HardwareClaims::default(),
        ))
        .await
        .unwrap();
    let leaf = joined.certificate_chain[0].clone();
    let calls = SiteAgent::new(
        f.store.clone(),
        clock,
        TrustDomain::new(TD).unwrap(),
        SiteSettings {
            boot_lease_ttl: Duration::from_secs(60),
        },
    );
    let caller = SiteCaller::new(leaf.clone(), site_agent.key, f.clock.clone());
    let lease = lease_by(&calls, &caller, LeaseAction::Acquire, 0)
        .await
        .unwrap();
    let boot = boot_token_by(&calls, &caller, MAC, lease.epoch)
        .await
        .unwrap();
    let now_ms = f.clock.now_us() / 1000;
    let assertion = DiscoveryAssertion {
        site_id: "par1".into(),
        signer_node_id: joined.node_id.clone(),
        lease_epoch: lease.epoch,
        mac: MAC.into(),
        ip: "10.0.0.7".into(),
        product_uuid: UUID.into(),
        workflow_id: entry.entry_id.clone(),
        issued_at_ms: now_ms,
        not_after_ms: now_ms + 10 * 60 * 1000,
    };
    let signed = SignedDiscoveryAssertion::sign(&assertion, leaf, caller.key()).unwrap();
    (TokenSecret::parse(&boot.token).unwrap(), signed)
}

#[tokio::test]
async fn a_discovery_join_asked_again_gets_the_same_identity() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let (secret, assertion) = discovery_setup(&f).await;
        let ramdisk = Agent::new();
        let request = discovery_request(&f, &ramdisk, &secret, &assertion);
        let first = f.svc.join(&request).await.expect("the ramdisk joins");
        assert_eq!(first.role, "ramdisk");
        answered_again(&f, &request, &first).await;

        let other = discovery_request(&f, &Agent::new(), &secret, &assertion);
        refused(&f, &other, "acme", "discovery:assertion-reused").await;
    }
}

/// A join whose identity moved on is not answered again: the request is refused as it always
/// was (`join-token:csr-key-used`), once the node renewed, once its certificates were revoked,
/// once it was retired; and `join-token:expired` once the token's life is over.
#[tokio::test]
async fn a_join_whose_identity_moved_on_is_not_answered_again() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let spec = NewToken {
            uses: 1,
            ttl_seconds: 600,
            ..token_spec("t1")
        };

        // Renewed since: the machine had its answer.
        let token = f.svc.create_token(&spec).await.unwrap();
        let agent = Agent::new();
        let request = join_request(&f, &agent, &token.secret, "node", Default::default());
        let first = f.svc.join(&request).await.unwrap();
        let next = Agent::new();
        f.svc
            .renew(&renew_request(
                &agent,
                &first.certificate_chain[0],
                &first.node_id,
                &next,
                now_ms(&f),
            ))
            .await
            .expect("renewed");
        refused(&f, &request, "t1", "join-token:csr-key-used").await;

        // Revoked since.
        let token = f.svc.create_token(&spec).await.unwrap();
        let request = join_request(&f, &Agent::new(), &token.secret, "node", Default::default());
        let first = f.svc.join(&request).await.unwrap();
        f.svc.revoke_identity(&first.node_id, "test").await.unwrap();
        refused(&f, &request, "t1", "join-token:csr-key-used").await;

        // Retired since.
        let token = f.svc.create_token(&spec).await.unwrap();
        let request = join_request(&f, &Agent::new(), &token.secret, "node", Default::default());
        let first = f.svc.join(&request).await.unwrap();
        f.svc.retire_node(&first.node_id, "test").await.unwrap();
        refused(&f, &request, "t1", "join-token:csr-key-used").await;

        // The evidence's life is over.
        let token = f.svc.create_token(&spec).await.unwrap();
        let request = join_request(&f, &Agent::new(), &token.secret, "node", Default::default());
        let first = f.svc.join(&request).await.unwrap();
        f.clock.advance_secs(599);
        answered_again(&f, &request, &first).await;
        f.clock.advance_secs(1);
        refused(&f, &request, "t1", "join-token:expired").await;
    }
}
