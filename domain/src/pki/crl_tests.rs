//! The node CA's CRL: the DER read back by x509-parser and by the real `openssl crl`, the
//! number's order, and each refusal.

use std::process::Command;

use time::{Duration, OffsetDateTime};
use x509_parser::prelude::{FromDer, ParsedExtension, X509Certificate};
use x509_parser::revocation_list::CertificateRevocationList;

use super::*;
use crate::pki::keyset::{KeySet, KeySetLifetimes};
use crate::pki::spiffe::TrustDomain;

fn keys(domain: &str) -> KeySet {
    KeySet::generate(
        TrustDomain::new(domain).expect("trust domain"),
        OffsetDateTime::now_utc(),
        KeySetLifetimes::default(),
    )
    .expect("key set")
}

fn at(unix: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(unix).expect("time")
}

fn entry(serial: &[u8], unix: i64) -> RevokedEntry {
    RevokedEntry {
        serial: Serial::from_be_bytes(serial).expect("serial"),
        revoked_at: at(unix),
    }
}

fn request(entries: Vec<RevokedEntry>, position: i64) -> CrlRequest {
    CrlRequest {
        entries,
        log_position: position,
        floor: None,
        next_update_in: Duration::hours(1),
    }
}

#[test]
fn the_list_reads_back_as_an_rfc5280_v2_crl_of_the_node_ca() {
    let keys = keys("crl.test");
    let now = OffsetDateTime::now_utc();
    let entries = vec![
        entry(&[0x7f, 0x01], 1_700_000_300),
        entry(&[0x40, 0xaa, 0xbb], 1_700_000_100),
        entry(&[0x05], 1_700_000_200),
    ];
    let crl = sign_crl(&keys.node_ca, request(entries, 42), now).expect("crl");
    let (rest, parsed) = CertificateRevocationList::from_der(&crl.der).expect("parses");
    assert!(rest.is_empty());
    let ca = X509Certificate::from_der(keys.node_ca.cert_der())
        .expect("ca")
        .1;
    parsed
        .verify_signature(ca.public_key())
        .expect("signed by the node CA key");
    assert_eq!(parsed.version().map(|v| v.0), Some(1), "v2");
    assert_eq!(parsed.issuer().as_raw(), ca.subject().as_raw());
    assert_eq!(parsed.last_update().timestamp(), now.unix_timestamp());
    assert_eq!(
        parsed.next_update().map(|t| t.timestamp()),
        Some(now.unix_timestamp() + 3600)
    );
    let listed: Vec<(Vec<u8>, i64)> = parsed
        .iter_revoked_certificates()
        .map(|r| (r.raw_serial().to_vec(), r.revocation_date.timestamp()))
        .collect();
    assert_eq!(
        listed,
        vec![
            (vec![0x05], 1_700_000_200),
            (vec![0x7f, 0x01], 1_700_000_300),
            (vec![0x40, 0xaa, 0xbb], 1_700_000_100),
        ],
        "ordered by serial"
    );
    let expected = 42 * POSITION_FACTOR + u128::try_from(now.unix_timestamp()).unwrap() * 1_000_000;
    assert_eq!(crl.number.value(), expected);
    assert_eq!(
        parsed.crl_number().map(|n| n.to_bytes_be()),
        Some(crl.number.be_bytes())
    );
    let ski = ca
        .iter_extensions()
        .find_map(|e| match e.parsed_extension() {
            ParsedExtension::SubjectKeyIdentifier(id) => Some(id.0.to_vec()),
            _ => None,
        })
        .expect("the node CA has a subject key identifier");
    let aki = parsed
        .extensions()
        .iter()
        .find_map(|e| match e.parsed_extension() {
            ParsedExtension::AuthorityKeyIdentifier(aki) => {
                aki.key_identifier.as_ref().map(|k| k.0.to_vec())
            }
            _ => None,
        })
        .expect("an authority key identifier");
    assert_eq!(aki, ski);
    assert!(parsed.extensions().iter().all(|e| !e.critical));
    assert_eq!(parsed.extensions().len(), 2);
    assert_eq!(crl_number_of(&keys.node_ca, &crl.der), Some(crl.number));
    assert!(crl.pem().starts_with("-----BEGIN X509 CRL-----\n"));
}

#[test]
fn an_empty_list_has_no_revoked_certificates_field() {
    let keys = keys("crl.test");
    let crl = sign_crl(&keys.node_ca, request(vec![], 1), OffsetDateTime::now_utc()).expect("crl");
    let parsed = CertificateRevocationList::from_der(&crl.der)
        .expect("parses")
        .1;
    assert_eq!(parsed.iter_revoked_certificates().count(), 0);
    assert!(crl.entries.is_empty());
}

#[test]
fn openssl_verifies_the_list_with_the_node_ca_and_refuses_another_ca() {
    let keys = keys("crl.test");
    let other = keys_other();
    let dir = tempfile::tempdir().expect("tempdir");
    let crl = sign_crl(
        &keys.node_ca,
        request(vec![entry(&[0x41, 0x02], 1_700_000_000)], 7),
        OffsetDateTime::now_utc(),
    )
    .expect("crl");
    let crl_path = dir.path().join("crl.der");
    std::fs::write(&crl_path, &crl.der).expect("write crl");
    let check = |ca_pem: &str| {
        let ca_path = dir.path().join("ca.pem");
        std::fs::write(&ca_path, ca_pem).expect("write ca");
        let out = Command::new("openssl")
            .args(["crl", "-inform", "DER", "-noout", "-text", "-in"])
            .arg(&crl_path)
            .arg("-CAfile")
            .arg(&ca_path)
            .output()
            .expect("openssl crl (apt-get install openssl)");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, text, err) = check(&keys.node_ca.cert_pem());
    assert!(ok, "{text}{err}");
    assert!(err.contains("verify OK"), "{err}");
    assert!(text.contains("Version 2 (0x1)"), "{text}");
    assert!(text.contains("Serial Number: 4102"), "{text}");
    let number = crl.number.to_string();
    assert!(text.contains("X509v3 CRL Number:"), "{text}");
    assert!(text.lines().any(|l| l.trim() == number), "{text}");
    let (ok, _, err) = check(&other.node_ca.cert_pem());
    assert!(
        !ok,
        "another deployment's node CA must not verify the list: {err}"
    );
    assert_eq!(crl_number_of(&other.node_ca, &crl.der), None);
}

