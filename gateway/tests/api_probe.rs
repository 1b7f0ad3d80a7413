//! A split gateway watches the api: while it does not answer, the gateway's health reports
//! `bc.internal.v1.ApiService` NOT_SERVING and `bc_api_up 0`, Join fails UNAVAILABLE, and the
//! NodeService itself stays SERVING (node sessions do not need the api). When an api answers
//! again, all of it recovers by itself. A gateway in the `all` role has no such metric.

use crate::common;

use std::sync::Arc;
use std::time::Duration as StdDuration;

use commands::{Clock, SystemClock};
use events::store::testkit::TestDb;
use gateway::run::{GatewayConfig, API_SERVICE_NAME, SERVICE_NAME};
use gateway::split::api::{start_api, ApiConfig, RunningApi};
use gateway::split::relay::ApiClient;
use time::Duration;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

async fn api_at(env: &common::Env, listen: std::net::SocketAddr) -> RunningApi {
    start_api(
        env.store.clone(),
        env.keys.clone(),
        env.join.clone(),
        Arc::new(SystemClock),
        ApiConfig {
            listen,
            names: vec!["localhost".into()],
            certificate_lifetime: Duration::days(1),
            limits: gateway::edge::limits::EdgeLimits::internal(),
            health_listen: None,
        },
    )
    .await
    .unwrap()
}

async fn status(health: &HealthClient<tonic::transport::Channel>, service: &str) -> i32 {
    health
        .clone()
        .check(HealthCheckRequest {
            service: service.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_gateway_reports_the_api_down_and_recovers() {
    let db = TestDb::postgres().await.unwrap();
    let env = common::start(db.store().await.unwrap(), |_| {}).await;
    assert!(
        !env.gateway.sources.render().contains("bc_api_up"),
        "no api metric in the all role"
    );
    let api = api_at(&env, "127.0.0.1:0".parse().unwrap()).await;
    let api_addr = api.addr;
    let (chain, key) = common::internal_identity(&env.keys);
    let client = ApiClient::new(
        &format!("localhost:{}", api_addr.port()),
        env.keys.serving_ca.cert_der(),
        chain,
        key,
    )
    .unwrap();
    let public = common::public_bundle(&env.keys);
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let split = gateway::run::start_gateway(
        env.store.clone(),
        &public,
        client,
        clock,
        GatewayConfig::new("127.0.0.1:0".parse().unwrap()),
    )
    .await
    .unwrap();
    let ca = env.keys.serving_ca.cert_der().to_vec();
    let health = HealthClient::new(common::channel(split.addr, &ca, None).await.unwrap());
    let serving = ServingStatus::Serving as i32;
    let not_serving = ServingStatus::NotServing as i32;
    assert_eq!(status(&health, API_SERVICE_NAME).await, serving);
    assert!(split.sources.render().contains("bc_api_up 1"));

    // The api goes away.
    api.shutdown().await;
    let mut down = false;
    for _ in 0..60 {
        if status(&health, API_SERVICE_NAME).await == not_serving {
            down = true;
            break;
        }
        tokio::time::sleep(StdDuration::from_millis(250)).await;
    }
    assert!(
        down,
        "the api's status did not turn NOT_SERVING within 15 s"
    );
    assert!(split.sources.render().contains("bc_api_up 0"));
    assert_eq!(status(&health, SERVICE_NAME).await, serving);
    assert_eq!(status(&health, "").await, serving);
    let token = env.token(2).await;
    let (req, _) = env.join_request(&token);
    let mut c = common::connect(split.addr, &ca, None).await.unwrap();
    let err = c.join(req).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}");

    // An api answers again at the same address: everything recovers by itself.
    let again = api_at(&env, api_addr).await;
    let mut up = false;
    for _ in 0..60 {
        if status(&health, API_SERVICE_NAME).await == serving {
            up = true;
            break;
        }
        tokio::time::sleep(StdDuration::from_millis(250)).await;
    }
    assert!(up, "the api's status did not recover within 15 s");
    assert!(split.sources.render().contains("bc_api_up 1"));
    let (req, _) = env.join_request(&token);
    c.join(req).await.unwrap();

    split.shutdown().await;
    again.shutdown().await;
    env.gateway.shutdown().await;
}
