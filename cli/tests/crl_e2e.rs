//! End to end with the real binaries and the real `openssl`, on SQLite and on Postgres: the node
//! CA's revocation list (issue 41 item 4, decision 0088).
//!
//! `bcctl up` serves; two nodes join with `bcd join`; `bcctl pki crl --out crl.pem --json` lists
//! nothing; after `bcctl node revoke` of the first it lists exactly the first node's serial.
//! `openssl crl -CAfile bundle.pem` (the node CA bcd wrote) verifies the list's signature;
//! `openssl verify -crl_check -CRLfile crl.pem` refuses the revoked node's `cert.pem` as
//! "certificate revoked" and accepts the other node's; `openssl crl -crlnumber` reads the number
//! the verb printed; and the number rises at every run, also when nothing happened in between
//! (the file's own number is the floor); without `--out` the PEM goes to standard output, and
//! a `--next-update` of 0 or over 7 days is a usage error (exit 2). Python's `cryptography` reads the list as an outside
//! party would: its signature under the node CA, its number, dates and entries, compared with
//! what `bcctl node show --json` says of the revoked certificate (serial, revocation time, and a
//! number whose log part is at or past the revocation's position).
//!
//! Run: `cargo test -p cli --test suite crl_e2e::` (Postgres at `DATABASE_URL`).

use crate::x509pop_e2e::{bcd, run, start_server, status, Server};

use std::path::Path;
use std::process::Command;

use events::store::testkit::TestDb;

