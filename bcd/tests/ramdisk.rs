//! `bcd ramdisk` (issue 20 item 4): the kernel command line's `bc.token=` and `bc.assertion=`
//! (missing parts, twice, extra parameters, quoting, a malformed token never echoed), and the
//! real binary's Join against a fake gateway that records it: attestor `discovery`, role
//! `ramdisk`, the assertion's bytes as the attestation, the token sealed to the pinned key and
//! bound to the CSR, the hardware claims from `BCD_SYSFS_ROOT`; a deferral retried with the same
//! CSR, then stored; `bcd status` of a ramdisk.

use crate::common::keyset;
use crate::renewal_support::{fake_gateway_with, OtherAnswers, RenewAnswer};

use std::path::Path;
use std::sync::{Arc, Mutex};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use bcd::client::certificate_spki_pin;
use bcd::join::ramdisk::{parse_cmdline, CmdlineError};
use domain::attest::discovery::wire::{DiscoveryAssertion, SignedDiscoveryAssertion};
use domain::pki::{KeyRole, PrivateKey, PublicKey, SealedToken, TokenSecret};
use sha2::{Digest, Sha256};
use tonic::Status;

fn assertion() -> SignedDiscoveryAssertion {
    let key = PrivateKey::generate(KeyRole::Node).unwrap();
    let assertion = DiscoveryAssertion {
        site_id: "eu-1".into(),
        signer_node_id: "site_a".into(),
        lease_epoch: 1,
        mac: "52:54:00:12:34:56".into(),
        workflow_id: "boot_1".into(),
        issued_at_ms: 1_790_000_000_000,
        not_after_ms: 1_790_000_600_000,
        ..Default::default()
    };
    SignedDiscoveryAssertion::sign(&assertion, vec![1, 2, 3], &key).unwrap()
}

fn token() -> String {
    TokenSecret::generate().unwrap().expose().to_owned()
}

#[test]
fn the_command_line_gives_the_token_and_the_assertion_among_other_parameters() {
    let (t, a) = (token(), assertion());
    let line = format!(
        "BOOT_IMAGE=/vmlinuz ro console=ttyS0,115200 bc.token={t} quiet bc.assertion={} \
         initrd=initrd.img\n",
        a.to_cmdline()
    );
    let got = parse_cmdline(&line).unwrap();
    assert_eq!(got.token.expose(), t);
    assert_eq!(got.assertion, a);
    // Quoted, as the kernel allows: the quotes are not part of the values.
    let quoted = format!(
        "\"bc.token={t}\" x=\"a b\" bc.assertion=\"{}\"",
        a.to_cmdline()
    );
    let got = parse_cmdline(&quoted).unwrap();
    assert_eq!((got.token.expose(), &got.assertion), (t.as_str(), &a));
}

#[test]
fn a_missing_part_is_refused_by_name() {
    let a = assertion().to_cmdline();
    assert_eq!(
        parse_cmdline(&format!("ro bc.assertion={a}"))
            .unwrap_err()
            .to_string(),
        "bcd ramdisk: the kernel command line has no bc.token= (was this machine booted by a \
         site's boot server?)"
    );
    assert_eq!(
        parse_cmdline(&format!("ro bc.token={} bc.assertion=", token()))
            .unwrap_err()
            .to_string(),
        "bcd ramdisk: the kernel command line has no bc.assertion= (was this machine booted by a \
         site's boot server?)"
    );
    // `bc.tokens=` is another parameter.
    assert_eq!(
        parse_cmdline(&format!("bc.tokens={} bc.assertion={a}", token())),
        Err(CmdlineError::Missing("bc.token"))
    );
    assert_eq!(parse_cmdline(""), Err(CmdlineError::Missing("bc.token")));
}

