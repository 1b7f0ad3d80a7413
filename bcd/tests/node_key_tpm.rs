//! Node keys in a real software TPM (swtpm, each test its own): `node.key` holds only the
//! record, the key loads again through the TPM and signs the TLS handshake, `bcd status` and
//! `bcd doctor` say where it is, a file-key node moves into the TPM at its next renewal, the
//! renewal of a certificate naming the AK carries the AK's certification of the next key, and
//! each way that renewal fails (another TPM's AK, the TPM gone, the TPM cleared) is the spec's
//! message with nothing written.

use crate::common;
use crate::node_key_tls::mtls_handshake;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use bcd::files::identity::{load_in, LoadError};
use bcd::files::{NEXT_KEY_FILE, NODE_KEY_FILE};
use bcd::node_key::{NodeKey, NodeKeyKind, TpmHost};
use bcd::renewal::request::{prepare_renewal, PendingRenewal};
use bcd::status::{node_key_check, status, Level};
use common::{issue_for, joined_with, keyset, now};
use domain::pki::PublicKey;
use sha2::{Digest as _, Sha256};
use swtpm_fixture::swtpm::Swtpm;

fn tpm_key(host: &TpmHost) -> NodeKey {
    host.open().unwrap().create_node_key().unwrap().into()
}

fn u16_at(b: &[u8], at: usize) -> usize {
    usize::from(u16::from_be_bytes([b[at], b[at + 1]]))
}

/// A TPM2B at `at`: its contents and the offset after it.
fn tpm2b(b: &[u8], at: usize) -> (&[u8], usize) {
    let len = u16_at(b, at);
    (&b[at + 2..at + 2 + len], at + 2 + len)
}

/// The P-256 point of an ECC TPMT_PUBLIC whose symmetric and kdf are NULL.
fn ecc_point(public: &[u8]) -> PublicKey {
    // type, nameAlg, objectAttributes, authPolicy
    assert_eq!(u16_at(public, 0), 0x0023, "TPM_ALG_ECC");
    let (_, mut at) = tpm2b(public, 8);
    assert_eq!(u16_at(public, at), 0x0010, "symmetric NULL");
    at += 2;
    let scheme = u16_at(public, at);
    at += if scheme == 0x0010 { 2 } else { 4 };
    assert_eq!(u16_at(public, at), 0x0003, "NIST P-256");
    assert_eq!(u16_at(public, at + 2), 0x0010, "kdf NULL");
    let (x, at) = tpm2b(public, at + 4);
    let (y, _) = tpm2b(public, at);
    let mut point = vec![4u8];
    point.extend_from_slice(x);
    point.extend_from_slice(y);
    PublicKey::from_uncompressed_point(&point).unwrap()
}

/// Checks a TPM2_Certify as the control plane will: TPM_GENERATED, ATTEST_CERTIFY, extraData
/// `qualifying`, the certified name `0x000B || SHA-256(key_public)`, the AK's ECDSA signature.
fn check_certify(ak_public: &[u8], key_public: &[u8], info: &[u8], sig: &[u8], qualifying: &[u8]) {
    assert_eq!(&info[..4], &[0xFF, 0x54, 0x43, 0x47], "TPM_GENERATED");
    assert_eq!(u16_at(info, 4), 0x8017, "TPM_ST_ATTEST_CERTIFY");
    let (_signer, at) = tpm2b(info, 6);
    let (extra, at) = tpm2b(info, at);
    assert_eq!(extra, qualifying);
    // clockInfo (17 bytes), firmwareVersion (8), then the certified name.
    let (name, _) = tpm2b(info, at + 17 + 8);
    let mut want = vec![0x00, 0x0B];
    want.extend_from_slice(&Sha256::digest(key_public));
    assert_eq!(name, want.as_slice());
    assert_eq!(u16_at(sig, 0), 0x0018, "ECDSA");
    assert_eq!(u16_at(sig, 2), 0x000B, "SHA-256");
    let (r, at) = tpm2b(sig, 4);
    let (s, _) = tpm2b(sig, at);
    let mut rs = [0u8; 64];
    rs[32 - r.len()..32].copy_from_slice(r);
    rs[64 - s.len()..].copy_from_slice(s);
    let rs = domain::pki::Signature::from_bytes(&rs).unwrap();
    assert!(
        ecc_point(ak_public).verify_es256(info, &rs),
        "the AK's signature"
    );
}

