//! The site agent's SiteLease and BootToken over real mTLS (issue 20), on the all-in-one
//! gateway and through the api relay: a site agent acquires the boot lease and gets a discovery
//! token for a registered MAC; NOT_FOUND for an unregistered MAC, FAILED_PRECONDITION at another
//! epoch, PERMISSION_DENIED "site agents only" for a node certificate, UNAUTHENTICATED without
//! a client certificate. Each call carries the agent's proof by its node key (issue 40 item 10):
//! a relaying gateway holding only the agent's certificate is refused for each reason (no
//! proof, another key's, a proof of another call, a stale one).

use crate::common;

use std::sync::Arc;

use commands::identity::NewToken;
use commands::site::{BootEntries, NewBootEntry, NewSite, Sites};
use commands::{Clock, SystemClock};
use domain::identity::{ExpectBinding, TokenRole};
use domain::pki::statement::sign;
use domain::pki::NodeId;
use domain::site::{SiteCall, SiteCallStatement};
use events::store::testkit::TestDb;
use gateway::split::api::{start_api, ApiConfig};
use gateway::split::relay::ApiClient;
use proto::site_lease_request::Action;
use time::Duration;
use tonic::Code;

async fn site_agent(env: &common::Env) -> common::Node {
    let token = env
        .join
        .create_token(&NewToken {
            tenant_id: "t1".into(),
            site_id: "s1".into(),
            pool_id: "p1".into(),
            role: TokenRole::Site,
            uses: 1,
            ttl_seconds: 3600,
            expect: ExpectBinding::default(),
            allow_reclaim: false,
            reclaim_node_id: None,
            for_node_id: None,
            require_approval: false,
        })
        .await
        .unwrap()
        .secret;
    let (mut req, key) = env.join_request(&token);
    req.role = "site".into();
    let mut c = env.client(None).await.unwrap();
    let signed = c.join(req).await.unwrap().into_inner();
    let resp = <proto::JoinResponse as prost::Message>::decode(signed.response.as_slice()).unwrap();
    common::Node {
        node_id: resp.node_id,
        chain: resp.certificate_chain,
        key,
    }
}

/// `node`'s proof of `call`, signed `skew_ms` from now: (client time, signature).
fn proof_at(node: &common::Node, call: SiteCall, skew_ms: i64) -> (i64, Vec<u8>) {
    let at_ms = SystemClock.now_us() / 1000 + skew_ms;
    let statement = SiteCallStatement {
        node_id: NodeId::new(&node.node_id).unwrap(),
        call,
        client_time_ms: u64::try_from(at_ms).unwrap(),
    };
    (
        at_ms,
        sign(&node.key, &statement).unwrap().as_bytes().to_vec(),
    )
}

/// A SiteLease by `node`, with its proof.
fn lease(node: &common::Node, action: Action, epoch: u64) -> proto::SiteLeaseRequest {
    let call = match action {
        Action::Renew => SiteCall::LeaseRenew { epoch },
        Action::Release => SiteCall::LeaseRelease { epoch },
        _ => SiteCall::LeaseAcquire,
    };
    let (client_time_ms, signature) = proof_at(node, call, 0);
    proto::SiteLeaseRequest {
        action: action as i32,
        epoch,
        client_time_ms,
        signature,
    }
}

