//! Signed commands: a worker certificate from the command-signing root signs a body that
//! verifies on the node, and the foundation's basic refusals (spec 003 "Signed intent").

use domain::command::{
    sign_command, verify_command, CommandBody, CommandError, WorkerError, MAX_COMMAND_LIFETIME_MS,
};
use domain::pki::{
    issue_worker_certificate, KeyRole, KeySet, KeySetLifetimes, PrivateKey, Serial, TrustDomain,
};
use time::{Duration, OffsetDateTime};

fn now() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_790_000_000).unwrap()
}

fn body(node: &str, issued_at_ms: i64) -> CommandBody {
    CommandBody {
        command_id: "cmd_1".into(),
        node_id: node.into(),
        tenant_id: "t1".into(),
        kind: "diag.ping".into(),
        payload_type_url: "type.googleapis.com/bc.command.v1.DiagPing".into(),
        payload: Vec::new(),
        batch_id: Vec::new(),
        issued_at_ms,
        not_after_ms: issued_at_ms + 3_600_000,
    }
}

#[test]
fn a_worker_signed_command_verifies_and_a_foreign_root_or_node_is_refused() {
    let td = TrustDomain::new("example.org").unwrap();
    let keys = KeySet::generate(td.clone(), now(), KeySetLifetimes::default()).unwrap();
    let worker_key = PrivateKey::generate(KeyRole::Worker).unwrap();
    let cert = issue_worker_certificate(
        &keys.command_signing_root,
        worker_key.public_key(),
        "bcctl-test",
        &Serial::generate().unwrap(),
        Duration::hours(24),
        now(),
    )
    .unwrap();
    let now_ms = now().unix_timestamp() * 1000;
    let signed = sign_command(&worker_key, &cert.der, &body("node_a", now_ms), &td).unwrap();
    let roots = vec![keys.command_signing_root.cert_der().to_vec()];
    let ok = verify_command(&signed, &roots, &td, "node_a", now_ms + 1000).unwrap();
    assert_eq!(ok.body.kind, "diag.ping");
    assert_eq!(ok.worker.name, "bcctl-test");

    assert_eq!(
        verify_command(&signed, &roots, &td, "node_b", now_ms),
        Err(CommandError::WrongNode {
            found: "node_a".into(),
            expected: "node_b".into()
        })
    );
    let other = KeySet::generate(td.clone(), now(), KeySetLifetimes::default()).unwrap();
    let foreign = vec![other.command_signing_root.cert_der().to_vec()];
    assert_eq!(
        verify_command(&signed, &foreign, &td, "node_a", now_ms),
        Err(CommandError::Signer(WorkerError::Untrusted { roots: 1 }))
    );
    let staging = TrustDomain::new("staging.example.org").unwrap();
    assert_eq!(
        verify_command(&signed, &roots, &staging, "node_a", now_ms),
        Err(CommandError::BadSignature("staging.example.org".into()))
    );
    // The node CA's key is no worker: a certificate it issued has role node, and a root is a CA.
    let as_root = sign_command(
        &worker_key,
        keys.command_signing_root.cert_der(),
        &body("node_a", now_ms),
        &td,
    )
    .unwrap();
    assert_eq!(
        verify_command(&as_root, &roots, &td, "node_a", now_ms),
        Err(CommandError::Signer(WorkerError::IsCa))
    );
    // Held past the worker's 24 h the command still verifies (checked at issue time), but not
    // past its own end, and never with a lifetime above 72 h.
    let later = now_ms + 25 * 3_600_000;
    let mut long = body("node_a", now_ms);
    long.not_after_ms = now_ms + MAX_COMMAND_LIFETIME_MS;
    let long = sign_command(&worker_key, &cert.der, &long, &td).unwrap();
    assert!(verify_command(&long, &roots, &td, "node_a", later).is_ok());
    assert!(matches!(
        verify_command(&signed, &roots, &td, "node_a", later),
        Err(CommandError::Expired { .. })
    ));
}