fn keys_other() -> KeySet {
    keys("other.test")
}

#[test]
fn the_number_rises_with_the_log_then_with_the_time_and_above_a_floor() {
    let t = at(1_800_000_000);
    let n = |p, t, f| CrlNumber::derive(p, t, f).expect("number");
    // A later head wins even against an earlier clock (another replica, a clock set back).
    assert!(n(11, t - Duration::days(365), None) > n(10, t, None));
    // The same head: the later list.
    assert!(n(10, t + Duration::seconds(1), None) > n(10, t, None));
    // A floor from the file being replaced: one above it whatever the clock says.
    let earlier = n(10, t + Duration::hours(1), None);
    assert_eq!(n(10, t, Some(earlier)).value(), earlier.value() + 1);
    assert_eq!(n(10, t, Some(n(9, t, None))), n(10, t, None));
    assert_eq!(
        CrlNumber::derive(-1, t, None),
        Err(CrlError::NegativePosition)
    );
    assert_eq!(
        CrlNumber::derive(1, at(-1), None),
        Err(CrlError::TimeOutOfRange)
    );
    // At most 16 octets (RFC 5280: 20).
    assert!(n(i64::MAX, t, None).be_bytes().len() <= 16);
}

#[test]
fn each_refusal_names_its_reason() {
    let keys = keys("crl.test");
    let now = OffsetDateTime::now_utc();
    let with_interval = |d: Duration| CrlRequest {
        next_update_in: d,
        ..request(vec![], 1)
    };
    assert_eq!(
        sign_crl(&keys.node_ca, with_interval(Duration::ZERO), now),
        Err(CrlError::BadInterval(0))
    );
    assert_eq!(
        sign_crl(&keys.node_ca, with_interval(Duration::days(8)), now),
        Err(CrlError::BadInterval(8 * 86_400))
    );
    let late = keys.node_ca.not_after() + Duration::seconds(1);
    assert_eq!(
        sign_crl(&keys.node_ca, request(vec![], 1), late),
        Err(CrlError::Ca(CaError::IssuerExpired {
            kind: crate::pki::CaKind::Node,
            not_after: keys.node_ca.not_after().unix_timestamp(),
        }))
    );
    assert_eq!(
        CrlError::BadInterval(0).to_string(),
        "the next-update interval must be more than 0 s and at most 7 days; got 0 s"
    );
}

/// The build time and size at 100,000 entries (not a bound; run by hand:
/// `cargo test -p domain --lib pki::crl::tests::measure -- --ignored --nocapture`; with
/// `CRL_MEASURE_OUT=DIR` it writes the list, the CA and an `openssl ca` index of the same
/// entries: `benchmarks/crl-gencrl.sh`).
#[test]
#[ignore]
fn measure_a_list_of_100_000() {
    let keys = keys("crl.test");
    let entries: Vec<RevokedEntry> = (0..100_000u32)
        .map(|i| {
            let mut serial = [0u8; 16];
            serial[0] = 0x40;
            serial[12..].copy_from_slice(&i.wrapping_mul(2_654_435_761).to_be_bytes());
            serial[4..8].copy_from_slice(&i.to_be_bytes());
            entry(&serial, 1_700_000_000 + i64::from(i))
        })
        .collect();
    let started = std::time::Instant::now();
    let crl = sign_crl(
        &keys.node_ca,
        request(entries, 1_000_000),
        OffsetDateTime::now_utc(),
    )
    .expect("crl");
    let took = started.elapsed();
    eprintln!(
        "100000 entries: {} bytes DER, {} bytes PEM, signed in {:?}",
        crl.der.len(),
        crl.pem().len(),
        took
    );
    if let Ok(dir) = std::env::var("CRL_MEASURE_OUT") {
        std::fs::write(format!("{dir}/crl-100k.der"), &crl.der).expect("write");
        std::fs::write(format!("{dir}/node-ca.pem"), keys.node_ca.cert_pem()).expect("write");
        // The same list as an `openssl ca` database (benchmarks/crl-gencrl.sh): status R,
        // expiry, revocation date, serial, file, subject.
        let utc = |t: OffsetDateTime| {
            format!(
                "{:02}{:02}{:02}{:02}{:02}{:02}Z",
                t.year() % 100,
                u8::from(t.month()),
                t.day(),
                t.hour(),
                t.minute(),
                t.second()
            )
        };
        let expiry = utc(OffsetDateTime::now_utc() + Duration::days(1));
        let index: String = crl
            .entries
            .iter()
            .map(|e| {
                format!(
                    "R\t{expiry}\t{}\t{}\tunknown\t/CN=n\n",
                    utc(e.revoked_at),
                    e.serial.to_hex().to_ascii_uppercase()
                )
            })
            .collect();
        std::fs::write(format!("{dir}/index.txt"), index).expect("write");
    }
}
