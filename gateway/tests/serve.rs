//! The gateway over real TLS: Join without a certificate, refusals, Renew and Session needing
//! one, Welcome, a revocation cutting a live session, the revoked certificate refused at the next
//! handshake, and (Postgres) a revocation whose transaction took a lower position and committed
//! late still cutting the session; a Join naming an unknown attestor is UNSUPPORTED
//! (UNIMPLEMENTED), not refused.

use crate::common;

use std::time::Duration;

use commands::append_and_project;
use common::{hello, start, Env};
use events::schema::NodeIdentityRevoked;
use events::store::testkit::TestDb;
use events::store::{ExpectedVersion, LogStore, LogTx};
use events::{new_event_id, NewEvent};
use proto::gateway_message::Body;
use tokio_stream::StreamExt;
use tonic::Code;

async fn open_session(
    env: &Env,
    node: &common::Node,
) -> (
    tokio::sync::mpsc::Sender<proto::NodeMessage>,
    tonic::Streaming<proto::GatewayMessage>,
) {
    let mut c = env.client(Some(node)).await.unwrap();
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(hello()).await.unwrap();
    let mut inbound = c
        .session(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let first = tokio::time::timeout(Duration::from_secs(5), inbound.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    match first.body {
        Some(Body::Welcome(w)) => assert!(w.server_time_ms > 0),
        other => panic!("expected Welcome, got {other:?}"),
    }
    (tx, inbound)
}

async fn expect_notice(inbound: &mut tonic::Streaming<proto::GatewayMessage>, serial_of: &[u8]) {
    let msg = tokio::time::timeout(Duration::from_secs(5), inbound.next())
        .await
        .expect("no RevocationNotice within 5 s")
        .expect("the stream ended without a notice")
        .unwrap();
    match msg.body {
        Some(Body::Revocation(n)) => {
            let id = domain::pki::NodeIdentity::from_leaf_der(
                serial_of,
                &domain::pki::TrustDomain::new(common::TD).unwrap(),
            )
            .unwrap();
            assert_eq!(n.serial, id.serial.to_hex());
            assert!(!n.reason.is_empty());
        }
        other => panic!("expected RevocationNotice, got {other:?}"),
    }
    // Then the stream closes.
    let after = tokio::time::timeout(Duration::from_secs(5), inbound.next())
        .await
        .unwrap();
    assert!(matches!(after, None | Some(Ok(_)) | Some(Err(_))));
    assert!(
        after.is_none() || after.as_ref().is_some_and(|r| r.is_err()),
        "{after:?}"
    );
}

async fn the_whole_path(db: TestDb) {
    let env = start(db.store().await.unwrap(), |c| {
        c.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    let token = env.token(3).await;
    let node = env.join_node(&token).await;
    let id = domain::pki::NodeIdentity::from_leaf_der(
        &node.chain[0],
        &domain::pki::TrustDomain::new(common::TD).unwrap(),
    )
    .unwrap();
    assert_eq!(id.spiffe_id.node.as_str(), node.node_id);
    assert_eq!(
        id.spiffe_id.to_string(),
        format!("spiffe://{}/site/s1/node/{}", common::TD, node.node_id)
    );

    // A bad token: PERMISSION_DENIED "Join refused".
    let bad = "bcjt_".to_string() + &"A".repeat(43);
    let (req, _) = match domain::pki::TokenSecret::parse(&bad) {
        Ok(_) => env.join_request(&bad),
        // Not even a well-formed token: reuse a real one's shape with another secret.
        Err(_) => env.join_request(&env.token(1).await),
    };
    let mut anon = env.client(None).await.unwrap();
    let mut tampered = req.clone();
    if let Some(b) = tampered.sealed_token.last_mut() {
        *b ^= 1;
    }
    let refused = anon.join(tampered).await.unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied);
    assert_eq!(refused.message(), "Join refused");

    // Renew and Session without a certificate: UNAUTHENTICATED.
    let renew = anon
        .renew(proto::RenewRequest {
            csr: vec![],
            chain: node.chain.clone(),
            client_time_ms: 0,
            signature: vec![],
            key_attestation: None,
        })
        .await
        .unwrap_err();
    assert_eq!(renew.code(), Code::Unauthenticated);
    let (_tx0, rx0) = tokio::sync::mpsc::channel(1);
    let session = anon
        .session(tokio_stream::wrappers::ReceiverStream::new(rx0))
        .await
        .unwrap_err();
    assert_eq!(session.code(), Code::Unauthenticated);

    // A session, then a revocation: RevocationNotice and the stream closes.
    let (_tx, mut inbound) = open_session(&env, &node).await;
    assert_eq!(env.gateway.sources.sessions.len(), 1);
    env.join
        .revoke_identity(&node.node_id, "compromised")
        .await
        .unwrap();
    expect_notice(&mut inbound, &node.chain[0]).await;

    // The revoked certificate fails the next handshake (or its first call).
    let again = match env.client(Some(&node)).await {
        Err(_) => true,
        Ok(mut c) => c.join(env.join_request(&token).0).await.is_err(),
    };
    assert!(again, "a revoked certificate was let through");
    let refusals = env.gateway.sources.handshake_refusals.by_reason();
    assert!(
        refusals.get("revoked").copied().unwrap_or(0) >= 1,
        "{refusals:?}"
    );

    // Metrics page.
    let page = env.gateway.sources.render();
    assert!(
        page.contains("bc_join_requests_total{outcome=\"joined\"} 1"),
        "{page}"
    );
    assert!(
        page.contains("bc_join_requests_total{outcome=\"refused\"} 1"),
        "{page}"
    );
    // Verifications by attestor and outcome, and their durations (issue 18 item 11).
    assert!(
        page.contains(
            "bc_attestor_verifications_total{attestor=\"join-token\",outcome=\"admitted\"} 1"
        ),
        "{page}"
    );
    assert!(
        page.contains(
            "bc_attestor_verifications_total{attestor=\"join-token\",outcome=\"refused\"} 1"
        ),
        "{page}"
    );
    assert!(
        page.contains("bc_attestor_verification_seconds_count{attestor=\"join-token\"} 2"),
        "{page}"
    );
    assert!(
        page.contains(
            "bc_attestor_verification_seconds_bucket{attestor=\"join-token\",le=\"+Inf\"} 2"
        ),
        "{page}"
    );
    assert!(page.contains("bc_revocation_notices_total 1"), "{page}");
    // Handshake refusals are one total on the page; their reasons stay server-side.
    assert!(
        page.lines()
            .any(|l| l.starts_with("bc_handshake_refusals_total ")
                && l != "bc_handshake_refusals_total 0"),
        "{page}"
    );
    let addr = env.gateway.metrics_addr.unwrap();
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).await.unwrap();
    assert!(body.starts_with("HTTP/1.1 200 OK"), "{body}");
    assert!(body.contains("bc_live_sessions"), "{body}");
    env.gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_session_revocation_on_sqlite() {
    the_whole_path(TestDb::sqlite().unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_session_revocation_on_postgres() {
    the_whole_path(TestDb::postgres().await.unwrap()).await;
}

/// A revocation appended in a transaction that took a lower position than an event committed
/// after it, and committed last, still reaches the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_committed_revocation_still_cuts_the_session() {
    let db = TestDb::postgres().await.unwrap();
    let env = start(db.store().await.unwrap(), |_| {}).await;
    let token = env.token(2).await;
    let a = env.join_node(&token).await;
    let b = env.join_node(&token).await;
    let (_ta, mut session_a) = open_session(&env, &a).await;
    let (_tb, _session_b) = open_session(&env, &b).await;

    // The revocation of A takes its position first and stays uncommitted.
    let mut late = env.store.begin().await.unwrap();
    let serials = projections::identity::read::unrevoked_serials_of_node(&mut late, &a.node_id)
        .await
        .unwrap();
    let revoked = NewEvent::from_payload(
        new_event_id(),
        "t1",
        commands::Clock::now_us(&commands::SystemClock),
        &NodeIdentityRevoked {
            node_id: a.node_id.clone(),
            reason: "late".into(),
            new_identity_generation: 2,
            revoked_serials: serials,
        },
    );
    let appended = append_and_project(
        &mut late,
        &projections::identity::all(),
        &format!("node/{}", a.node_id),
        ExpectedVersion::Any,
        &[revoked],
    )
    .await
    .unwrap();
    // Another event commits after it with a higher position, and the feed moves past it.
    let other = env.token(1).await;
    assert!(!other.is_empty());
    let head = env.store.head_position().await.unwrap();
    assert!(
        head > appended[0].position,
        "{head} vs {}",
        appended[0].position
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(env.gateway.sources.sessions.len(), 2, "nothing revoked yet");
    // Now the revocation commits, late.
    late.commit().await.unwrap();
    expect_notice(&mut session_a, &a.chain[0]).await;
    assert_eq!(
        env.gateway.sources.sessions.len(),
        1,
        "only A's session ended"
    );
    env.gateway.shutdown().await;
}

/// While the feed is behind by more than its limit, new sessions are refused (UNAVAILABLE),
/// health says NOT_SERVING and the stale metric is 1; it recovers by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_feed_that_falls_behind_fails_closed_and_recovers() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::HealthCheckRequest;

    let db = TestDb::sqlite().unwrap();
    // The feed only steps when woken by a commit in this process (or once an hour): between
    // commits it looks behind, which is what a stalled feed looks like from outside.
    let env = start(db.store().await.unwrap(), |c| {
        c.feed.max_lag = Duration::from_millis(800);
        c.feed.poll_interval = Some(Duration::from_secs(3600));
    })
    .await;
    let token = env.token(1).await;
    let node = env.join_node(&token).await;
    let mut health = HealthClient::new(
        common::channel(env.gateway.addr, env.keys.serving_ca.cert_der(), None)
            .await
            .unwrap(),
    );
    let status = |h: &mut HealthClient<tonic::transport::Channel>| {
        let mut h = h.clone();
        async move {
            h.check(HealthCheckRequest {
                service: gateway::run::SERVICE_NAME.into(),
            })
            .await
            .unwrap()
            .into_inner()
            .status
        }
    };
    // Until the health check says so (the feed turns stale after 800 ms, health follows on its
    // next 250 ms tick), bounded.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while status(&mut health).await != ServingStatus::NotServing as i32 {
        assert!(
            std::time::Instant::now() < deadline,
            "health never turned NOT_SERVING"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(env.gateway.sources.feed.is_stale());
    assert_eq!(status(&mut health).await, ServingStatus::NotServing as i32);
    assert!(env
        .gateway
        .sources
        .render()
        .contains("bc_revocation_feed_stale 1"));
    let mut c = env.client(Some(&node)).await.unwrap();
    let (_tx, rx) = tokio::sync::mpsc::channel(1);
    let refused = c
        .session(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");

    // A commit wakes the feed, it catches up, sessions are accepted again.
    env.token(1).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while status(&mut health).await != ServingStatus::Serving as i32 {
        assert!(
            std::time::Instant::now() < deadline,
            "health never turned SERVING again"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!env.gateway.sources.feed.is_stale());
    assert_eq!(status(&mut health).await, ServingStatus::Serving as i32);
    let (_tx, _inbound) = open_session(&env, &node).await;
    env.gateway.shutdown().await;
}

/// The message every unsupported-attestor Join gets, for `shown` (the attestor as the message
/// quotes it).
fn unsupported(shown: &str) -> String {
    format!(
        "UNSUPPORTED: attestor {shown} is not supported by this control plane; supported: \"join-token\", \"provisioned\", \"x509pop\", \"discovery\" (an empty attestor means \"join-token\")"
    )
}

/// A Join naming an attestor this control plane does not run is UNSUPPORTED (gRPC
/// UNIMPLEMENTED) with the attestor and the supported ones named, not the refusal's
/// PERMISSION_DENIED; it spends nothing, and the same token then joins with the attestor empty
/// or named `join-token`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_attestor_is_unsupported_not_refused() {
    let db = TestDb::sqlite().unwrap();
    let env = start(db.store().await.unwrap(), |_| {}).await;
    let token = env.token(2).await;
    let mut anon = env.client(None).await.unwrap();

    let (mut req, _) = env.join_request(&token);
    req.attestor = "tpm".into();
    let s = anon.join(req).await.unwrap_err();
    assert_eq!(
        (s.code(), s.message()),
        (Code::Unimplemented, unsupported("\"tpm\"").as_str())
    );
    // A name from the network is repeated escaped and at most 64 characters of it.
    let (mut req, _) = env.join_request(&token);
    req.attestor = "a\n".repeat(100);
    let s = anon.join(req).await.unwrap_err();
    let shown = format!("{:?}...", "a\n".repeat(32));
    assert_eq!(
        (s.code(), s.message()),
        (Code::Unimplemented, unsupported(&shown).as_str())
    );

    // The token was not spent: both of its uses join, the attestor empty, then named.
    let (req, _) = env.join_request(&token);
    assert_eq!(req.attestor, "");
    anon.join(req).await.unwrap();
    let (mut req, _) = env.join_request(&token);
    req.attestor = "join-token".into();
    anon.join(req).await.unwrap();

    let page = env.gateway.sources.render();
    for line in [
        "bc_join_requests_total{outcome=\"unsupported\"} 2",
        "bc_join_requests_total{outcome=\"joined\"} 2",
    ] {
        assert!(page.contains(line), "{line} missing from\n{page}");
    }
    assert!(!page.contains("outcome=\"refused\""), "{page}");
    env.gateway.shutdown().await;
}
