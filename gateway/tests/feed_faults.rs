//! The revocation feed meeting a revocation event it cannot read (issue 17, item 7): it must
//! stop loudly and fail closed, never skip it. A skipped revocation lets the revoked node keep
//! its live session and open new ones.
//!
//! Two ways an event does not decode, one test each, on both backends: a payload that is not a
//! `NodeIdentityRevoked` (bytes that are not protobuf), and a schema version this build has no
//! upcaster for (what a newer control plane writing to the same log looks like). In each, a
//! node holds a live session; the undecodable `node.identity.revoked` event is appended to its
//! stream; the gateway must end the live session, refuse new ones (UNAVAILABLE, naming the
//! position), report NOT_SERVING on its health service and `bc_revocation_feed_halted 1`, and
//! stay so after later good commits (it does not move past the event on its own). The live
//! sessions (one over gRPC, one over the session wire) end with that reason and a retry hint of
//! at least a minute, not as a shutdown (issue 40: nodes came straight back into refusals).
//!
//! Run: `cargo test -p gateway --test suite feed_faults::`.

use crate::common;

use std::time::{Duration, Instant};

use common::{hello, start, Env};
use events::store::testkit::TestDb;
use events::store::{ExpectedVersion, LogStore, LogTx};
use events::{new_event_id, NewEvent};
use proto::gateway_message::Body;
use tokio_stream::StreamExt;
use tonic::Code;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

/// How the appended revocation event is broken.
#[derive(Clone, Copy, Debug)]
enum Broken {
    /// Payload bytes that are not protobuf (a truncated varint).
    Payload,
    /// A valid payload under schema version 99.
    SchemaVersion,
}

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
        .expect("a Welcome within 5 s")
        .expect("a message")
        .expect("not an error");
    assert!(
        matches!(first.body, Some(Body::Welcome(_))),
        "{:?}",
        first.body
    );
    (tx, inbound)
}

async fn health_status(env: &Env) -> i32 {
    let mut h = HealthClient::new(
        common::channel(env.gateway.addr, env.keys.serving_ca.cert_der(), None)
            .await
            .unwrap(),
    );
    h.check(HealthCheckRequest {
        service: gateway::run::SERVICE_NAME.into(),
    })
    .await
    .unwrap()
    .into_inner()
    .status
}

