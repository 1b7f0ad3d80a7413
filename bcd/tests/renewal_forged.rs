//! Issue 17 item 2 and the Welcome's server time, over real TLS against a fake gateway that
//! holds a real serving certificate (a compromised gateway):
//!
//! * it answers Renew with a 10-year certificate from its own CA for this node's identity and
//!   new key; bcd refuses it before storing anything: `identity.json` and `node.key` are byte
//!   for byte as before, no `node.key.next` is left, `bcd status` says the same;
//! * a Welcome whose server time is in 2036 does not move the stored `serverTime`;
//! * an answer the JoinService signed is stored, and its signed server time is the mark;
//! * a RESOURCE_EXHAUSTED renewal with `grpc-retry-pushback-ms` schedules the next attempt at
//!   exactly that time;
//! * a renewal whose answer is lost (the server may have committed it) is retried for the same
//!   next key, so the server answers its certificate again instead of flagging a clone.

use crate::common;
use crate::renewal_support::*;

use std::sync::Arc;

use bcd::client::{
    certificate_spki_pin, connect, connect_session, ClientIdentity, NodeClient, SessionWire,
};
use bcd::files::identity::{load, read_stored, LoadedIdentity};
use bcd::files::{DataDir, IDENTITY_FILE, NEXT_KEY_FILE, NODE_KEY_FILE};
use bcd::node::{hold_session, renew_once, renew_retrying, RenewError, SessionEnd};
use bcd::renewal::request::PendingRenewal;
use bcd::renewal::schedule::{next_renewal_attempt, Pushback};
use common::{joined, keyset, now};
use domain::pki::{
    issue_node_certificate, KeyRole, KeySet, NodeCertificateDecision, NodeIdentity, PrivateKey,
    Serial, VerifiedCsr,
};
use time::macros::datetime;
use time::Duration;

/// Everything on the node a renewal could change, and what `bcd status` says.
#[derive(Debug, PartialEq, Eq)]
struct NodeFiles {
    identity: String,
    key: String,
    next_key: bool,
    status: String,
}

fn snapshot(data: &DataDir, at: time::OffsetDateTime) -> NodeFiles {
    NodeFiles {
        identity: std::fs::read_to_string(data.file(IDENTITY_FILE)).unwrap(),
        key: std::fs::read_to_string(data.file(NODE_KEY_FILE)).unwrap(),
        next_key: data.exists(NEXT_KEY_FILE),
        status: bcd::status::status(
            data,
            &bcd::node_key::TpmHost::none(),
            &bcd::status::SigningKey::Loads,
            at,
        )
        .to_text(),
    }
}

async fn client_for(ks: &KeySet, gw: &FakeGateway, loaded: &LoadedIdentity) -> NodeClient {
    let pin = certificate_spki_pin(ks.serving_ca.cert_der()).unwrap();
    let identity = ClientIdentity::new(&loaded.stored.chain, &loaded.key);
    connect(&gw.server(), pin, Some(&identity)).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateways_ten_year_certificate_from_its_own_ca_is_refused_and_nothing_changes() {
    let ks = keyset();
    let tmp = tempfile::tempdir().unwrap();
    let (data, _, _) = joined(tmp.path(), &ks, "node_a");
    let loaded = load(&data).unwrap();
    let at = now();
    let before = snapshot(&data, at);
    assert!(
        before.status.starts_with("joined as node_a"),
        "{}",
        before.status
    );

    // The gateway mints a certificate for this node's identity and new key, from its own CA,
    // for ten years, and signs the answer with a key of its own.
    let id = loaded.leaf.clone();
    let forge: RenewAnswer = Arc::new(move |req| {
        let (leaf, ca) = own_ca_leaf(
            &id.spiffe_id,
            "bc-role:node",
            &csr_key(&req),
            Duration::days(3650),
        );
        let own = PrivateKey::generate(KeyRole::JoinSigning).unwrap();
        let sha = csr_sha256(&req);
        Ok(signed(&own, sha, &body(&id, sha, vec![leaf, ca], now())))
    });
    let gw = fake_gateway(&ks, forge, 0).await;
    let mut client = client_for(&ks, &gw, &loaded).await;
    let err = renew_once(
        &mut client,
        &data,
        &loaded,
        Some(ks.join_signing.public_key()),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, RenewError::Answer(_)), "{err:?}");
    assert_eq!(
        err.to_string(),
        "renewal: the answer's signature does not verify under the pinned join signing key \
         (join_signing_key_pin): the gateway relayed an answer the JoinService did not sign"
    );
    assert_eq!(snapshot(&data, at), before);
    // The identity still loads as it was: the real key, the real certificate.
    let again = load(&data).unwrap();
    assert_eq!(again.leaf, loaded.leaf);
    assert_eq!(again.key.public_key(), loaded.key.public_key());

    // The same forgery with no signature at all (the wire before issue 17): refused the same.
    let id = loaded.leaf.clone();
    let unsigned: RenewAnswer = Arc::new(move |req| {
        let (leaf, ca) = own_ca_leaf(
            &id.spiffe_id,
            "bc-role:node",
            &csr_key(&req),
            Duration::days(3650),
        );
        let mut answer = signed(
            &ks_free_signer(),
            csr_sha256(&req),
            &body(&id, csr_sha256(&req), vec![leaf, ca], now()),
        );
        answer.signature.clear();
        Ok(answer)
    });
    let gw = fake_gateway(&ks, unsigned, 0).await;
    let mut client = client_for(&ks, &gw, &loaded).await;
    let err = renew_once(
        &mut client,
        &data,
        &loaded,
        Some(ks.join_signing.public_key()),
    )
    .await
    .unwrap_err();
    assert!(
        err.to_string().contains("signature does not verify"),
        "{err}"
    );
    assert_eq!(snapshot(&data, at), before);
}

