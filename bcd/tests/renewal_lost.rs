//! Issue 40, item 2: a renewal whose answer was lost, followed by a restart of bcd, must not
//! make the node look like a clone. The server may have committed the renewal; it answers it
//! again only for the same next key (a superseded leaf renewing for another key is
//! `renew:superseded`, every certificate revoked). So `node.key.next` stays on disk while a
//! renewal for it may have been committed, a restarted bcd retries with it, and it goes only
//! once the stored leaf certifies it or the server refused it. Against a fake gateway holding a
//! real serving certificate, over real TLS.

use crate::common;
use crate::renewal_support::*;

use std::sync::{Arc, Mutex};

use bcd::client::{certificate_spki_pin, connect, ClientIdentity, NodeClient};
use bcd::files::identity::{load, LoadedIdentity, NextKeyOutcome};
use bcd::files::NEXT_KEY_FILE;
use bcd::node::{renew_retrying, RenewError};
use bcd::renewal::request::PendingRenewal;
use common::{joined, keyset, now};
use domain::pki::{
    issue_node_certificate, KeySet, NodeCertificateDecision, NodeIdentity, PublicKey, Serial,
    VerifiedCsr,
};

async fn client_for(ks: &KeySet, gw: &FakeGateway, loaded: &LoadedIdentity) -> NodeClient {
    let pin = certificate_spki_pin(ks.serving_ca.cert_der()).unwrap();
    let identity = ClientIdentity::new(&loaded.stored.chain, &loaded.key);
    connect(&gw.server(), pin, Some(&identity)).await.unwrap()
}

/// A gateway whose JoinService answers each renewal with `first` for the first call (an error
/// status), then signs a certificate for the CSR's key; every CSR key is recorded.
fn gateway_answering(
    ks: &Arc<KeySet>,
    id: &NodeIdentity,
    first: tonic::Status,
    seen: Arc<Mutex<Vec<PublicKey>>>,
) -> RenewAnswer {
    let (id, keys) = (id.clone(), ks.clone());
    Arc::new(move |req| {
        let mut log = seen.lock().unwrap();
        log.push(csr_key(&req));
        if log.len() == 1 {
            return Err(first.clone());
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
        let mut answer = body(&id, sha, chain, now());
        answer.allowed_kinds = vec!["diag.*".into()];
        Ok(signed(&keys.join_signing, sha, &answer))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_renewal_is_retried_for_the_same_key_after_a_restart() {
    let ks = Arc::new(keyset());
    let tmp = tempfile::tempdir().unwrap();
    let (data, _, _) = joined(tmp.path(), &ks, "node_a");
    let loaded = load(&data).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let lost = tonic::Status::unavailable("connection reset");
    let gw = fake_gateway(
        &ks,
        gateway_answering(&ks, &loaded.leaf, lost, seen.clone()),
        0,
    )
    .await;
    let pin = Some(ks.join_signing.public_key());

    // The first attempt: the answer is lost on the way back.
    let mut client = client_for(&ks, &gw, &loaded).await;
    let err = renew_retrying(
        &mut client,
        &data,
        &loaded,
        pin,
        &mut PendingRenewal::default(),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, RenewError::Call(..)), "{err}");
    assert!(
        data.exists(NEXT_KEY_FILE),
        "node.key.next is kept: the server may have committed the renewal"
    );

    // bcd restarts: nothing in memory, the identity loaded again from disk.
    drop(loaded);
    let restarted = load(&data).unwrap();
    assert_eq!(restarted.next_key, NextKeyOutcome::Kept);
    assert!(data.exists(NEXT_KEY_FILE), "a restart keeps it too");
    let mut client = client_for(&ks, &gw, &restarted).await;
    let renewed = renew_retrying(
        &mut client,
        &data,
        &restarted,
        pin,
        &mut PendingRenewal::default(),
    )
    .await
    .unwrap();
    let keys = seen.lock().unwrap().clone();
    assert_eq!(keys.len(), 2);
    assert_eq!(keys[0], keys[1], "the retry certifies the same key");
    assert_eq!(*renewed.key.public_key(), keys[0]);
    assert!(!data.exists(NEXT_KEY_FILE), "promoted once certified");
    assert_eq!(load(&data).unwrap().next_key, NextKeyOutcome::Absent);
    // The signed answer's allowed kinds replace the stored ones (issue 40 item 16).
    assert_eq!(renewed.stored.allowed_kinds, ["diag.*"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_renewal_drops_its_next_key() {
    let ks = Arc::new(keyset());
    for refused in [
        tonic::Status::permission_denied("Renew refused"),
        tonic::Status::resource_exhausted("this node renewed 6 times in the last hour"),
        tonic::Status::invalid_argument("a bad request"),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let (data, _, _) = joined(tmp.path(), &ks, "node_a");
        let loaded = load(&data).unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let answer = gateway_answering(&ks, &loaded.leaf, refused.clone(), seen.clone());
        let gw = fake_gateway(&ks, answer, 0).await;
        let pin = Some(ks.join_signing.public_key());
        let mut client = client_for(&ks, &gw, &loaded).await;
        let mut pending = PendingRenewal::default();
        renew_retrying(&mut client, &data, &loaded, pin, &mut pending)
            .await
            .unwrap_err();
        assert!(
            !data.exists(NEXT_KEY_FILE),
            "{refused:?}: the server answered: no renewal was committed"
        );
        // The next attempt (even after a restart) makes a fresh key.
        let restarted = load(&data).unwrap();
        assert_eq!(restarted.next_key, NextKeyOutcome::Absent);
        let mut client = client_for(&ks, &gw, &restarted).await;
        renew_retrying(
            &mut client,
            &data,
            &restarted,
            pin,
            &mut PendingRenewal::default(),
        )
        .await
        .unwrap();
        let keys = seen.lock().unwrap().clone();
        assert_ne!(keys[0], keys[1], "{refused:?}");
    }
}
