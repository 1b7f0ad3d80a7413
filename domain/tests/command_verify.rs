//! `domain::command::verify_command` and `verify_worker`: one test per refusal reason
//! (every `CommandError` and `WorkerError` variant), each asserting the exact error.
//!
//! Certificates the deployment never issues (a 25-hour worker, a node-role leaf, an Ed25519
//! worker) are made with rcgen under a CA of the test's own, passed as the held root.

use domain::command::{
    sign_command, verify_command, CommandBody, CommandError, SignedCommand, WorkerError,
    MAX_COMMAND_LIFETIME_MS,
};
use domain::pki::{
    issue_worker_certificate, KeyRole, KeySet, KeySetLifetimes, PrivateKey, Serial, TrustDomain,
};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    PKCS_ECDSA_P256_SHA256, PKCS_ED25519,
};
use time::{Duration, OffsetDateTime};

const NODE: &str = "node_a";

fn now() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_790_000_000).unwrap()
}

fn now_ms() -> i64 {
    now().unix_timestamp() * 1000
}

fn td() -> TrustDomain {
    TrustDomain::new("example.org").unwrap()
}

struct Fixture {
    keys: KeySet,
    worker: PrivateKey,
    cert: Vec<u8>,
}

fn fixture() -> Fixture {
    let keys =
        KeySet::generate(td(), now() - Duration::hours(1), KeySetLifetimes::default()).unwrap();
    let worker = PrivateKey::generate(KeyRole::Worker).unwrap();
    let cert = issue_worker_certificate(
        &keys.command_signing_root,
        worker.public_key(),
        "worker-test",
        &Serial::generate().unwrap(),
        Duration::hours(24),
        now() - Duration::minutes(1),
    )
    .unwrap()
    .der;
    Fixture { keys, worker, cert }
}

impl Fixture {
    fn roots(&self) -> Vec<Vec<u8>> {
        vec![self.keys.command_signing_root.cert_der().to_vec()]
    }

    fn sign(&self, body: &CommandBody) -> SignedCommand {
        sign_command(&self.worker, &self.cert, body, &td()).unwrap()
    }

    fn verify(&self, signed: &SignedCommand) -> Result<(), CommandError> {
        verify_command(signed, &self.roots(), &td(), NODE, now_ms()).map(|_| ())
    }
}

fn body() -> CommandBody {
    CommandBody {
        command_id: "cmd_00000000000000000000000000000001".into(),
        node_id: NODE.into(),
        tenant_id: "t1".into(),
        kind: "diag.ping".into(),
        payload_type_url: "type.googleapis.com/bc.command.v1.DiagPing".into(),
        payload: Vec::new(),
        batch_id: Vec::new(),
        issued_at_ms: now_ms(),
        not_after_ms: now_ms() + 3_600_000,
    }
}

#[test]
fn a_valid_command_verifies() {
    let f = fixture();
    let verified = verify_command(&f.sign(&body()), &f.roots(), &td(), NODE, now_ms()).unwrap();
    assert_eq!(verified.body, body());
    assert_eq!(verified.worker.name, "worker-test");
}

// ---- WorkerError, one per reason ----

#[test]
fn no_roots() {
    let f = fixture();
    assert_eq!(
        verify_command(&f.sign(&body()), &[], &td(), NODE, now_ms()),
        Err(CommandError::Signer(WorkerError::NoRoots))
    );
}

#[test]
fn no_certificate() {
    let f = fixture();
    let mut signed = f.sign(&body());
    signed.worker_chain.clear();
    assert_eq!(
        f.verify(&signed),
        Err(CommandError::Signer(WorkerError::NoCertificate))
    );
}

#[test]
fn malformed_certificate() {
    let f = fixture();
    let mut signed = f.sign(&body());
    signed.worker_chain = vec![b"not a certificate".to_vec()];
    assert_eq!(
        f.verify(&signed),
        Err(CommandError::Signer(WorkerError::Malformed))
    );
}

#[test]
fn a_ca_certificate_is_not_a_worker() {
    let f = fixture();
    let mut signed = f.sign(&body());
    signed.worker_chain = vec![f.keys.command_signing_root.cert_der().to_vec()];
    assert_eq!(
        f.verify(&signed),
        Err(CommandError::Signer(WorkerError::IsCa))
    );
}

