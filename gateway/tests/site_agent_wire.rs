//! The site agent's SiteLease and BootToken over real mTLS (issue 20), on the all-in-one
//! gateway and through the api relay: a site agent acquires the boot lease and gets a discovery
//! token for a registered MAC; NOT_FOUND for an unregistered MAC, FAILED_PRECONDITION at another
//! epoch, PERMISSION_DENIED "site agents only" for a node certificate, UNAUTHENTICATED without
//! a client certificate.

use crate::common;

use std::sync::Arc;

use commands::identity::NewToken;
use commands::site::{BootEntries, NewBootEntry, NewSite, Sites};
use commands::{Clock, SystemClock};
use domain::identity::{ExpectBinding, TokenRole};
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

fn lease(action: Action, epoch: u64) -> proto::SiteLeaseRequest {
    proto::SiteLeaseRequest {
        action: action as i32,
        epoch,
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
        .site_lease(lease(Action::Acquire, 0))
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
        .boot_token(proto::BootTokenRequest {
            mac: "AA-BB-CC-DD-EE-01".into(),
            lease_epoch: 1,
        })
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
        .boot_token(proto::BootTokenRequest {
            mac: "aa:bb:cc:dd:ee:02".into(),
            lease_epoch: 1,
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound, "{missing:?}");
    let stale = c
        .boot_token(proto::BootTokenRequest {
            mac: "aa:bb:cc:dd:ee:01".into(),
            lease_epoch: 2,
        })
        .await
        .unwrap_err();
    assert_eq!(stale.code(), Code::FailedPrecondition, "{stale:?}");
    let bad = c
        .site_lease(lease(Action::Unspecified, 0))
        .await
        .unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument);

    // A node certificate, and no certificate.
    let node = env.join_node(&env.token(1).await).await;
    let mut n = env.client(Some(&node)).await.unwrap();
    let denied = n.site_lease(lease(Action::Acquire, 0)).await.unwrap_err();
    assert_eq!(
        (denied.code(), denied.message()),
        (Code::PermissionDenied, "site agents only")
    );
    let mut anon = env.client(None).await.unwrap();
    let unauth = anon
        .site_lease(lease(Action::Acquire, 0))
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
        .site_lease(lease(Action::Renew, 1), agent.chain[0].clone())
        .await
        .unwrap();
    assert_eq!((renewed.held, renewed.epoch), (true, 1));
    let relayed = relay
        .boot_token(
            proto::BootTokenRequest {
                mac: "aa:bb:cc:dd:ee:01".into(),
                lease_epoch: 1,
            },
            agent.chain[0].clone(),
        )
        .await
        .unwrap();
    assert_ne!(relayed.token, boot.token);
    let not_found = relay
        .boot_token(
            proto::BootTokenRequest {
                mac: "aa:bb:cc:dd:ee:09".into(),
                lease_epoch: 1,
            },
            agent.chain[0].clone(),
        )
        .await
        .unwrap_err();
    assert_eq!(not_found.code(), Code::NotFound);
    let denied = relay
        .site_lease(lease(Action::Acquire, 0), node.chain[0].clone())
        .await
        .unwrap_err();
    assert_eq!(
        (denied.code(), denied.message()),
        (Code::PermissionDenied, "site agents only")
    );
    api.shutdown().await;
}