#[tokio::test]
async fn a_tpm_key_signs_the_tls_handshake() {
    let tpm = Swtpm::start();
    let host = TpmHost::new(&tpm.tcti());
    let ks = keyset();
    let key = tpm_key(&host);
    let leaf = issue_for(&ks, &key, "n1", &[]);
    let chain = vec![leaf.clone(), ks.node_ca.cert_der().to_vec()];
    assert_eq!(mtls_handshake(&ks, chain, &key).await.unwrap(), leaf);
}

#[test]
fn node_key_holds_only_the_record_and_loads_through_the_tpm() {
    let tpm = Swtpm::start();
    let host = TpmHost::new(&tpm.tcti());
    let tmp = tempfile::tempdir().unwrap();
    let ks = keyset();
    let key = tpm_key(&host);
    let unique = *key.as_tpm().unwrap().unique();
    let (data, _) = joined_with(tmp.path(), &ks, "n1", &key, &[]);
    assert_eq!(
        std::fs::read_to_string(data.node_key()).unwrap(),
        format!(
            "-----BEGIN BCD TPM NODE KEY-----\n{}\n-----END BCD TPM NODE KEY-----\n",
            STANDARD.encode(unique)
        )
    );
    assert_eq!(data.mode(NODE_KEY_FILE), Some(0o600));
    let loaded = load_in(&data, &host).unwrap();
    assert_eq!(loaded.key.kind(), NodeKeyKind::Tpm);
    assert_eq!(loaded.key.public_key(), key.public_key());

    let report = status(&data, &host, &bcd::status::SigningKey::Loads, now());
    assert_eq!(report.node_key, Some("tpm"));
    assert!(
        report
            .to_text()
            .starts_with("joined as n1 (site eu-1, role node); node key in the TPM; certificate"),
        "{}",
        report.to_text()
    );
    assert_eq!(serde_json::to_value(&report).unwrap()["nodeKey"], "tpm");
    let check = node_key_check(NodeKeyKind::File, &host);
    assert_eq!(check.level, Level::Warn);
    assert_eq!(
        check.detail,
        format!(
            "a file, on a host with a TPM ({}): the next renewal moves it into the TPM",
            tpm.tcti()
        )
    );
}

#[test]
fn a_file_key_node_moves_into_the_tpm_at_its_next_renewal() {
    let tpm = Swtpm::start();
    let host = TpmHost::new(&tpm.tcti());
    let tmp = tempfile::tempdir().unwrap();
    let ks = keyset();
    let (data, _) = joined_with(
        tmp.path(),
        &ks,
        "n1",
        &NodeKey::generate_file().unwrap(),
        &[],
    );
    let current = load_in(&data, &host).unwrap();
    let (begun, parts) =
        prepare_renewal(&data, &current, now(), &mut PendingRenewal::default()).unwrap();
    assert_eq!(parts.warning, None);
    assert!(
        parts.key_attestation.is_none(),
        "no AK named: no certification"
    );
    let next = begun.next_key().as_tpm().unwrap();
    assert_eq!(
        std::fs::read_to_string(data.next_key()).unwrap(),
        format!(
            "-----BEGIN BCD TPM NODE KEY-----\n{}\n-----END BCD TPM NODE KEY-----\n",
            STANDARD.encode(next.unique())
        )
    );
    assert_eq!(data.mode(NEXT_KEY_FILE), Some(0o600));
}

