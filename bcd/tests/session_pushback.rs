//! Issue 40, item 13: a gateway that ends a session with a retry hint (its revocation feed
//! stopped: UNAVAILABLE, the reason, `grpc-retry-pushback-ms`) has bcd's session end say so,
//! with the wait, which `bcd node` then waits out instead of reconnecting after its own 1 s.
//! Over real TLS and gRPC against a fake gateway; the session wire carries the same hint in
//! its End frame (`proto::session_wire`).

use crate::common::{joined, keyset, now};
use crate::renewal_support::*;

use std::sync::Arc;

use bcd::client::{certificate_spki_pin, connect_session, ClientIdentity};
use bcd::files::identity::load;
use bcd::node::{hold_session, SessionEnd};
use time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_ended_with_a_retry_hint_ends_pushed_back_with_its_reason() {
    let ks = keyset();
    let tmp = tempfile::tempdir().unwrap();
    let (data, _, _) = joined(tmp.path(), &ks, "node_a");
    let loaded = load(&data).unwrap();
    let never: RenewAnswer = Arc::new(|_| Err(tonic::Status::unavailable("no")));
    let mut halted = tonic::Status::unavailable(
        "the gateway's revocation feed has stopped (x); every node session is refused until the gateway is fixed and restarted",
    );
    halted
        .metadata_mut()
        .insert("grpc-retry-pushback-ms", "75000".parse().unwrap());
    let gw = fake_gateway_with(
        &ks,
        never,
        now().unix_timestamp() * 1000,
        OtherAnswers {
            end_sessions_with: Some(halted),
            ..OtherAnswers::default()
        },
    )
    .await;
    let pin = certificate_spki_pin(ks.serving_ca.cert_der()).unwrap();
    let identity = ClientIdentity::new(&loaded.stored.chain, &loaded.key);
    let client = connect_session(&gw.server(), pin, &identity).await.unwrap();
    let end = hold_session(
        client,
        &data,
        &loaded,
        now() + Duration::seconds(30),
        bcd::node::Held {
            status_interval: std::time::Duration::from_secs(1),
            signing_key: None,
            files: &bcd::files::pem_files::FileSettings::defaults(data.root()),
        },
        None,
        &mut None,
    )
    .await;
    match end {
        SessionEnd::PushedBack { why, wait } => {
            assert_eq!(wait, std::time::Duration::from_secs(75));
            assert!(why.contains("revocation feed has stopped"), "{why}");
        }
        other => panic!("expected the gateway's retry hint, got {other:?}"),
    }
}
