//! Node keys wherever they live, without a TPM: what `node.key` may hold, how a TPM record
//! that cannot be derived refuses to load, where a renewal makes its next key and how the
//! renewal of a certificate naming an AK fails without its TPM, what `bcd status` and
//! `bcd doctor` say, and `bcd join --attestor tpm` refusing a token file. (The same paths with
//! a real swtpm are in `node_key_tpm`.)

use crate::common;

use std::process::Command;

use bcd::files::identity::{load_in, LoadError};
use bcd::files::{pem_encode, NEXT_KEY_FILE, NODE_KEY_FILE};
use bcd::node_key::{NodeKey, NodeKeyKind, TpmHost, TPM_KEY_PEM_LABEL};
use bcd::renewal::request::{prepare_renewal, PendingRenewal};
use bcd::status::{node_key_check, status, Level};
use common::{joined_with, keyset, now};

/// A statement as a certified tpm join writes it (an AK name no TPM here has).
pub const AK_STATEMENT: &str =
    "urn:bc:tpm-ak:000b:00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

#[test]
fn a_tpm_record_without_its_tpm_does_not_load_and_names_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let ks = keyset();
    let key = NodeKey::generate_file().unwrap();
    let (data, _) = joined_with(tmp.path(), &ks, "n1", &key, &[]);
    data.write(
        NODE_KEY_FILE,
        pem_encode(TPM_KEY_PEM_LABEL, &[9u8; 32]).as_bytes(),
    )
    .unwrap();
    let err = load_in(&data, &TpmHost::none()).unwrap_err();
    assert!(matches!(err, LoadError::Tpm { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "{}: the node key is in the TPM, which cannot load it: the TPM (none) is \
             unavailable: this bcd is configured without a TPM",
            data.node_key().display()
        )
    );
    // A record of another length is no record.
    data.write(
        NODE_KEY_FILE,
        pem_encode(TPM_KEY_PEM_LABEL, &[9u8; 33]).as_bytes(),
    )
    .unwrap();
    assert_eq!(
        load_in(&data, &TpmHost::none()).unwrap_err().to_string(),
        format!(
            "{}: the node key does not load: the BCD TPM NODE KEY record is 33 bytes, not 32; \
             join again: bcd join --reset --yes, then bcd join",
            data.node_key().display()
        )
    );
}

#[test]
fn the_renewal_of_a_leaf_naming_an_ak_without_its_tpm_fails_before_anything_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let ks = keyset();
    let key = NodeKey::generate_file().unwrap();
    let (data, _) = joined_with(tmp.path(), &ks, "n1", &key, &[AK_STATEMENT]);
    let before = std::fs::read(data.node_key()).unwrap();
    let current = load_in(&data, &TpmHost::none()).unwrap();
    assert_eq!(
        bcd::renewal::request::ak_statement(&current.leaf),
        Some(AK_STATEMENT)
    );
    let err = prepare_renewal(&data, &current, now(), &mut PendingRenewal::default())
        .err()
        .unwrap();
    assert_eq!(
        err.to_string(),
        "renewal: the certificate's node key is in the TPM, which is unavailable: the TPM (none) \
         is unavailable: this bcd is configured without a TPM"
    );
    // No file fallback: no next key was made or written.
    assert!(!data.exists(NEXT_KEY_FILE));
    assert_eq!(std::fs::read(data.node_key()).unwrap(), before);
}

#[test]
fn without_a_tpm_a_renewal_makes_a_file_key_quietly() {
    let tmp = tempfile::tempdir().unwrap();
    let ks = keyset();
    let key = NodeKey::generate_file().unwrap();
    let (data, _) = joined_with(tmp.path(), &ks, "n1", &key, &[]);
    let current = load_in(&data, &TpmHost::new("device:/dev/no-such-tpm")).unwrap();
    let (begun, parts) =
        prepare_renewal(&data, &current, now(), &mut PendingRenewal::default()).unwrap();
    assert!(parts.key_attestation.is_none());
    assert_eq!(parts.warning, None);
    assert_eq!(begun.next_key().kind(), NodeKeyKind::File);
    let next = std::fs::read_to_string(data.next_key()).unwrap();
    assert!(next.starts_with("-----BEGIN PRIVATE KEY-----\n"), "{next}");
    assert_eq!(data.mode(NEXT_KEY_FILE), Some(0o600));
}