#[test]
fn twice_or_malformed_is_refused_and_the_token_is_never_shown() {
    let a = assertion().to_cmdline();
    let (t1, t2) = (token(), token());
    assert_eq!(
        parse_cmdline(&format!("bc.token={t1} bc.token={t2} bc.assertion={a}")),
        Err(CmdlineError::Twice("bc.token"))
    );
    let err = parse_cmdline(&format!("bc.token=bcjt_secretish bc.assertion={a}")).unwrap_err();
    assert_eq!(err, CmdlineError::BadToken);
    assert!(!err.to_string().contains("secretish"));
    let err = parse_cmdline(&format!("bc.token={t1} bc.assertion=!!")).unwrap_err();
    assert!(
        err.to_string().starts_with(
            "bcd ramdisk: bc.assertion= on the kernel command line: bc.assertion is not base64url"
        ),
        "{err}"
    );
    assert!(!err.to_string().contains(&t1));
}

fn jwk(key: &PublicKey) -> String {
    let point = key.uncompressed_point();
    serde_json::json!({
        "kty": "EC",
        "crv": "P-256",
        "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
        "y": URL_SAFE_NO_PAD.encode(&point[33..65]),
    })
    .to_string()
}

/// A sysfs with one permanent Ethernet NIC and a product UUID.
fn sysfs(root: &Path) {
    let nic = root.join("class/net/eth0");
    std::fs::create_dir_all(nic.join("device")).unwrap();
    std::fs::write(nic.join("type"), "1\n").unwrap();
    std::fs::write(nic.join("addr_assign_type"), "0\n").unwrap();
    std::fs::write(nic.join("address"), "52:54:00:12:34:56\n").unwrap();
    let dmi = root.join("class/dmi/id");
    std::fs::create_dir_all(&dmi).unwrap();
    std::fs::write(
        dmi.join("product_uuid"),
        "4C4C4544-0042-3510-8052-B2C04F585931\n",
    )
    .unwrap();
}

/// A ramdisk about to run: a fake gateway answering Join with `join`, bcd's config and the
/// JoinService keys, a sysfs, and a command line with a fresh token and assertion.
struct Ramdisk {
    _gw: crate::renewal_support::FakeGateway,
    _tmp: tempfile::TempDir,
    conf: std::path::PathBuf,
    data: std::path::PathBuf,
    sys: std::path::PathBuf,
    cmdline: std::path::PathBuf,
    token: String,
    assertion: SignedDiscoveryAssertion,
}

async fn ramdisk_with(
    ks: &domain::pki::KeySet,
    join: crate::renewal_support::JoinAnswer,
) -> Ramdisk {
    let tmp = tempfile::tempdir().unwrap();
    let never: RenewAnswer = Arc::new(|_| Err(Status::unavailable("no renewals here")));
    let other = OtherAnswers {
        join: Some(join),
        ..Default::default()
    };
    let gw = fake_gateway_with(ks, never, 0, other).await;
    let pins = ks.pins();
    let conf = tmp.path().join("etc");
    std::fs::create_dir_all(&conf).unwrap();
    std::fs::write(
        conf.join("config.toml"),
        format!(
            "server = \"{}\"\nserving_ca_spki_pin = \"{}\"\njoin_encryption_key_pin = \"{}\"\n\
             join_signing_key_pin = \"{}\"\n",
            gw.server(),
            certificate_spki_pin(ks.serving_ca.cert_der()).unwrap(),
            pins.join_encryption,
            pins.join_signing
        ),
    )
    .unwrap();
    std::fs::write(
        conf.join("join-encryption.jwk"),
        jwk(ks.join_encryption.public_key()),
    )
    .unwrap();
    std::fs::write(
        conf.join("join-signing.jwk"),
        jwk(ks.join_signing.public_key()),
    )
    .unwrap();
    let sys = tmp.path().join("sys");
    sysfs(&sys);
    let (token, assertion) = (token(), assertion());
    let cmdline = tmp.path().join("cmdline");
    std::fs::write(
        &cmdline,
        format!(
            "ro bc.token={token} bc.assertion={} quiet\n",
            assertion.to_cmdline()
        ),
    )
    .unwrap();
    let data = tmp.path().join("data");
    Ramdisk {
        _gw: gw,
        _tmp: tmp,
        conf,
        data,
        sys,
        cmdline,
        token,
        assertion,
    }
}