/// A CA of the test's own (P-256) and its certificate DER.
fn own_ca() -> (Issuer<'static, KeyPair>, Vec<u8>) {
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, "own root");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    params.not_before = now() - Duration::days(1);
    params.not_after = now() + Duration::days(30);
    let der = params.self_signed(&key).unwrap().der().to_vec();
    (Issuer::new(params, key), der)
}

/// A leaf under `ca` with `ous` as its organizational units, from `from` for `lifetime`.
fn own_leaf(
    ca: &Issuer<'static, KeyPair>,
    key: &KeyPair,
    ous: &[&str],
    from: OffsetDateTime,
    lifetime: Duration,
) -> Vec<u8> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    for ou in ous {
        params
            .distinguished_name
            .push(DnType::OrganizationalUnitName, *ou);
    }
    params.distinguished_name.push(DnType::CommonName, "leaf");
    params.is_ca = IsCa::ExplicitNoCa;
    params.not_before = from;
    params.not_after = from + lifetime;
    params.signed_by(key, ca).unwrap().der().to_vec()
}

fn verify_with_leaf(leaf: Vec<u8>, root: Vec<u8>) -> Result<(), CommandError> {
    let f = fixture();
    let mut signed = f.sign(&body());
    signed.worker_chain = vec![leaf];
    verify_command(&signed, &[root], &td(), NODE, now_ms()).map(|_| ())
}

#[test]
fn a_leaf_of_another_role_is_not_a_worker() {
    let (ca, root) = own_ca();
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
    let leaf = own_leaf(
        &ca,
        &key,
        &["bc-role:node"],
        now() - Duration::hours(1),
        Duration::hours(2),
    );
    assert_eq!(
        verify_with_leaf(leaf, root.clone()),
        Err(CommandError::Signer(WorkerError::WrongRole("node".into())))
    );
    // No role at all is no worker either.
    let none = own_leaf(
        &ca,
        &key,
        &[],
        now() - Duration::hours(1),
        Duration::hours(2),
    );
    assert_eq!(
        verify_with_leaf(none, root),
        Err(CommandError::Signer(WorkerError::WrongRole(String::new())))
    );
}

#[test]
fn a_worker_certificate_living_over_24_hours_is_refused() {
    let (ca, root) = own_ca();
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
    let leaf = own_leaf(
        &ca,
        &key,
        &["bc-role:worker"],
        now() - Duration::hours(1),
        Duration::hours(25),
    );
    assert_eq!(
        verify_with_leaf(leaf, root),
        Err(CommandError::Signer(WorkerError::TooLong {
            seconds: 25 * 3600
        }))
    );
}

#[test]
fn a_worker_certificate_not_valid_at_the_issue_time_is_refused() {
    let f = fixture();
    // Issued (and checked) 25 hours from now, past the worker's 24 h.
    let mut late = body();
    late.issued_at_ms = now_ms() + 25 * 3_600_000;
    late.not_after_ms = late.issued_at_ms + 3_600_000;
    let signed = f.sign(&late);
    match verify_command(&signed, &f.roots(), &td(), NODE, late.issued_at_ms) {
        Err(CommandError::Signer(WorkerError::NotValidAt { at, .. })) => {
            assert_eq!(at, late.issued_at_ms / 1000)
        }
        other => panic!("expected NotValidAt, got {other:?}"),
    }
}

#[test]
fn a_worker_of_an_untrusted_root_is_refused() {
    let f = fixture();
    let other =
        KeySet::generate(td(), now() - Duration::hours(1), KeySetLifetimes::default()).unwrap();
    let roots = vec![
        other.command_signing_root.cert_der().to_vec(),
        other.root_ca.cert_der().to_vec(),
    ];
    assert_eq!(
        verify_command(&f.sign(&body()), &roots, &td(), NODE, now_ms()),
        Err(CommandError::Signer(WorkerError::Untrusted { roots: 2 }))
    );
}