#[test]
fn the_renewal_of_a_leaf_naming_the_ak_carries_its_certification_of_the_next_key() {
    let tpm = Swtpm::start();
    let host = TpmHost::new(&tpm.tcti());
    let tmp = tempfile::tempdir().unwrap();
    let ks = keyset();
    let ak = host.open().unwrap().attestation_key().unwrap();
    let key = tpm_key(&host);
    let (data, _) = joined_with(tmp.path(), &ks, "n1", &key, &[&ak.statement()]);
    let current = load_in(&data, &host).unwrap();
    let (begun, parts) =
        prepare_renewal(&data, &current, now(), &mut PendingRenewal::default()).unwrap();
    let next = begun.next_key().as_tpm().unwrap().clone();
    let attestation = parts.key_attestation.unwrap();
    assert_eq!(attestation.ak_public, ak.public_area);
    assert_eq!(attestation.key_public, next.public_area());
    check_certify(
        &attestation.ak_public,
        &attestation.key_public,
        &attestation.certify_info,
        &attestation.signature,
        &parts.csr_sha256,
    );
    // The control plane's own check (the renewal's and the join's) accepts it.
    let control_ak = domain::attest::tpm::check_ak(&attestation.ak_public).unwrap();
    assert_eq!(control_ak.name(), ak.name);
    domain::attest::tpm::verify_key_certification(
        &control_ak,
        domain::attest::tpm::KeyCertification {
            key_public: &attestation.key_public,
            certify_info: &attestation.certify_info,
            signature: &attestation.signature,
        },
        &parts.csr_sha256,
        domain::pki::NodeSigner::public_key(&next).uncompressed_point(),
    )
    .unwrap();
    // The CSR is the next key's, the proof the current key's.
    let csr = domain::pki::VerifiedCsr::verify(&parts.csr_der).unwrap();
    assert_eq!(csr.public_key(), domain::pki::NodeSigner::public_key(&next));
    assert!(data.exists(NEXT_KEY_FILE));
}

#[test]
fn another_tpms_ak_fails_the_renewal_with_nothing_written() {
    let tpm = Swtpm::start();
    let other = Swtpm::start();
    let other_ak = TpmHost::new(&other.tcti())
        .open()
        .unwrap()
        .attestation_key()
        .unwrap();
    let host = TpmHost::new(&tpm.tcti());
    let tmp = tempfile::tempdir().unwrap();
    let ks = keyset();
    let key = tpm_key(&host);
    let (data, _) = joined_with(tmp.path(), &ks, "n1", &key, &[&other_ak.statement()]);
    let current = load_in(&data, &host).unwrap();
    let err = prepare_renewal(&data, &current, now(), &mut PendingRenewal::default())
        .err()
        .unwrap();
    assert_eq!(
        err.to_string(),
        "renewal: this TPM's attestation key is not the one the certificate names (another TPM, \
         or its endorsement seed changed): the certificate cannot be renewed here; join again: \
         bcd join --reset --yes, then bcd join"
    );
    assert!(!data.exists(NEXT_KEY_FILE));
}

#[test]
fn a_stopped_tpm_fails_the_renewal_with_nothing_written() {
    let mut tpm = Swtpm::start();
    let host = TpmHost::new(&tpm.tcti());
    let tmp = tempfile::tempdir().unwrap();
    let ks = keyset();
    let ak = host.open().unwrap().attestation_key().unwrap();
    let key = tpm_key(&host);
    let (data, _) = joined_with(tmp.path(), &ks, "n1", &key, &[&ak.statement()]);
    let current = load_in(&data, &host).unwrap();
    tpm.stop();
    let err = prepare_renewal(&data, &current, now(), &mut PendingRenewal::default())
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.starts_with(
            "renewal: the certificate's node key is in the TPM, which is unavailable: "
        ),
        "{err}"
    );
    assert!(!data.exists(NEXT_KEY_FILE));
    // A process started now cannot open it at all.
    let fresh = TpmHost::new(&tpm.tcti());
    let err = load_in(&data, &fresh).unwrap_err();
    assert!(matches!(err, LoadError::Tpm { .. }), "{err:?}");
}