/// Runs `openssl args`: (success, stdout + stderr).
fn openssl(args: &[&str], paths: &[&Path]) -> (bool, String) {
    let out = Command::new("openssl")
        .args(args)
        .args(paths)
        .output()
        .expect("openssl (apt-get install openssl)");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// `bcctl pki crl --out FILE --json`: (the printed object, its number).
fn crl(server: &Server, out: &Path) -> (serde_json::Value, u128) {
    let path = out.display().to_string();
    let v = server.bcctl_json(&[
        "pki",
        "crl",
        "--out",
        &path,
        "--next-update",
        "2h",
        "--json",
    ]);
    let number = v["crlNumber"]
        .as_str()
        .and_then(|n| n.parse::<u128>().ok())
        .unwrap_or_else(|| panic!("crlNumber in {v}"));
    (v, number)
}

fn serials(v: &serde_json::Value) -> Vec<String> {
    v["revoked"]
        .as_array()
        .unwrap_or_else(|| panic!("revoked in {v}"))
        .iter()
        .map(|e| e["serial"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// The number `openssl crl -crlnumber` reads from the file.
fn openssl_number(crl: &Path) -> u128 {
    let (ok, text) = openssl(&["crl", "-noout", "-crlnumber", "-in"], &[crl]);
    assert!(ok, "{text}");
    let hex = text
        .trim()
        .strip_prefix("crlNumber=0x")
        .unwrap_or_else(|| panic!("openssl crl -crlnumber: {text}"));
    u128::from_str_radix(hex, 16).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// What Python's `cryptography` reads from the list, checked against the node CA's key.
const PY_READ: &str = r#"
import json, sys
from cryptography import x509
from cryptography.x509.oid import ExtensionOID
crl = x509.load_pem_x509_crl(open(sys.argv[1], "rb").read())
ca = x509.load_pem_x509_certificate(open(sys.argv[2], "rb").read())
aki = crl.extensions.get_extension_for_oid(ExtensionOID.AUTHORITY_KEY_IDENTIFIER).value
ski = ca.extensions.get_extension_for_oid(ExtensionOID.SUBJECT_KEY_IDENTIFIER).value
print(json.dumps({
    "valid": crl.is_signature_valid(ca.public_key()),
    "issuerIsCa": crl.issuer == ca.subject,
    "akiIsSki": aki.key_identifier == ski.digest,
    "number": str(crl.extensions.get_extension_for_class(x509.CRLNumber).value.crl_number),
    "thisUpdate": int(crl.last_update_utc.timestamp()),
    "nextUpdate": int(crl.next_update_utc.timestamp()),
    "entries": [[format(r.serial_number, "x"), int(r.revocation_date_utc.timestamp())] for r in crl],
}))
"#;

fn python_read(crl: &Path, ca: &Path) -> serde_json::Value {
    let out = Command::new("python3")
        .args(["-c", PY_READ])
        .arg(crl)
        .arg(ca)
        .output()
        .expect("python3 (apt-get install python3-cryptography)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "python3 cryptography (apt-get install python3-cryptography): {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn join(server: &Server, data: &Path) -> (String, String) {
    let mut cmd = bcd(server, data, &["join"]);
    cmd.env("BCD_JOIN_TOKEN", server.s("token"));
    let (code, stdout, stderr) = run(cmd);
    assert_eq!(code, 0, "bcd join: {stdout}{stderr}");
    let st = status(server, data);
    let serial = st["serial"].as_str().expect("serial").to_ascii_lowercase();
    (st["nodeId"].as_str().expect("nodeId").to_owned(), serial)
}

fn scenario(db_url: &str) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let server = start_server(tmp.path(), db_url, "1h");
    let (a, b) = (tmp.path().join("node-a"), tmp.path().join("node-b"));
    let (node_a, serial_a) = join(&server, &a);
    let (_node_b, serial_b) = join(&server, &b);
    assert_ne!(serial_a, serial_b);
    let crl_path = tmp.path().join("crl.pem");

    let (before, n0) = crl(&server, &crl_path);
    assert_eq!(serials(&before), Vec::<String>::new(), "{before}");
    assert_eq!(before["pem"], serde_json::Value::Null, "{before}");

    server.bcctl(&["node", "revoke", &node_a, "--reason", "crl test"]);
    let (after, n1) = crl(&server, &crl_path);
    assert_eq!(serials(&after), vec![serial_a.clone()], "{after}");
    assert!(n1 > n0, "the number rises with the log: {n0} then {n1}");
    assert_eq!(openssl_number(&crl_path), n1);
    let text = std::fs::read_to_string(&crl_path).expect("crl.pem");
    assert!(text.starts_with("-----BEGIN X509 CRL-----\n"), "{text}");

    // The node CA (the bundle.pem bcd wrote) verifies the list's signature.
    let node_ca = a.join("bundle.pem");
    let (ok, text) = openssl(&["crl", "-noout", "-in"], &[&crl_path]);
    assert!(ok, "{text}");
    let mut args = vec!["crl", "-noout", "-in"];
    let crl_s = crl_path.display().to_string();
    let ca_s = node_ca.display().to_string();
    args.extend([crl_s.as_str(), "-CAfile", ca_s.as_str()]);
    let (ok, text) = openssl(&args, &[]);
    assert!(
        ok && text.contains("verify OK"),
        "openssl crl -CAfile: {text}"
    );

    // openssl verify with the list: the revoked node refused, the other accepted.
    let verify = |cert: &Path| {
        openssl(
            &[
                "verify",
                "-partial_chain",
                "-crl_check",
                "-CRLfile",
                &crl_s,
                "-CAfile",
                &ca_s,
            ],
            &[cert],
        )
    };
    let (ok, text) = verify(&a.join("cert.pem"));
    assert!(
        !ok,
        "the revoked node's certificate must be refused: {text}"
    );
    assert!(text.contains("certificate revoked"), "{text}");
    let (ok, text) = verify(&b.join("cert.pem"));
    assert!(ok, "the other node's certificate must be accepted: {text}");
    assert!(text.contains(": OK"), "{text}");

    // Python's cryptography: signature, number, dates and entries, against `bcctl node show`.
    let py = python_read(&crl_path, &node_ca);
    assert_eq!(py["valid"], true, "{py}");
    assert_eq!(py["issuerIsCa"], true, "{py}");
    assert_eq!(py["akiIsSki"], true, "{py}");
    assert_eq!(py["number"], n1.to_string().as_str(), "{py}");
    let this_update = py["thisUpdate"].as_i64().expect("thisUpdate");
    assert_eq!(py["nextUpdate"].as_i64(), Some(this_update + 7200), "{py}");
    let shown = server.bcctl_json(&["node", "show", &node_a, "--json"]);
    let cert = shown["certificates"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["serial"] == serial_a.as_str()))
        .unwrap_or_else(|| panic!("{serial_a} in {shown}"));
    let revoked_at_us = cert["revokedAtUs"].as_i64().expect("revokedAtUs");
    let revoked_position = cert["revokedPosition"].as_i64().expect("revokedPosition");
    assert_eq!(
        py["entries"],
        serde_json::json!([[serial_a.trim_start_matches('0'), revoked_at_us / 1_000_000]]),
        "{py}"
    );
    assert!(
        n1 / 10_000_000_000_000_000 >= u128::try_from(revoked_position).expect("position"),
        "{n1} vs the revocation at position {revoked_position}"
    );
    let printed = after["revoked"][0]["revokedAt"]
        .as_str()
        .expect("revokedAt");
    let printed =
        time::OffsetDateTime::parse(printed, &time::format_description::well_known::Rfc3339)
            .expect("RFC 3339");
    assert_eq!(
        printed.unix_timestamp_nanos(),
        i128::from(revoked_at_us / 1_000_000) * 1_000_000_000,
        "{after}"
    );

    // Nothing happened since: the number still rises (at least one above the file's).
    let (again, n2) = crl(&server, &crl_path);
    assert!(n2 > n1, "{n1} then {n2}");
    assert_eq!(serials(&again), vec![serial_a], "{again}");
    assert_eq!(openssl_number(&crl_path), n2);
    eprintln!("CRL numbers: {n0}, {n1}, {n2}");

    // Without --out the PEM goes to standard output; a bad interval is a usage error (exit 2).
    let out = server.bcctl(&["pki", "crl"]);
    let pem = String::from_utf8_lossy(&out.stdout);
    assert!(pem.starts_with("-----BEGIN X509 CRL-----\n"), "{pem}");
    for (flag, message) in [
        (
            "8d",
            "--next-update: the next-update interval must be more than 0 s and at most 7 days; \
             got 691200 s",
        ),
        (
            "0",
            "--next-update \"0\": expected a positive number with a unit s, m, h or d (e.g. 1h)",
        ),
    ] {
        let out = server.bcctl_output(&["pki", "crl", "--next-update", flag]);
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim(), format!("bcctl: {message}"), "{err}");
    }
}

#[test]
fn crl_e2e_sqlite() {
    let db = TestDb::sqlite().expect("sqlite test db");
    scenario(db.url());
}

#[tokio::test(flavor = "multi_thread")]
async fn crl_e2e_postgres() {
    let db = TestDb::postgres().await.expect("postgres test db");
    let url = db.url().to_owned();
    tokio::task::spawn_blocking(move || scenario(&url))
        .await
        .expect("scenario");
    drop(db);
}
