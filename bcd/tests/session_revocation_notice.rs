//! A RevocationNotice ends the session as revoked only when it names this session's own
//! certificate. A notice naming another serial of the node (a reclaim's old certificate, read
//! late by an older gateway's feed) must not make bcd record its new, valid certificate as
//! revoked and stop: the session is lost, and the next handshake is the judge (a revoked
//! certificate is refused there). Over real TLS and gRPC against a fake gateway.

use crate::common::{joined, keyset, now};
use crate::renewal_support::*;

use std::sync::Arc;

use bcd::client::{certificate_spki_pin, connect_session, ClientIdentity};
use bcd::files::identity::load;
use bcd::node::{hold_session, SessionEnd};
use time::Duration;

/// The session's end when the gateway sends a notice naming `serial` (`None`: this
/// certificate's own), and this certificate's serial.
async fn ended_by_notice(serial: Option<&str>) -> (SessionEnd, String) {
    let ks = keyset();
    let tmp = tempfile::tempdir().expect("tempdir");
    let (data, _, _) = joined(tmp.path(), &ks, "node_a");
    let loaded = load(&data).expect("identity");
    let own = loaded.leaf.serial.to_hex();
    let notice = proto::GatewayMessage {
        body: Some(proto::gateway_message::Body::Revocation(
            proto::RevocationNotice {
                serial: serial.map_or(own.to_ascii_uppercase(), str::to_owned),
                reason: "reclaim".into(),
                revoked_at_ms: 0,
            },
        )),
    };
    let never: RenewAnswer = Arc::new(|_| Err(tonic::Status::unavailable("no")));
    let gw = fake_gateway_with(
        &ks,
        never,
        now().unix_timestamp() * 1000,
        OtherAnswers {
            after_welcome: vec![notice],
            ..OtherAnswers::default()
        },
    )
    .await;
    let pin = certificate_spki_pin(ks.serving_ca.cert_der()).expect("pin");
    let identity = ClientIdentity::new(&loaded.stored.chain, &loaded.key);
    let client = connect_session(&gw.server(), pin, &identity)
        .await
        .expect("session");
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
    (end, own)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notice_naming_this_certificate_ends_the_session_revoked() {
    let (end, own) = ended_by_notice(None).await;
    match end {
        SessionEnd::Revoked { reason, serial } => {
            assert_eq!(
                (reason.as_str(), serial.to_ascii_lowercase()),
                ("reclaim", own)
            )
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notice_naming_another_certificate_of_the_node_is_a_lost_session() {
    let (end, own) = ended_by_notice(Some("00ff00ff")).await;
    match end {
        SessionEnd::Lost(why) => assert_eq!(
            why,
            format!(
                "the gateway announced the revocation of another certificate of this node \
                 (serial 00ff00ff: reclaim), not this one ({own}); reconnecting, and the \
                 handshake will refuse this certificate if it is revoked too"
            )
        ),
        other => panic!("{other:?}"),
    }
}