impl Ramdisk {
    async fn run(&self) -> std::process::Output {
        let (conf, data, sys, cmdline) = (
            self.conf.clone(),
            self.data.clone(),
            self.sys.clone(),
            self.cmdline.clone(),
        );
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_bcd"))
                .arg("--config")
                .arg(conf.join("config.toml"))
                .arg("--data-dir")
                .arg(&data)
                .arg("ramdisk")
                .arg("--cmdline")
                .arg(&cmdline)
                .env("BCD_SYSFS_ROOT", &sys)
                .env_remove("BCD_CONFIG")
                .env_remove("BCD_SERVER")
                .env_remove("BCD_DATA_DIR")
                .env_remove("BCD_TPM_TCTI")
                .output()
                .unwrap()
        })
        .await
        .unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bcd_ramdisk_joins_with_attestor_discovery_role_ramdisk_and_the_assertion_bytes() {
    let ks = keyset();
    let seen = Arc::new(Mutex::new(Vec::<proto::JoinRequest>::new()));
    let record = seen.clone();
    let rd = ramdisk_with(
        &ks,
        Arc::new(move |req| {
            record.lock().unwrap().push(req);
            Err(Status::permission_denied("ACCESS_DENIED"))
        }),
    )
    .await;
    let out = rd.run().await;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr,
        "Join refused (ACCESS_DENIED): the discovery attestor refused this machine's evidence; \
         its reason is server-side\n"
    );
    assert!(!stderr.contains(&rd.token));

    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 1);
    let req = &seen[0];
    assert_eq!(req.attestor, "discovery");
    assert_eq!(req.role, "ramdisk");
    assert_eq!(req.attestation, rd.assertion.to_bytes());
    let claims = req.claims.clone().unwrap();
    assert_eq!(claims.product_uuid, "4c4c4544-0042-3510-8052-b2c04f585931");
    assert_eq!(claims.macs, vec!["52:54:00:12:34:56".to_owned()]);
    // The token is sealed to the pinned JoinService key, bound to this request's CSR.
    let csr_sha256: [u8; 32] = Sha256::digest(&req.csr).into();
    let sealed = SealedToken::from_bytes(&req.sealed_token).unwrap();
    let opened = ks.join_encryption.open(&sealed, &csr_sha256).unwrap();
    assert_eq!(opened.expose(), rd.token);
    // Nothing was stored.
    assert!(!rd.data.join("identity.json").exists());
}

