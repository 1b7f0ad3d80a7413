//! Issue 17, the session part, over real TLS: a Session from an identity past its notAfter gets
//! no Welcome and records no trust report; 20,000 StatusReports in one session record one event
//! when nothing changes and at most the per-session bound when the version keeps rising, with no
//! queue WARN line; `/metrics` counts refusals by attestor and outcome with no reason on it.

use crate::common;

use std::sync::Arc;
use std::time::Duration as StdDuration;

use commands::identity::{IdentityConfig, JoinService};
use commands::{Clock, SystemClock};
use common::{start, Env, TD};
use domain::pki::{KeySet, KeySetLifetimes, NodeIdentity, TrustDomain};
use events::schema::{JoinRefused, NodeTrustReported, RenewRefused};
use events::store::testkit::TestDb;
use events::store::{EventStore, LogStore};
use gateway::run::GatewayConfig;
use proto::gateway_message::Body;
use time::OffsetDateTime;
use tokio_stream::StreamExt;
use tonic::Code;

/// Like `common::start`, with node certificates living `leaf_lifetime`.
async fn start_with_leaf_lifetime(store: EventStore, leaf_lifetime: time::Duration) -> Env {
    let keys = Arc::new(
        KeySet::generate(
            TrustDomain::new(TD).unwrap(),
            OffsetDateTime::now_utc() - time::Duration::days(1),
            KeySetLifetimes::default(),
        )
        .unwrap(),
    );
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let mut identity = IdentityConfig::new(keys.trust_domain.clone());
    identity.leaf_lifetime = leaf_lifetime;
    let join =
        Arc::new(JoinService::new(store.clone(), keys.clone(), clock.clone(), identity).unwrap());
    let mut cfg = GatewayConfig::new("127.0.0.1:0".parse().unwrap());
    cfg.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    let gateway = gateway::run::start(store.clone(), keys.clone(), join.clone(), clock, cfg)
        .await
        .unwrap();
    Env {
        store,
        keys,
        join,
        gateway,
    }
}

fn status(trust_version: u64) -> proto::NodeMessage {
    proto::NodeMessage {
        body: Some(proto::node_message::Body::Status(proto::StatusReport {
            client_time_ms: 0,
            trust_version,
            ..Default::default()
        })),
    }
}

fn hello(trust_version: u64) -> proto::NodeMessage {
    proto::NodeMessage {
        body: Some(proto::node_message::Body::Hello(proto::Hello {
            trust_version,
            agent_version: "test".into(),
            ..Default::default()
        })),
    }
}

/// The node's `node.trust.reported` events: (session_start, connected, trust_version).
async fn trust_reports(store: &EventStore, node_id: &str) -> Vec<(bool, bool, u64)> {
    store
        .read_stream(&format!("node-trust/{node_id}"))
        .await
        .unwrap()
        .iter()
        .map(|e| {
            assert_eq!(e.event_type, "node.trust.reported");
            let r: NodeTrustReported = e.decode().unwrap();
            (r.session_start, r.connected, r.trust_version)
        })
        .collect()
}

/// Waits (up to 60 s) until the node's session end is recorded, then returns every report.
async fn reports_after_end(store: &EventStore, node_id: &str) -> Vec<(bool, bool, u64)> {
    for _ in 0..600 {
        let reports = trust_reports(store, node_id).await;
        if reports.last().is_some_and(|r| !r.1) {
            return reports;
        }
        tokio::time::sleep(StdDuration::from_millis(100)).await;
    }
    let reports = trust_reports(store, node_id).await;
    panic!(
        "the session end was not recorded within 60 s; {} reports recorded",
        reports.len()
    );
}