/// A status's `grpc-retry-pushback-ms`.
fn pushback_ms(status: &tonic::Status) -> Option<u64> {
    status
        .metadata()
        .get("grpc-retry-pushback-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

/// The retry hint while the feed has stopped: a minute and up to half as much again.
fn assert_halted_hint(hint: Option<u64>) {
    assert!(
        hint.is_some_and(|ms| (60_000..=90_000).contains(&ms)),
        "retry hint {hint:?} ms"
    );
}

async fn scenario(db: TestDb, broken: Broken) {
    let env = start(db.store().await.unwrap(), |_| {}).await;
    let token = env.token(2).await;
    let victim = env.join_node(&token).await;
    let other = env.join_node(&token).await;
    let (_tx, mut live) = open_session(&env, &other).await;
    let (mut wire, mut reader) = common::wire_session(
        env.gateway.addr,
        env.keys.serving_ca.cert_der(),
        (other.chain.clone(), other.key.pkcs8_der().to_vec()),
    )
    .await
    .expect("a session-wire session");
    assert_eq!(health_status(&env).await, ServingStatus::Serving as i32);

    // The undecodable revocation of the victim, appended straight to the log.
    let good = events::schema::NodeIdentityRevoked {
        node_id: victim.node_id.clone(),
        reason: "undecodable".into(),
        new_identity_generation: 2,
        revoked_serials: vec![],
    };
    let (schema_version, payload) = match broken {
        Broken::Payload => (1, vec![0x0a, 0xff]),
        Broken::SchemaVersion => (99, prost::Message::encode_to_vec(&good)),
    };
    let event = NewEvent::from_bytes(
        new_event_id(),
        "node.identity.revoked",
        schema_version,
        "t1",
        commands::Clock::now_us(&commands::SystemClock),
        payload,
    );
    let mut tx = env.store.begin().await.unwrap();
    let appended = tx
        .append(
            &format!("node/{}", victim.node_id),
            ExpectedVersion::Any,
            &[event],
        )
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let position = appended.positions[0];

    // Health turns NOT_SERVING (the health task follows on its 250 ms tick), bounded.
    let deadline = Instant::now() + Duration::from_secs(10);
    while health_status(&env).await != ServingStatus::NotServing as i32 {
        assert!(
            Instant::now() < deadline,
            "{broken:?}: health still SERVING 10 s after an undecodable revocation at {position}: the feed skipped it"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let why = env
        .gateway
        .sources
        .feed
        .halted()
        .expect("the feed says it stopped")
        .to_owned();
    let expected_source = match broken {
        Broken::Payload => "payload is not a valid node.identity.revoked".to_owned(),
        Broken::SchemaVersion => format!(
            "has schema version 99; this build reads up to {} for node.identity.revoked",
            <events::schema::NodeIdentityRevoked as events::EventPayload>::SCHEMA_VERSION
        ),
    };
    assert!(
        why.starts_with(&format!(
            "the node.identity.revoked event at log position {position} does not decode (event at position {position}"
        )) && why.contains(&expected_source)
            && why.ends_with(
                "it was not skipped: upgrade this gateway if a newer control plane wrote it, or inspect that row of the `events` table, then restart the gateway"
            ),
        "{why}"
    );

    // The live sessions (of another node: which node was revoked is unknown) were ended, with
    // the reason every new session is refused with and a retry hint of a minute or more.
    let refusal = format!(
        "the gateway's revocation feed has stopped ({why}); every node session is refused until the gateway is fixed and restarted"
    );
    let ended = tokio::time::timeout(Duration::from_secs(5), live.next())
        .await
        .expect("the live session ended within 5 s");
    match ended {
        Some(Err(status)) => {
            assert_eq!(status.code(), Code::Unavailable, "{status:?}");
            assert_eq!(status.message(), refusal);
            assert_halted_hint(pushback_ms(&status));
        }
        other => panic!("{broken:?}: the session did not end with the feed's reason: {other:?}"),
    }
    let end = tokio::time::timeout(Duration::from_secs(5), reader.next(&mut wire))
        .await
        .expect("the wire session ended within 5 s");
    match end {
        Ok(Some(proto::session_wire::Frame::End {
            code,
            message,
            pushback_ms,
        })) => {
            assert_eq!(code, Code::Unavailable as i32);
            assert_eq!(message, refusal);
            assert_halted_hint(pushback_ms);
        }
        other => {
            panic!("{broken:?}: the wire session did not end with the feed's reason: {other:?}")
        }
    }
    assert_eq!(env.gateway.sources.sessions.len(), 0);

    // A later good commit does not bring it back: the feed does not move past the event.
    env.token(1).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(health_status(&env).await, ServingStatus::NotServing as i32);
    let page = env.gateway.sources.render();
    assert!(page.contains("bc_revocation_feed_halted 1"), "{page}");
    assert!(page.contains("bc_revocation_feed_stale 1"), "{page}");

    // New sessions, of either node, are refused with the reason.
    for node in [&victim, &other] {
        let mut c = env.client(Some(node)).await.unwrap();
        let (_tx, rx) = tokio::sync::mpsc::channel(1);
        let refused = c
            .session(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await
            .unwrap_err();
        assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
        assert_eq!(refused.message(), refusal);
        assert_halted_hint(pushback_ms(&refused));
    }
    assert!(env
        .gateway
        .sources
        .render()
        .contains("bc_sessions_refused_total{outcome=\"feed-stale\"} 2"));
    env.gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undecodable_revocation_payload_stops_the_feed_on_sqlite() {
    scenario(TestDb::sqlite().unwrap(), Broken::Payload).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undecodable_revocation_payload_stops_the_feed_on_postgres() {
    scenario(TestDb::postgres().await.unwrap(), Broken::Payload).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_revocation_schema_version_stops_the_feed_on_sqlite() {
    scenario(TestDb::sqlite().unwrap(), Broken::SchemaVersion).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_revocation_schema_version_stops_the_feed_on_postgres() {
    scenario(TestDb::postgres().await.unwrap(), Broken::SchemaVersion).await;
}