#[test]
fn after_tpm2_clear_the_record_derives_another_key() {
    let tpm = Swtpm::start();
    let tmp = tempfile::tempdir().unwrap();
    let ks = keyset();
    let data = {
        let host = TpmHost::new(&tpm.tcti());
        let key = tpm_key(&host);
        joined_with(tmp.path(), &ks, "n1", &key, &[]).0
        // The connection closes with the last clone, so tpm2-tools can connect.
    };
    let out = std::process::Command::new("tpm2_clear")
        .args(["-c", "p"])
        .env("TPM2TOOLS_TCTI", tpm.tcti())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = load_in(&data, &TpmHost::new(&tpm.tcti())).unwrap_err();
    assert!(matches!(err, LoadError::TpmKeyMismatch), "{err:?}");
    assert_eq!(
        err.to_string(),
        "the node key does not match the node certificate: the TPM derives another key from \
         node.key (was the TPM cleared?); join again: bcd join --reset --yes, then bcd join"
    );
}

#[test]
fn a_tpm_join_makes_its_key_in_the_tpm_and_produces_the_tpms_evidence() {
    let tpm = Swtpm::start();
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("config.toml");
    std::fs::write(
        &cfg,
        format!(
            "[tpm]\ntcti = \"{}\"\nek_intermediates = [\"{}\"]\n",
            tpm.tcti(),
            swtpm_fixture::swtpm::ek_ca().issuer_pem_path().display()
        ),
    )
    .unwrap();
    let config = bcd::config::Config::parse(&cfg, &std::fs::read_to_string(&cfg).unwrap()).unwrap();
    let made = bcd::join::key::join_key(&config, "tpm").unwrap();
    assert_eq!(made.key.kind(), NodeKeyKind::Tpm);
    assert_eq!(made.warning, None);
    let producer = made.producer.unwrap();
    assert_eq!(producer.id(), "tpm");
    let round1 = producer.produce(1, &[7u8; 32], None).unwrap();
    let message: domain::attest::tpm::TpmAttestation = serde_json::from_slice(&round1).unwrap();
    let evidence = message.evidence.unwrap();
    assert_eq!(
        evidence.ek_intermediates,
        vec![swtpm_fixture::swtpm::ek_ca().issuer_der()]
    );
    let ak = config.tpm_host().open().unwrap().attestation_key().unwrap();
    assert_eq!(evidence.ak_public, ak.public_area);
}