fn ks_free_signer() -> PrivateKey {
    PrivateKey::generate(KeyRole::JoinSigning).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_join_signing_key_no_renewal_is_asked_for() {
    let ks = keyset();
    let tmp = tempfile::tempdir().unwrap();
    let (data, _, _) = joined(tmp.path(), &ks, "node_a");
    let loaded = load(&data).unwrap();
    let at = now();
    let before = snapshot(&data, at);
    let never: RenewAnswer = Arc::new(|_| panic!("no renewal may be sent"));
    let gw = fake_gateway(&ks, never, 0).await;
    let mut client = client_for(&ks, &gw, &loaded).await;
    let err = renew_once(&mut client, &data, &loaded, None)
        .await
        .unwrap_err();
    assert!(matches!(err, RenewError::NoSigningKey), "{err:?}");
    assert_eq!(snapshot(&data, at), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_welcome_from_2036_does_not_move_the_server_time() {
    let ks = keyset();
    let tmp = tempfile::tempdir().unwrap();
    let (data, _, _) = joined(tmp.path(), &ks, "node_a");
    // A mark an hour ago, as a signed answer left it.
    let mut stored = read_stored(&data).unwrap().unwrap();
    let mark = now() - Duration::hours(1);
    stored.observe_server_time(mark);
    data.write(IDENTITY_FILE, &stored.to_json()).unwrap();
    let before = std::fs::read_to_string(data.file(IDENTITY_FILE)).unwrap();

    let loaded = load(&data).unwrap();
    let never: RenewAnswer = Arc::new(|_| Err(tonic::Status::unavailable("no")));
    let in_2036 = datetime!(2036-06-01 00:00 UTC).unix_timestamp() * 1000;
    let gw = fake_gateway(&ks, never, in_2036).await;
    // The fake gateway speaks gRPC only: the session falls back to it.
    let pin = certificate_spki_pin(ks.serving_ca.cert_der()).unwrap();
    let identity = ClientIdentity::new(&loaded.stored.chain, &loaded.key);
    let client = connect_session(&gw.server(), pin, &identity).await.unwrap();
    assert_eq!(client.wire(), SessionWire::Grpc);
    // Hold the session a few seconds: the Welcome arrives and is handled.
    let mut welcomed_at = None;
    let end = hold_session(
        client,
        &data,
        &loaded,
        now() + Duration::seconds(3),
        bcd::node::Held {
            status_interval: std::time::Duration::from_secs(1),
            signing_key: None,
            files: &bcd::files::pem_files::FileSettings::defaults(data.root()),
        },
        None,
        &mut welcomed_at,
    )
    .await;
    assert!(matches!(end, SessionEnd::Due), "{end:?}");
    // The Welcome's arrival is noted: the reconnect backoff measures the session from it.
    assert!(welcomed_at.is_some());
    assert_eq!(
        std::fs::read_to_string(data.file(IDENTITY_FILE)).unwrap(),
        before
    );
    assert_eq!(
        read_stored(&data).unwrap().unwrap().server_time(),
        Some(mark)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_the_join_service_signed_is_stored_with_its_signed_server_time() {
    let ks = Arc::new(keyset());
    let tmp = tempfile::tempdir().unwrap();
    let (data, _, _) = joined(tmp.path(), &ks, "node_a");
    let loaded = load(&data).unwrap();
    let signed_time = now() + Duration::seconds(7);
    let (id, keys) = (loaded.leaf.clone(), ks.clone());
    let honest: RenewAnswer = Arc::new(move |req| {
        let csr = VerifiedCsr::verify(&req.csr).unwrap();
        let issued = issue_node_certificate(
            &keys.node_ca,
            &csr,
            &NodeCertificateDecision {
                spiffe_id: id.spiffe_id.clone(),
                role: id.role,
                serial: Serial::generate().unwrap(),
                requested_lifetime: None,
                statements: vec![],
            },
            now(),
        )
        .unwrap();
        let chain = vec![issued.der, keys.node_ca.cert_der().to_vec()];
        let sha = csr_sha256(&req);
        Ok(signed(
            &keys.join_signing,
            sha,
            &body(&id, sha, chain, signed_time),
        ))
    });
    let gw = fake_gateway(&ks, honest, 0).await;
    let mut client = client_for(&ks, &gw, &loaded).await;
    let renewed = renew_once(
        &mut client,
        &data,
        &loaded,
        Some(ks.join_signing.public_key()),
    )
    .await
    .unwrap();
    assert_ne!(renewed.leaf.serial, loaded.leaf.serial);
    assert_eq!(renewed.leaf.spiffe_id, loaded.leaf.spiffe_id);
    assert!(!data.exists(NEXT_KEY_FILE));
    assert_eq!(renewed.stored.server_time(), Some(signed_time));
    let check = NodeIdentity::from_leaf_der(&renewed.stored.chain[0], &ks.trust_domain).unwrap();
    assert_eq!(check.public_key, *renewed.key.public_key());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_gateways_pushback_is_when_the_next_renewal_is_tried() {
    let ks = keyset();
    let tmp = tempfile::tempdir().unwrap();
    let (data, _, _) = joined(tmp.path(), &ks, "node_a");
    let loaded = load(&data).unwrap();
    let at = now();
    let before = snapshot(&data, at);
    let busy: RenewAnswer = Arc::new(|_| {
        let mut s = tonic::Status::resource_exhausted(
            "this node renewed 6 times in the last hour; retry in 1234000 ms",
        );
        s.metadata_mut()
            .insert("grpc-retry-pushback-ms", "1234000".parse().unwrap());
        Err(s)
    });
    let gw = fake_gateway(&ks, busy, 0).await;
    let mut client = client_for(&ks, &gw, &loaded).await;
    let err = renew_once(
        &mut client,
        &data,
        &loaded,
        Some(ks.join_signing.public_key()),
    )
    .await
    .unwrap_err();
    let pushback = err.pushback();
    assert_eq!(
        pushback,
        Some(Pushback::After(Duration::milliseconds(1_234_000)))
    );
    assert_eq!(
        err.to_string(),
        "renewal: the gateway answered ResourceExhausted: this node renewed 6 times in the last \
         hour; retry in 1234000 ms"
    );
    // The schedule waits it out exactly (no backoff, no jitter), within the certificate's life.
    assert_eq!(
        next_renewal_attempt(at, loaded.leaf.not_after, 3, pushback, 0.9),
        Some(at + Duration::milliseconds(1_234_000))
    );
    // Nothing changed on the node; the next key was removed.
    assert_eq!(snapshot(&data, at), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_whose_answer_was_lost_is_retried_for_the_same_key() {
    let ks = Arc::new(keyset());
    let tmp = tempfile::tempdir().unwrap();
    let (data, _, _) = joined(tmp.path(), &ks, "node_a");
    let loaded = load(&data).unwrap();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (id, keys, log) = (loaded.leaf.clone(), ks.clone(), seen.clone());
    // The first answer is lost on the way back; the second is the JoinService's.
    let flaky: RenewAnswer = Arc::new(move |req| {
        let mut log = log.lock().unwrap();
        log.push(csr_key(&req));
        if log.len() == 1 {
            return Err(tonic::Status::unavailable("connection reset"));
        }
        let csr = VerifiedCsr::verify(&req.csr).unwrap();
        let issued = issue_node_certificate(
            &keys.node_ca,
            &csr,
            &NodeCertificateDecision {
                spiffe_id: id.spiffe_id.clone(),
                role: id.role,
                serial: Serial::generate().unwrap(),
                requested_lifetime: None,
                statements: vec![],
            },
            now(),
        )
        .unwrap();
        let chain = vec![issued.der, keys.node_ca.cert_der().to_vec()];
        let sha = csr_sha256(&req);
        Ok(signed(
            &keys.join_signing,
            sha,
            &body(&id, sha, chain, now()),
        ))
    });
    let gw = fake_gateway(&ks, flaky, 0).await;
    let mut client = client_for(&ks, &gw, &loaded).await;
    let mut pending = PendingRenewal::default();
    let pin = Some(ks.join_signing.public_key());
    let err = renew_retrying(&mut client, &data, &loaded, pin, &mut pending)
        .await
        .unwrap_err();
    assert!(matches!(err, RenewError::Call(..)), "{err}");
    let renewed = renew_retrying(&mut client, &data, &loaded, pin, &mut pending)
        .await
        .unwrap();
    let keys_seen = seen.lock().unwrap().clone();
    assert_eq!(keys_seen.len(), 2);
    assert_eq!(
        keys_seen[0], keys_seen[1],
        "the retry certifies the same key"
    );
    assert_eq!(*renewed.key.public_key(), keys_seen[0]);
    assert!(!data.exists(NEXT_KEY_FILE));
    // The next renewal, from the new leaf, makes a fresh key.
    let mut client = client_for(&ks, &gw, &renewed).await;
    renew_retrying(&mut client, &data, &renewed, pin, &mut pending)
        .await
        .unwrap();
    let keys_seen = seen.lock().unwrap().clone();
    assert_eq!(keys_seen.len(), 3);
    assert_ne!(keys_seen[2], keys_seen[0]);
}