fn page_line(page: &str, prefix: &str) -> Option<String> {
    page.lines()
        .find(|l| l.starts_with(prefix) && l[prefix.len()..].starts_with(' '))
        .map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_identity_gets_no_welcome_and_no_trust_report() {
    let db = TestDb::postgres().await.unwrap();
    let env = start_with_leaf_lifetime(db.store().await.unwrap(), time::Duration::seconds(3)).await;
    let token = env.token(1).await;
    let node = env.join_node(&token).await;
    let id = NodeIdentity::from_leaf_der(&node.chain[0], &TrustDomain::new(TD).unwrap()).unwrap();
    // The connection is made (and its handshake verified) while the certificate is valid...
    let mut c = env.client(Some(&node)).await.unwrap();
    // ...and the Session is opened on it after the certificate expired.
    let wait = id.not_after - OffsetDateTime::now_utc() + time::Duration::milliseconds(500);
    tokio::time::sleep(StdDuration::try_from(wait).unwrap_or_default()).await;
    assert!(OffsetDateTime::now_utc() > id.not_after);
    let mut messages = vec![hello(0)];
    messages.extend((1..=50).map(status));
    let outcome = c.session(tokio_stream::iter(messages)).await;
    let refused = match outcome {
        Err(s) => s,
        Ok(stream) => {
            let mut stream = stream.into_inner();
            let mut welcomes = 0;
            while let Some(m) = stream.next().await {
                if let Ok(proto::GatewayMessage {
                    body: Some(Body::Welcome(_)),
                }) = m
                {
                    welcomes += 1;
                }
            }
            panic!("the expired identity's Session was opened ({welcomes} Welcome)");
        }
    };
    assert_eq!(refused.code(), Code::Unauthenticated);
    assert_eq!(
        refused.message(),
        format!(
            "this certificate expired at {}; renew it (bcd renews before expiry) or join again",
            id.not_after
        )
    );
    // Nothing was recorded, even after the reporter had time to write.
    tokio::time::sleep(StdDuration::from_secs(1)).await;
    assert_eq!(trust_reports(&env.store, &node.node_id).await, vec![]);
    let page = env.gateway.sources.render();
    assert_eq!(
        page_line(&page, "bc_sessions_refused_total{outcome=\"expired\"}").as_deref(),
        Some("bc_sessions_refused_total{outcome=\"expired\"} 1"),
        "{page}"
    );
    assert_eq!(
        page_line(&page, "bc_sessions_opened_total").as_deref(),
        Some("bc_sessions_opened_total 0")
    );
    env.gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_thousand_unchanged_status_reports_record_one_event() {
    let db = TestDb::sqlite().unwrap();
    let env = start(db.store().await.unwrap(), |_| {}).await;
    let token = env.token(1).await;
    let node = env.join_node(&token).await;
    let mut c = env.client(Some(&node)).await.unwrap();
    let mut messages = vec![hello(0)];
    messages.extend((0..20_000).map(|_| status(0)));
    let mut stream = c
        .session(tokio_stream::iter(messages))
        .await
        .unwrap()
        .into_inner();
    // The Welcome, then the stream ends when the node's side does.
    while stream.next().await.is_some() {}
    let reports = reports_after_end(&env.store, &node.node_id).await;
    // One event for the node being connected with version 0, one for the session's end.
    assert_eq!(reports, vec![(true, true, 0), (false, false, 0)]);
    let page = env.gateway.sources.render();
    for (line, want) in [
        ("bc_trust_reports_total{outcome=\"queued\"}", 2),
        ("bc_trust_reports_total{outcome=\"unchanged\"}", 20_000),
        ("bc_trust_reports_total{outcome=\"dropped\"}", 0),
        ("bc_trust_report_queue_warnings_total", 0),
    ] {
        assert_eq!(
            page_line(&page, line),
            Some(format!("{line} {want}")),
            "{page}"
        );
    }
    env.gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_thousand_rising_status_reports_record_at_most_the_bound() {
    let db = TestDb::postgres().await.unwrap();
    let env = start(db.store().await.unwrap(), |_| {}).await;
    let token = env.token(1).await;
    let node = env.join_node(&token).await;
    let mut c = env.client(Some(&node)).await.unwrap();
    let mut messages = vec![hello(0)];
    messages.extend((1..=20_000).map(status));
    let mut stream = c
        .session(tokio_stream::iter(messages))
        .await
        .unwrap()
        .into_inner();
    while stream.next().await.is_some() {}
    let reports = reports_after_end(&env.store, &node.node_id).await;
    // The bound is 8 a session: the Hello, six raises, the end.
    assert_eq!(
        reports,
        vec![
            (true, true, 0),
            (false, true, 1),
            (false, true, 2),
            (false, true, 3),
            (false, true, 4),
            (false, true, 5),
            (false, true, 6),
            (false, false, 0),
        ]
    );
    let page = env.gateway.sources.render();
    for (line, want) in [
        ("bc_trust_reports_total{outcome=\"queued\"}", 8),
        ("bc_trust_reports_total{outcome=\"over-bound\"}", 20_000 - 6),
        ("bc_trust_report_queue_warnings_total", 0),
    ] {
        assert_eq!(
            page_line(&page, line),
            Some(format!("{line} {want}")),
            "{page}"
        );
    }
    env.gateway.shutdown().await;
}

/// The refusal strings recorded in the log, in order.
async fn refusals(store: &EventStore) -> Vec<String> {
    let mut out = Vec::new();
    for e in store.read_batch(0, 10_000).await.unwrap() {
        match e.event_type.as_str() {
            "security.join.refused" => out.push(e.decode::<JoinRefused>().unwrap().refusal),
            "security.renew.refused" => out.push(e.decode::<RenewRefused>().unwrap().refusal),
            _ => {}
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_refusals_by_attestor_with_no_reason() {
    let db = TestDb::sqlite().unwrap();
    let env = start(db.store().await.unwrap(), |c| {
        c.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    let mut anon = env.client(None).await.unwrap();
    // join-token:token-does-not-open
    let (mut tampered, _) = env.join_request(&env.token(1).await);
    if let Some(b) = tampered.sealed_token.last_mut() {
        *b ^= 1;
    }
    assert_eq!(
        anon.join(tampered).await.unwrap_err().code(),
        Code::PermissionDenied
    );
    // join-token:no-use-left
    let once = env.token(1).await;
    let node = env.join_node(&once).await;
    let (again, _) = env.join_request(&once);
    assert_eq!(
        anon.join(again).await.unwrap_err().code(),
        Code::PermissionDenied
    );
    // join-token:wrong-role
    let (mut site, _) = env.join_request(&env.token(1).await);
    site.role = "site".into();
    assert_eq!(
        anon.join(site).await.unwrap_err().code(),
        Code::PermissionDenied
    );
    // renew:bad-proof
    let mut renew = common::renew_request(&node);
    renew.signature[10] ^= 1;
    let mut as_node = env.client(Some(&node)).await.unwrap();
    assert_eq!(
        as_node.renew(renew).await.unwrap_err().code(),
        Code::PermissionDenied
    );
    // A handshake refusal: the node's certificate, revoked.
    env.join
        .revoke_identity(&node.node_id, "compromised")
        .await
        .unwrap();
    let mut refused_handshake = false;
    for _ in 0..100 {
        if env.gateway.sources.handshake_refusals.total() > 0 {
            refused_handshake = true;
            break;
        }
        if let Ok(mut c) = env.client(Some(&node)).await {
            let _ = c.session(tokio_stream::iter(vec![hello(0)])).await;
        }
        tokio::time::sleep(StdDuration::from_millis(100)).await;
    }
    assert!(refused_handshake, "the revoked certificate was not refused");

    // Every refused handshake of the revoked certificate is a renewal refusal too (issue 40):
    // `renew:revoked`, recorded by the gateway after the handshake; wait for each.
    let handshakes = env.gateway.sources.handshake_refusals.by_reason()["revoked"];
    let mut recorded = refusals(&env.store).await;
    for _ in 0..100 {
        if recorded.len() >= 4 + handshakes as usize {
            break;
        }
        tokio::time::sleep(StdDuration::from_millis(50)).await;
        recorded = refusals(&env.store).await;
    }
    let mut want = vec![
        "join-token:token-does-not-open",
        "join-token:no-use-left",
        "join-token:wrong-role",
        "renew:bad-proof",
    ];
    want.extend(std::iter::repeat_n("renew:revoked", handshakes as usize));
    assert_eq!(recorded, want);
    // The feed counts them from the log; wait until it has.
    let want_join = "bc_join_refusals_total{attestor=\"join-token\"} 3";
    let want_renew = format!(
        "bc_renew_refusals_total{{attestor=\"renew\"}} {}",
        1 + handshakes
    );
    let want_renew = want_renew.as_str();
    let mut page = String::new();
    for _ in 0..100 {
        page = env.gateway.sources.render();
        if page.contains(want_join) && page.contains(want_renew) {
            break;
        }
        tokio::time::sleep(StdDuration::from_millis(100)).await;
    }
    assert!(page.lines().any(|l| l == want_join), "{page}");
    assert!(page.lines().any(|l| l == want_renew), "{page}");
    assert_eq!(
        page_line(&page, "bc_handshake_refusals_total"),
        Some(format!(
            "bc_handshake_refusals_total {}",
            env.gateway.sources.handshake_refusals.total()
        )),
        "{page}"
    );
    // No reason anywhere: not the refusal strings, not their reasons, no `reason` label.
    for refusal in &recorded {
        let (_, reason) = refusal.split_once(':').unwrap();
        if reason == "revoked" {
            // A word of metric names (`bc_revoked_serials`): never a refusal or a label value.
            assert!(
                !page.contains(refusal.as_str()),
                "{refusal:?} on /metrics:\n{page}"
            );
            // Nor a label value, except the session outcome of a connection whose handshake
            // passed just before the feed applied the revocation (a race the loop above can
            // win): `bc_sessions_refused_total{outcome="revoked"}` names the session's outcome.
            assert!(
                !page
                    .lines()
                    .filter(|l| !l.starts_with("bc_sessions_refused_total{outcome=\"revoked\"}"))
                    .any(|l| l.contains("\"revoked\"")),
                "{reason:?} on /metrics:\n{page}"
            );
            continue;
        }
        assert!(!page.contains(reason), "{reason:?} on /metrics:\n{page}");
    }
    assert!(!page.contains("reason=\""), "{page}");
    assert!(
        !page.contains("bc_handshake_refusals_total{"),
        "handshake refusals by label:\n{page}"
    );
    // The handshake reasons stay server-side, where tests and logs see them.
    assert!(
        env.gateway
            .sources
            .handshake_refusals
            .by_reason()
            .contains_key("revoked"),
        "{:?}",
        env.gateway.sources.handshake_refusals.by_reason()
    );
    // And the page served over HTTP is the same text.
    let addr = env.gateway.metrics_addr.unwrap();
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).await.unwrap();
    assert!(body.starts_with("HTTP/1.1 200 OK"), "{body}");
    assert!(body.lines().any(|l| l == want_join), "{body}");
    assert!(!body.contains("reason=\""), "{body}");
    env.gateway.shutdown().await;
}