/// A JoinResponse `body` for the request with CSR `csr`, signed by the JoinService key.
fn signed_answer(
    ks: &domain::pki::KeySet,
    csr: &[u8],
    body: proto::JoinResponse,
) -> proto::SignedJoinResponse {
    use domain::pki::statement::{sign, JoinResponseStatement};
    use prost::Message as _;
    let csr_sha256: [u8; 32] = Sha256::digest(csr).into();
    let response = body.encode_to_vec();
    let signature = sign(
        &ks.join_signing,
        &JoinResponseStatement {
            csr_sha256,
            response: &response,
        },
    )
    .unwrap();
    proto::SignedJoinResponse {
        response,
        signature: signature.as_bytes().to_vec(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deferred_ramdisk_join_is_retried_with_the_same_csr_and_stored() {
    let ks = Arc::new(keyset());
    let seen = Arc::new(Mutex::new(Vec::<proto::JoinRequest>::new()));
    let (record, keys) = (seen.clone(), ks.clone());
    let rd = ramdisk_with(
        &ks,
        Arc::new(move |req: proto::JoinRequest| {
            let mut seen = record.lock().unwrap();
            seen.push(req.clone());
            let csr_sha256 = Sha256::digest(&req.csr).to_vec();
            let body = if seen.len() == 1 {
                proto::JoinResponse {
                    csr_sha256,
                    trust_domain: keys.trust_domain.to_string(),
                    deferral: Some(proto::join_response::Deferral::Pending(
                        proto::JoinPending {
                            request_id: "jr_1".into(),
                            retry_after_seconds: 1,
                        },
                    )),
                    ..Default::default()
                }
            } else {
                let csr = domain::pki::VerifiedCsr::verify(&req.csr).unwrap();
                let decision = domain::pki::NodeCertificateDecision {
                    spiffe_id: domain::pki::SpiffeId::parse(&format!(
                        "spiffe://{}/site/eu-1/node/node_rd",
                        keys.trust_domain
                    ))
                    .unwrap(),
                    role: domain::pki::NodeRole::Ramdisk,
                    serial: domain::pki::Serial::generate().unwrap(),
                    requested_lifetime: Some(time::Duration::hours(2)),
                    statements: vec![],
                };
                let leaf = domain::pki::issue_node_certificate(
                    &keys.node_ca,
                    &csr,
                    &decision,
                    crate::common::now(),
                )
                .unwrap()
                .der;
                proto::JoinResponse {
                    csr_sha256,
                    trust_domain: keys.trust_domain.to_string(),
                    node_id: "node_rd".into(),
                    site_id: "eu-1".into(),
                    role: "ramdisk".into(),
                    certificate_chain: vec![leaf, keys.node_ca.cert_der().to_vec()],
                    trust_roots: vec![keys.root_ca.cert_der().to_vec()],
                    identity_generation: 1,
                    allowed_kinds: vec!["diag.*".into(), "disk.wipe".into()],
                    ..Default::default()
                }
            };
            Ok(signed_answer(&keys, &req.csr, body))
        }),
    )
    .await;
    let out = rd.run().await;
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(
        stdout.starts_with("joined as node_rd (site eu-1, role ramdisk); certificate valid until"),
        "{stdout}"
    );
    assert!(stderr.contains("jr_1"), "{stderr}");
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].csr, seen[1].csr);
    assert_eq!(seen[1].attestation, rd.assertion.to_bytes());
    assert!(rd.data.join("identity.json").exists());
    let report = bcd::status::status(
        &bcd::files::DataDir::new(&rd.data),
        &bcd::node_key::TpmHost::none(),
        &bcd::status::SigningKey::Loads,
        crate::common::now(),
    );
    assert_eq!(report.role.as_deref(), Some("ramdisk"));
    assert!(report.expires_in_seconds.unwrap() <= 2 * 3600);
    // The signed answer's allowed kinds are kept: the runner enforces them (issue 40 item 16).
    let stored = bcd::files::identity::read_stored(&bcd::files::DataDir::new(&rd.data))
        .unwrap()
        .unwrap();
    assert_eq!(stored.allowed_kinds, ["diag.*", "disk.wipe"]);
}

#[test]
fn bcd_ramdisk_without_the_parameters_says_so_and_sends_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let cmdline = tmp.path().join("cmdline");
    std::fs::write(&cmdline, "BOOT_IMAGE=/vmlinuz ro quiet\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_bcd"))
        .arg("--data-dir")
        .arg(tmp.path().join("data"))
        .arg("ramdisk")
        .arg("--cmdline")
        .arg(&cmdline)
        .env_remove("BCD_CONFIG")
        .env_remove("BCD_SERVER")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "bcd ramdisk: the kernel command line has no bc.token= (was this machine booted by a \
         site's boot server?)\n"
    );
}

#[test]
fn bcd_status_shows_a_ramdisk_and_its_two_hour_certificate_normally() {
    use crate::common::{as_node_key, identity_for, issue_at, node_key, now};
    let ks = keyset();
    let tmp = tempfile::tempdir().unwrap();
    let data = bcd::files::DataDir::new(tmp.path());
    let key = node_key();
    // One instant for issuing and reading: two reads of the clock straddle a second under load.
    let at = now();
    let leaf = issue_at(
        &ks,
        &key,
        "rd1",
        domain::pki::NodeRole::Ramdisk,
        at,
        Some(time::Duration::hours(2)),
    );
    bcd::files::identity::store_joined(&data, &as_node_key(&key), &identity_for(&ks, leaf), at)
        .unwrap();
    let report = bcd::status::status(
        &data,
        &bcd::node_key::TpmHost::none(),
        &bcd::status::SigningKey::Loads,
        at,
    );
    assert_eq!(report.exit_code(), 0);
    let text = report.to_text();
    assert!(
        text.starts_with(
            "joined as rd1 (site eu-1, role ramdisk); node key a file; certificate valid until"
        ),
        "{text}"
    );
    // Two hours from the backdated notBefore (docs/DECISIONS.md, backdating): 1h 55m from now.
    assert!(text.contains("(1h 55m left, renewal due "), "{text}");
}