#[test]
fn a_worker_key_that_is_not_p256_is_refused() {
    let (ca, root) = own_ca();
    let key = KeyPair::generate_for(&PKCS_ED25519).unwrap();
    let leaf = own_leaf(
        &ca,
        &key,
        &["bc-role:worker"],
        now() - Duration::hours(1),
        Duration::hours(2),
    );
    assert_eq!(
        verify_with_leaf(leaf, root),
        Err(CommandError::Signer(WorkerError::Key))
    );
}

// ---- CommandError, one per reason ----

#[test]
fn a_body_that_does_not_decode_is_malformed() {
    let f = fixture();
    let mut signed = f.sign(&body());
    signed.body = vec![0xff, 0xff, 0xff];
    assert!(
        matches!(f.verify(&signed), Err(CommandError::Malformed(m)) if m.starts_with("the body does not decode"))
    );
}

#[test]
fn a_batch_id_of_the_wrong_length_is_malformed() {
    let f = fixture();
    let mut b = body();
    b.batch_id = vec![1, 2, 3];
    assert_eq!(
        f.verify(&f.sign(&b)),
        Err(CommandError::Malformed("batch_id is not 32 bytes".into()))
    );
}

#[test]
fn a_tampered_signature_is_bad() {
    let f = fixture();
    let mut signed = f.sign(&body());
    signed.signature[10] ^= 1;
    assert_eq!(
        f.verify(&signed),
        Err(CommandError::BadSignature("example.org".into()))
    );
    signed.signature.truncate(10);
    assert_eq!(
        f.verify(&signed),
        Err(CommandError::BadSignature("example.org".into()))
    );
}

#[test]
fn a_command_for_another_node_is_refused() {
    let f = fixture();
    let mut b = body();
    b.node_id = "node_b".into();
    assert_eq!(
        f.verify(&f.sign(&b)),
        Err(CommandError::WrongNode {
            found: "node_b".into(),
            expected: NODE.into()
        })
    );
}

#[test]
fn a_command_issued_in_the_future_is_not_yet_valid() {
    let f = fixture();
    let mut b = body();
    b.issued_at_ms = now_ms() + 6 * 60_000;
    b.not_after_ms = b.issued_at_ms + 3_600_000;
    assert_eq!(
        f.verify(&f.sign(&b)),
        Err(CommandError::NotYetValid {
            issued_at_ms: b.issued_at_ms,
            now_ms: now_ms()
        })
    );
}

#[test]
fn a_command_past_its_not_after_has_expired() {
    let f = fixture();
    let signed = f.sign(&body());
    let at = body().not_after_ms;
    assert_eq!(
        verify_command(&signed, &f.roots(), &td(), NODE, at).map(|_| ()),
        Err(CommandError::Expired {
            not_after_ms: at,
            now_ms: at
        })
    );
}

#[test]
fn a_lifetime_over_72_hours_or_backwards_is_refused() {
    let f = fixture();
    let mut b = body();
    b.not_after_ms = b.issued_at_ms + MAX_COMMAND_LIFETIME_MS + 1;
    assert_eq!(
        f.verify(&f.sign(&b)),
        Err(CommandError::BadLifetime {
            issued_at_ms: b.issued_at_ms,
            not_after_ms: b.not_after_ms
        })
    );
    b.not_after_ms = b.issued_at_ms;
    assert_eq!(
        f.verify(&f.sign(&b)),
        Err(CommandError::BadLifetime {
            issued_at_ms: b.issued_at_ms,
            not_after_ms: b.issued_at_ms
        })
    );
}

#[test]
fn a_built_in_kind_with_another_payload_type_is_refused() {
    let f = fixture();
    let mut b = body();
    b.payload_type_url = "type.googleapis.com/bc.command.v1.NodeReboot".into();
    assert_eq!(
        f.verify(&f.sign(&b)),
        Err(CommandError::PayloadType {
            kind: "diag.ping".into(),
            found: "type.googleapis.com/bc.command.v1.NodeReboot".into(),
            expected: "type.googleapis.com/bc.command.v1.DiagPing".into()
        })
    );
}

#[test]
fn signing_with_a_key_that_is_not_a_worker_key_fails() {
    let f = fixture();
    let node_key = PrivateKey::generate(KeyRole::Node).unwrap();
    assert!(matches!(
        sign_command(&node_key, &f.cert, &body(), &td()),
        Err(CommandError::Sign(_))
    ));
}