/// A BootToken by `node`, with its proof.
fn boot_ask(node: &common::Node, mac: &str, lease_epoch: u64) -> proto::BootTokenRequest {
    let (client_time_ms, signature) = proof_at(node, SiteCall::boot_token(mac, lease_epoch), 0);
    proto::BootTokenRequest {
        mac: mac.into(),
        lease_epoch,
        client_time_ms,
        signature,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_site_agent_takes_the_lease_and_a_boot_token_over_mtls_and_the_relay() {
    let db = TestDb::postgres().await.unwrap();
    let env = common::start(db.store().await.unwrap(), |_| {}).await;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    Sites::new(env.store.clone(), clock.clone())
        .create(&NewSite {
            site_id: "s1".into(),
            tenant_id: "t1".into(),
            description: String::new(),
            default_pool_id: Some("p1".into()),
            actor: "op".into(),
        })
        .await
        .unwrap();
    let entry = BootEntries::new(env.store.clone(), clock.clone())
        .add(&NewBootEntry {
            site_id: "s1".into(),
            mac: "aa:bb:cc:dd:ee:01".into(),
            product_uuid: None,
            kernel_url: "http://boot.example/k".into(),
            initrd_url: "http://boot.example/i".into(),
            kernel_args: String::new(),
            pool_id: None,
            expires_in_us: None,
            replace: false,
            actor: "op".into(),
        })
        .await
        .unwrap();
    let agent = site_agent(&env).await;
    let mut c = env.client(Some(&agent)).await.unwrap();
    let got = c
        .site_lease(lease(&agent, Action::Acquire, 0))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (got.held, got.epoch, got.holder_node_id.as_str()),
        (true, 1, agent.node_id.as_str())
    );
    assert_eq!(got.renew_every_ms, 20_000);
    assert!(got.expires_at_ms > got.server_time_ms);
    let boot = c
        .boot_token(boot_ask(&agent, "AA-BB-CC-DD-EE-01", 1))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (boot.entry_id.as_str(), boot.mac.as_str()),
        (entry.entry_id.as_str(), "aa:bb:cc:dd:ee:01")
    );
    assert!(domain::pki::TokenSecret::parse(&boot.token).is_ok());
    assert_eq!(
        boot.token_expires_at_ms - boot.server_time_ms,
        15 * 60 * 1000
    );
    let missing = c
        .boot_token(boot_ask(&agent, "aa:bb:cc:dd:ee:02", 1))
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound, "{missing:?}");
    let stale = c
        .boot_token(boot_ask(&agent, "aa:bb:cc:dd:ee:01", 2))
        .await
        .unwrap_err();
    assert_eq!(stale.code(), Code::FailedPrecondition, "{stale:?}");
    let bad = c
        .site_lease(lease(&agent, Action::Unspecified, 0))
        .await
        .unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument);

    // A node certificate, and no certificate.
    let node = env.join_node(&env.token(1).await).await;
    let mut n = env.client(Some(&node)).await.unwrap();
    let denied = n
        .site_lease(lease(&node, Action::Acquire, 0))
        .await
        .unwrap_err();
    assert_eq!(
        (denied.code(), denied.message()),
        (Code::PermissionDenied, "site agents only")
    );
    let mut anon = env.client(None).await.unwrap();
    let unauth = anon
        .site_lease(lease(&agent, Action::Acquire, 0))
        .await
        .unwrap_err();
    assert_eq!(unauth.code(), Code::Unauthenticated);

    // Through the api relay: the same answers.
    let api = start_api(
        env.store.clone(),
        env.keys.clone(),
        env.join.clone(),
        clock,
        ApiConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            names: vec!["localhost".into()],
            certificate_lifetime: Duration::days(1),
            limits: gateway::edge::limits::EdgeLimits::internal(),
            health_listen: None,
        },
    )
    .await
    .unwrap();
    let (chain, key) = common::internal_identity(&env.keys);
    let relay = ApiClient::new(
        &format!("localhost:{}", api.addr.port()),
        env.keys.serving_ca.cert_der(),
        chain,
        key,
    )
    .unwrap();
    let renewed = relay
        .site_lease(lease(&agent, Action::Renew, 1), agent.chain[0].clone())
        .await
        .unwrap();
    assert_eq!((renewed.held, renewed.epoch), (true, 1));
    let relayed = relay
        .boot_token(
            boot_ask(&agent, "aa:bb:cc:dd:ee:01", 1),
            agent.chain[0].clone(),
        )
        .await
        .unwrap();
    assert_ne!(relayed.token, boot.token);
    let not_found = relay
        .boot_token(
            boot_ask(&agent, "aa:bb:cc:dd:ee:09", 1),
            agent.chain[0].clone(),
        )
        .await
        .unwrap_err();
    assert_eq!(not_found.code(), Code::NotFound);
    let denied = relay
        .site_lease(lease(&node, Action::Acquire, 0), node.chain[0].clone())
        .await
        .unwrap_err();
    assert_eq!(
        (denied.code(), denied.message()),
        (Code::PermissionDenied, "site agents only")
    );
    forged_calls_are_refused(&relay, &agent, &node).await;
    api.shutdown().await;
}

/// A gateway relaying in the agent's name with only its certificate: refused for each reason,
/// with the reason (issue 40 item 10). Before the proof, each of these was answered.
async fn forged_calls_are_refused(relay: &ApiClient, agent: &common::Node, node: &common::Node) {
    let leaf = || agent.chain[0].clone();
    let refused = |s: tonic::Status| (s.code(), s.message().to_owned());
    let missing = (
        Code::PermissionDenied,
        "the call carries no proof by the site agent's key (upgrade bcd on the site agent)".into(),
    );
    let bad = (
        Code::PermissionDenied,
        "the call's proof does not verify under the site agent's certificate".into(),
    );
    // No proof at all: the calls a gateway could make before.
    let bare_lease = proto::SiteLeaseRequest {
        action: Action::Release as i32,
        epoch: 1,
        ..Default::default()
    };
    let r = relay.site_lease(bare_lease, leaf()).await.unwrap_err();
    assert_eq!(refused(r), missing);
    let bare_boot = proto::BootTokenRequest {
        mac: "aa:bb:cc:dd:ee:01".into(),
        lease_epoch: 1,
        ..Default::default()
    };
    let r = relay.boot_token(bare_boot, leaf()).await.unwrap_err();
    assert_eq!(refused(r), missing);
    // Another key's proof (the node's), presented with the agent's certificate.
    let mut other = lease(node, Action::Release, 1);
    other.signature = lease(node, Action::Release, 1).signature;
    let r = relay.site_lease(other, leaf()).await.unwrap_err();
    assert_eq!(refused(r), bad);
    // The agent's own proof of a RENEW, replayed as a RELEASE; of one MAC, for another.
    let mut release = lease(agent, Action::Renew, 1);
    release.action = Action::Release as i32;
    let r = relay.site_lease(release, leaf()).await.unwrap_err();
    assert_eq!(refused(r), bad);
    let mut other_mac = boot_ask(agent, "aa:bb:cc:dd:ee:01", 1);
    other_mac.mac = "aa:bb:cc:dd:ee:03".into();
    let r = relay.boot_token(other_mac, leaf()).await.unwrap_err();
    assert_eq!(refused(r), bad);
    // A proof of the agent's made more than 60 s ago.
    let (client_time_ms, signature) = proof_at(agent, SiteCall::LeaseAcquire, -61_000);
    let stale = proto::SiteLeaseRequest {
        action: Action::Acquire as i32,
        epoch: 0,
        client_time_ms,
        signature,
    };
    let (code, message) = refused(relay.site_lease(stale, leaf()).await.unwrap_err());
    assert_eq!(code, Code::PermissionDenied);
    assert!(
        message.starts_with("the call's proof time is refused: the proof is 61")
            && message
                .ends_with("ms old, more than the 60 s window (check the site agent's clock)"),
        "{message}"
    );
    // The agent still holds its lease: none of these released it.
    let still = relay
        .site_lease(lease(agent, Action::Renew, 1), leaf())
        .await
        .unwrap();
    assert_eq!((still.held, still.epoch), (true, 1));
}