#[test]
fn status_and_doctor_say_the_key_is_a_file() {
    let tmp = tempfile::tempdir().unwrap();
    let ks = keyset();
    let key = NodeKey::generate_file().unwrap();
    let (data, _) = joined_with(tmp.path(), &ks, "n1", &key, &[]);
    let report = status(
        &data,
        &TpmHost::none(),
        &bcd::status::SigningKey::Loads,
        now(),
    );
    assert_eq!(report.node_key, Some("file"));
    let text = report.to_text();
    assert!(
        text.starts_with(
            "joined as n1 (site eu-1, role node); node key a file; certificate valid until "
        ),
        "{text}"
    );
    let json: serde_json::Value = serde_json::to_value(&report).unwrap();
    assert_eq!(json["nodeKey"], "file");

    let check = node_key_check(NodeKeyKind::File, &TpmHost::none());
    assert_eq!(check.level, Level::Ok);
    assert_eq!(
        check.detail,
        "a file; this host has no TPM (the TPM (none) is unavailable: this bcd is configured \
         without a TPM)"
    );
    let check = node_key_check(NodeKeyKind::Tpm, &TpmHost::none());
    assert_eq!(
        (check.level, check.detail.as_str()),
        (Level::Ok, "in the TPM")
    );
}

#[test]
fn join_with_the_tpm_attestor_refuses_a_token_file() {
    let tmp = tempfile::tempdir().unwrap();
    let token_file = tmp.path().join("token");
    std::fs::write(&token_file, "x").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_bcd"))
        .args(["--data-dir"])
        .arg(tmp.path().join("data"))
        .args(["join", "--attestor", "tpm", "--token-file"])
        .arg(&token_file)
        .env_remove("BCD_CONFIG")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "bcd join: --token-file with --attestor tpm: the TPM is the credential of a tpm join; no \
         token is read or sent (drop --token-file)\n"
    );
    assert!(out.stdout.is_empty());
    // Nothing was touched: the token file is still there, no data directory was made.
    assert!(token_file.exists());
    assert!(!tmp.path().join("data").exists());
}

#[test]
fn reset_yes_with_the_tpm_attestor_moves_the_identity_and_then_needs_the_tpm() {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine as _;
    let tmp = tempfile::tempdir().unwrap();
    let ks = keyset();
    let data_dir = tmp.path().join("data");
    let key = NodeKey::generate_file().unwrap();
    let (data, _) = joined_with(&data_dir, &ks, "n1", &key, &[]);
    // join-signing.jwk beside config.toml, matching its pin (the join reads it before the TPM).
    let signing = ks.join_signing.public_key();
    let point = signing.uncompressed_point();
    std::fs::write(
        tmp.path().join("join-signing.jwk"),
        format!(
            "{{\"kty\":\"EC\",\"crv\":\"P-256\",\"x\":\"{}\",\"y\":\"{}\"}}",
            URL_SAFE_NO_PAD.encode(&point[1..33]),
            URL_SAFE_NO_PAD.encode(&point[33..])
        ),
    )
    .unwrap();
    let pin = signing.pin().to_string();
    let cfg = tmp.path().join("config.toml");
    std::fs::write(
        &cfg,
        format!(
            "server = \"127.0.0.1:1\"\ndata_dir = \"{}\"\nserving_ca_spki_pin = \"{pin}\"\n\
             join_encryption_key_pin = \"{pin}\"\njoin_signing_key_pin = \"{pin}\"\n\
             [tpm]\ntcti = \"swtpm:host=127.0.0.1,port=1\"\n",
            data_dir.display()
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_bcd"))
        .arg("--config")
        .arg(&cfg)
        .args(["join", "--reset", "--yes", "--attestor", "tpm"])
        .env("BCD_JOIN_TOKEN", "bct_never_read")
        .env_remove("BCD_TPM_TCTI")
        .env_remove("BCD_DATA_DIR")
        .env_remove("BCD_SERVER")
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(stdout.contains("/identity.json -> "), "{stdout}");
    assert!(!data.exists("identity.json") && !data.exists(NODE_KEY_FILE));
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with(
            "bcd join --attestor tpm: the TPM (swtpm:host=127.0.0.1,port=1) is unavailable: "
        ),
        "{stderr}"
    );
    assert!(
        last.ends_with(
            "; the TPM is the credential of a tpm join (check [tpm] tcti in config.toml, or \
             BCD_TPM_TCTI)"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("bct_never_read"));
}
