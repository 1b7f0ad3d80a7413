//! bcd's check of a pushed revocation list: one test per refusal (another CA's list, a number
//! not above the held one, bytes that are no list), and a rising list written as PEM with
//! `[files] mode`, read back by the real `openssl crl` against the node CA.

use std::os::unix::fs::PermissionsExt;

use domain::pki::{sign_crl, CrlCheckError, CrlRequest, KeySet, KeySetLifetimes, TrustDomain};
use time::{Duration, OffsetDateTime};

use super::*;

fn keys(domain: &str) -> KeySet {
    KeySet::generate(
        TrustDomain::new(domain).expect("trust domain"),
        OffsetDateTime::now_utc(),
        KeySetLifetimes::default(),
    )
    .expect("key set")
}

/// A list of `keys`' node CA at log position `position` (its number rises with it).
fn list(keys: &KeySet, position: i64) -> Vec<u8> {
    let request = CrlRequest {
        entries: Vec::new(),
        log_position: position,
        floor: None,
        next_update_in: Duration::hours(1),
    };
    sign_crl(&keys.node_ca, request, OffsetDateTime::now_utc())
        .expect("crl")
        .der
}

fn settings(dir: &std::path::Path) -> FileSettings {
    FileSettings::defaults(dir)
}

fn chain(keys: &KeySet) -> Vec<Vec<u8>> {
    vec![keys.node_ca.cert_der().to_vec()]
}

#[test]
fn a_rising_list_of_the_node_ca_is_written_as_pem_with_the_files_mode() {
    let dir = tempfile::tempdir().expect("dir");
    let keys = keys("crl.test");
    let s = settings(dir.path());
    let first = store_pushed(&s, &chain(&keys), &list(&keys, 5)).expect("first");
    let second = store_pushed(&s, &chain(&keys), &list(&keys, 6)).expect("second");
    assert!(second.number > first.number);
    let mode = std::fs::metadata(&s.crl)
        .expect("file")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o644);
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, keys.node_ca.cert_pem()).expect("ca");
    let out = std::process::Command::new("openssl")
        .args(["crl", "-noout", "-crlnumber", "-in"])
        .arg(&s.crl)
        .arg("-CAfile")
        .arg(&ca)
        .output()
        .expect("openssl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("verify OK"), "{text}");
    assert!(
        text.contains(&format!("crlNumber=0x{:X}", second.number.value())),
        "{text}"
    );
}

#[test]
fn a_list_another_ca_signed_is_refused_and_the_held_one_stays() {
    let dir = tempfile::tempdir().expect("dir");
    let (ours, theirs) = (keys("crl.test"), keys("crl.test"));
    let s = settings(dir.path());
    store_pushed(&s, &chain(&ours), &list(&ours, 5)).expect("held");
    let held = std::fs::read(&s.crl).expect("held file");
    let refused = store_pushed(&s, &chain(&ours), &list(&theirs, 9)).expect_err("refused");
    assert!(
        matches!(
            refused,
            CrlRefusal::NotTheNodeCa(CrlCheckError::BadSignature)
        ),
        "{refused:?}"
    );
    assert_eq!(std::fs::read(&s.crl).expect("held file"), held);
}

#[test]
fn a_list_whose_number_is_not_above_the_held_one_is_refused() {
    let dir = tempfile::tempdir().expect("dir");
    let keys = keys("crl.test");
    let s = settings(dir.path());
    let older = list(&keys, 5);
    let newer = store_pushed(&s, &chain(&keys), &list(&keys, 6)).expect("held");
    let refused = store_pushed(&s, &chain(&keys), &older).expect_err("refused");
    match refused {
        CrlRefusal::NotRising { got, held, .. } => {
            assert_eq!(held, newer.number);
            assert!(got < held);
        }
        other => panic!("{other:?}"),
    }
    // The same list again is not above itself either.
    let again = std::fs::read_to_string(&s.crl).expect("held");
    let der = domain::pki::read_pem_blocks("X509 CRL", &again).expect("pem");
    assert!(matches!(
        store_pushed(&s, &chain(&keys), &der[0]),
        Err(CrlRefusal::NotRising { .. })
    ));
}

#[test]
fn bytes_that_are_no_list_are_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().expect("dir");
    let keys = keys("crl.test");
    let s = settings(dir.path());
    let refused = store_pushed(&s, &chain(&keys), b"not a list").expect_err("refused");
    assert!(
        matches!(refused, CrlRefusal::NotTheNodeCa(CrlCheckError::NotACrl)),
        "{refused:?}"
    );
    assert!(!s.crl.exists());
}