#[test]
fn x509pop_evidence_by_a_tpm_key_is_what_the_control_plane_parses_and_verifies() {
    use bcd::attest::EvidenceProducer as _;
    let tpm = Swtpm::start();
    let host = TpmHost::new(&tpm.tcti());
    let tmp = tempfile::tempdir().unwrap();
    let ks = keyset();
    let key = tpm_key(&host);
    let (data, identity) = joined_with(tmp.path(), &ks, "node_a1", &key, &[]);
    let loaded = load_in(&data, &host).unwrap();
    let producer = bcd::attest::x509pop::X509PopProducer::new(
        &loaded,
        Box::new(|| time::macros::datetime!(2026-12-01 10:00 UTC)),
    )
    .unwrap();
    let csr = [7u8; 32];
    let bytes = producer.produce(1, &csr, None).unwrap();
    let parsed = domain::attest::x509pop::X509PopEvidence::parse(&bytes).unwrap();
    assert_eq!(parsed.chain, identity.chain);
    assert_eq!(parsed.node_id.as_str(), "node_a1");
    assert_eq!(parsed.client_time_ms, 1_796_119_200_000);
    let sig = domain::pki::Signature::from_bytes(&parsed.sig).unwrap();
    domain::pki::statement::verify(key.public_key(), &parsed.statement(&csr), &sig).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tpm_node_renews_over_the_wire_certified_by_its_ak_and_stays_in_the_tpm() {
    use crate::renewal_support::{body, csr_sha256, fake_gateway, signed, RenewAnswer};
    use domain::attest::tpm::{check_ak, verify_key_certification, KeyCertification};
    use std::sync::{Arc, Mutex};

    let tpm = Swtpm::start();
    let host = TpmHost::new(&tpm.tcti());
    let ks = Arc::new(keyset());
    let tmp = tempfile::tempdir().unwrap();
    let ak = host.open().unwrap().attestation_key().unwrap();
    let statement = ak.statement();
    let key = tpm_key(&host);
    let (data, _) = joined_with(tmp.path(), &ks, "node_a", &key, &[&statement]);
    let loaded = load_in(&data, &host).unwrap();

    // The gateway checks the key attestation as the control plane does and carries the
    // statement forward.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (id, keys, log, uri) = (
        loaded.leaf.clone(),
        ks.clone(),
        seen.clone(),
        statement.clone(),
    );
    let answer: RenewAnswer = Arc::new(move |req: proto::RenewRequest| {
        let att = req
            .key_attestation
            .clone()
            .expect("key_attestation is sent");
        let csr = domain::pki::VerifiedCsr::verify(&req.csr).unwrap();
        let control_ak = check_ak(&att.ak_public).unwrap();
        verify_key_certification(
            &control_ak,
            KeyCertification {
                key_public: &att.key_public,
                certify_info: &att.certify_info,
                signature: &att.signature,
            },
            csr.sha256(),
            csr.public_key().uncompressed_point(),
        )
        .unwrap();
        log.lock().unwrap().push(att.ak_public.clone());
        let issued = domain::pki::issue_node_certificate(
            &keys.node_ca,
            &csr,
            &domain::pki::NodeCertificateDecision {
                spiffe_id: id.spiffe_id.clone(),
                role: id.role,
                serial: domain::pki::Serial::generate().unwrap(),
                requested_lifetime: None,
                statements: vec![domain::pki::NodeKeyStatement::new(&uri).unwrap()],
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
    let gw = fake_gateway(&ks, answer, 0).await;
    let pin = bcd::client::certificate_spki_pin(ks.serving_ca.cert_der()).unwrap();
    let identity = bcd::client::ClientIdentity::new(&loaded.stored.chain, &loaded.key);
    let mut client = bcd::client::connect(&gw.server(), pin, Some(&identity))
        .await
        .unwrap();
    let renewed = bcd::node::renew_once(
        &mut client,
        &data,
        &loaded,
        Some(ks.join_signing.public_key()),
    )
    .await
    .unwrap();
    assert_eq!(*seen.lock().unwrap(), vec![ak.public_area.clone()]);
    assert_eq!(renewed.key.kind(), NodeKeyKind::Tpm);
    assert_ne!(renewed.key.public_key(), loaded.key.public_key());
    assert_eq!(
        bcd::renewal::request::ak_statement(&renewed.leaf),
        Some(statement.as_str())
    );
    assert_eq!(
        std::fs::read_to_string(data.node_key()).unwrap(),
        format!(
            "-----BEGIN BCD TPM NODE KEY-----\n{}\n-----END BCD TPM NODE KEY-----\n",
            STANDARD.encode(renewed.key.as_tpm().unwrap().unique())
        )
    );
    assert!(!data.exists(NEXT_KEY_FILE));
}

#[test]
fn bcd_status_and_doctor_say_the_key_is_in_the_tpm() {
    let tpm = Swtpm::start();
    let tmp = tempfile::tempdir().unwrap();
    let ks = keyset();
    let data = {
        let host = TpmHost::new(&tpm.tcti());
        let key = tpm_key(&host);
        joined_with(tmp.path(), &ks, "n1", &key, &[]).0
        // Every clone of the connection is dropped here: swtpm serves one client at a time.
    };
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_bcd"))
            .arg("--data-dir")
            .arg(data.root())
            .args(args)
            .env("BCD_TPM_TCTI", tpm.tcti())
            .env_remove("BCD_CONFIG")
            .env_remove("BCD_SERVER")
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let text = run(&["status"]);
    assert!(
        text.starts_with("joined as n1 (site eu-1, role node); node key in the TPM; certificate"),
        "{text}"
    );
    let json: serde_json::Value = serde_json::from_str(&run(&["status", "--json"])).unwrap();
    assert_eq!(json["nodeKey"], "tpm");
    let doctor = run(&["doctor"]);
    assert!(doctor.contains("\nok   node key: in the TPM\n"), "{doctor}");
}
