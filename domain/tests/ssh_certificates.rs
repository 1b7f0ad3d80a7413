//! OpenSSH user certificates and KRLs written by `domain::ssh` (issue 42), checked by the real
//! `ssh-keygen`: `-L` reads the certificate's type, principal, validity, serial, key id and
//! extensions as issued, for each accepted key type; `-Q -f KRL` reports a listed serial
//! revoked and another not. And the issuance's refusals, one test per reason, each with its
//! exact message; the SSH CA's bundle round trip (sealed, plaintext, older bundles without it).
//!
//! Run: `cargo test -p domain --test suite ssh_certificates::`.

use std::path::Path;
use std::process::Command;

use domain::pki::{
    open_bundle, plaintext_bundle, seal_bundle_with, Argon2idParams, BundleKdf, DeploymentSecret,
    KeySet, SshCa, TrustDomain,
};
use domain::ssh::issue::{
    decide_issue, decide_revoke, Entropy, IssueRequest, NodeSshState, SshCertState, SshRefusal,
};
use domain::ssh::key::KeyRefusal;
use domain::ssh::krl::{write_krl, KrlRequest};
use time::{Duration, OffsetDateTime};

const NOW: i64 = 1_900_000_000;

fn now() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(NOW).unwrap()
}

fn active() -> NodeSshState {
    NodeSshState {
        status: "active".into(),
        identity_revoked: false,
    }
}

fn keygen(dir: &Path, name: &str, args: &[&str]) -> String {
    let path = dir.join(name);
    let out = Command::new("ssh-keygen")
        .args(args)
        .args(["-q", "-N", "", "-C", "test", "-f"])
        .arg(&path)
        .output()
        .expect("run ssh-keygen");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read_to_string(path.with_extension("pub")).unwrap()
}

fn request<'a>(key: &'a str, ttl: Duration) -> IssueRequest<'a> {
    IssueRequest {
        node_id: "node-7",
        account: "root",
        public_key: key,
        ttl,
        operator: "spiffe://ops.example.com/operator/alice",
        credential_not_after: None,
    }
}

fn entropy(serial: u64) -> Entropy {
    Entropy {
        serial,
        nonce: [9u8; 32],
    }
}

fn refusal(req: &IssueRequest<'_>, node: Option<&NodeSshState>) -> SshRefusal {
    let ca = SshCa::generate().unwrap();
    decide_issue(req, node, Some(&ca), now(), entropy(5)).unwrap_err()
}

fn ssh_keygen(args: &[&str], file: &Path) -> (bool, String) {
    let out = Command::new("ssh-keygen")
        .args(args)
        .arg(file)
        .output()
        .expect("run ssh-keygen");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn ssh_keygen_reads_each_accepted_key_types_certificate_and_the_krl() {
    let dir = tempfile::tempdir().unwrap();
    let ca = SshCa::generate().unwrap();
    let kinds: [(&str, &[&str], &str); 5] = [
        ("ed", &["-t", "ed25519"], "ssh-ed25519-cert-v01@openssh.com"),
        (
            "p256",
            &["-t", "ecdsa", "-b", "256"],
            "ecdsa-sha2-nistp256-cert-v01@openssh.com",
        ),
        (
            "p384",
            &["-t", "ecdsa", "-b", "384"],
            "ecdsa-sha2-nistp384-cert-v01@openssh.com",
        ),
        (
            "p521",
            &["-t", "ecdsa", "-b", "521"],
            "ecdsa-sha2-nistp521-cert-v01@openssh.com",
        ),
        (
            "rsa",
            &["-t", "rsa", "-b", "3072"],
            "ssh-rsa-cert-v01@openssh.com",
        ),
    ];
    let mut serial = 40;
    for (name, args, cert_type) in kinds {
        serial += 1;
        let key = keygen(dir.path(), name, args);
        let decision = decide_issue(
            &request(&key, Duration::minutes(15)),
            Some(&active()),
            Some(&ca),
            now(),
            entropy(serial),
        )
        .unwrap();
        let issued = decision.outcome;
        let event = &decision.events[0];
        assert_eq!(event.serial, serial);
        assert_eq!(event.principal, "root@node-7");
        assert_eq!(event.valid_before, NOW + 900);
        assert_eq!(event.valid_after, NOW - 300);
        let cert_file = dir.path().join(format!("{name}-cert.pub"));
        std::fs::write(&cert_file, issued.certificate.to_openssh_line("c")).unwrap();
        let (ok, text) = ssh_keygen(&["-L", "-f"], &cert_file);
        assert!(ok, "{text}");
        assert!(
            text.contains(&format!("Type: {cert_type} user certificate")),
            "{text}"
        );
        assert!(text.contains(&format!("Serial: {serial}")), "{text}");
        assert!(
            text.contains(
                "Key ID: \"spiffe://ops.example.com/operator/alice break-glass root@node-7\""
            ),
            "{text}"
        );
        assert!(
            text.contains("Principals: \n                root@node-7\n"),
            "{text}"
        );
        assert!(text.contains("Critical Options: (none)"), "{text}");
        for ext in [
            "permit-X11-forwarding",
            "permit-agent-forwarding",
            "permit-port-forwarding",
            "permit-pty",
            "permit-user-rc",
        ] {
            assert!(text.contains(&format!("                {ext}\n")), "{text}");
        }
        let fp = Command::new("ssh-keygen")
            .args(["-l", "-f"])
            .arg(dir.path().join(format!("{name}.pub")))
            .output()
            .unwrap();
        let fp = String::from_utf8_lossy(&fp.stdout).to_string();
        assert!(
            fp.contains(&issued.key_fingerprint),
            "{fp} vs {}",
            issued.key_fingerprint
        );
        assert!(
            text.contains(&format!(
                "Signing CA: ED25519 {}",
                domain::ssh::key::fingerprint_of(&ca.public_key_blob())
            )),
            "{text}"
        );
        // Validity as ssh-keygen prints it (local time): check it reads the same instants.
        assert!(text.contains("Valid: from "), "{text}");
    }
    // The KRL: serial 41 and 43 revoked, 42 not.
    let krl = write_krl(&KrlRequest {
        krl_version: 3,
        generated_at: NOW as u64,
        comment: "test",
        ca_key_blob: &ca.public_key_blob(),
        serials: &[43, 41],
    });
    let krl_file = dir.path().join("revoked.krl");
    std::fs::write(&krl_file, krl).unwrap();
    let (ok, text) = ssh_keygen(&["-Q", "-f"], &krl_file);
    let _ = (ok, text);
    let check = |name: &str| {
        Command::new("ssh-keygen")
            .args(["-Q", "-f"])
            .arg(&krl_file)
            .arg(dir.path().join(format!("{name}-cert.pub")))
            .output()
            .unwrap()
    };
    let revoked = check("ed");
    assert!(!revoked.status.success());
    assert!(
        String::from_utf8_lossy(&revoked.stdout).contains("REVOKED"),
        "{revoked:?}"
    );
    let fine = check("p256");
    assert!(fine.status.success(), "{fine:?}");
    assert!(
        String::from_utf8_lossy(&fine.stdout).contains("ok"),
        "{fine:?}"
    );
    let (ok, text) = ssh_keygen(&["-k", "-f", "/dev/null", "-Q", "-l", "-f"], &krl_file);
    let _ = (ok, text);
}

#[test]
fn ssh_refuses_a_node_that_is_not_active() {
    let key = keygen(tempfile::tempdir().unwrap().path(), "k", &["-t", "ed25519"]);
    let retired = NodeSshState {
        status: "retired".into(),
        identity_revoked: false,
    };
    let r = refusal(&request(&key, Duration::minutes(5)), Some(&retired));
    assert_eq!(
        r.to_string(),
        "INVALID_STATE: node node-7 is retired, not active: it gets no SSH certificate"
    );
    let revoked = NodeSshState {
        status: "active".into(),
        identity_revoked: true,
    };
    let r = refusal(&request(&key, Duration::minutes(5)), Some(&revoked));
    assert_eq!(r, SshRefusal::NodeRevoked("node-7".into()));
    let r = refusal(&request(&key, Duration::minutes(5)), None);
    assert_eq!(r, SshRefusal::NodeNotFound("node-7".into()));
}

#[test]
fn ssh_refuses_a_ttl_over_an_hour() {
    let key = keygen(tempfile::tempdir().unwrap().path(), "k", &["-t", "ed25519"]);
    let r = refusal(&request(&key, Duration::minutes(61)), Some(&active()));
    assert_eq!(
        r.to_string(),
        "INVALID_INPUT: --ttl 3660s: a break-glass certificate lives at most 1h (3600s)"
    );
    let ca = SshCa::generate().unwrap();
    assert!(decide_issue(
        &request(&key, Duration::hours(1)),
        Some(&active()),
        Some(&ca),
        now(),
        entropy(1)
    )
    .is_ok());
}

#[test]
fn ssh_refuses_a_ttl_past_the_operator_certificate() {
    let key = keygen(tempfile::tempdir().unwrap().path(), "k", &["-t", "ed25519"]);
    let mut req = request(&key, Duration::minutes(30));
    req.credential_not_after = Some(now() + Duration::minutes(10));
    let r = refusal(&req, Some(&active()));
    assert_eq!(
        r.to_string(),
        "INVALID_INPUT: --ttl: the certificate would be valid until 2030-03-17T18:16:40Z but your operator certificate expires at 2030-03-17T17:56:40Z; ask for a shorter --ttl or renew your operator certificate"
    );
}

#[test]
fn ssh_refuses_an_rsa_key_under_3072_bits() {
    let key = keygen(
        tempfile::tempdir().unwrap().path(),
        "k",
        &["-t", "rsa", "-b", "2048"],
    );
    let r = refusal(&request(&key, Duration::minutes(5)), Some(&active()));
    assert_eq!(r, SshRefusal::Key(KeyRefusal::RsaTooShort(2048)));
    assert_eq!(
        r.to_string(),
        "INVALID_INPUT: --public-key: an RSA key of 2048 bits is not accepted: RSA keys need at least 3072 bits (or use Ed25519)"
    );
}

#[test]
fn ssh_refuses_a_dsa_key() {
    // OpenSSH may no longer generate DSA keys; the blob's shape is what matters here.
    use base64::Engine as _;
    let mut blob = Vec::new();
    for field in [
        &b"ssh-dss"[..],
        &[1u8; 129],
        &[1u8; 21],
        &[1u8; 128],
        &[1u8; 128],
    ] {
        blob.extend_from_slice(&(field.len() as u32).to_be_bytes());
        blob.extend_from_slice(field);
    }
    let key = format!(
        "ssh-dss {} old",
        base64::engine::general_purpose::STANDARD.encode(blob)
    );
    let r = refusal(&request(&key, Duration::minutes(5)), Some(&active()));
    assert_eq!(
        r.to_string(),
        "INVALID_INPUT: --public-key: key type ssh-dss is not accepted: use Ed25519, ECDSA (P-256, P-384, P-521) or RSA of at least 3072 bits"
    );
}

#[test]
fn ssh_refuses_a_principal_with_a_comma_or_a_wildcard() {
    let key = keygen(tempfile::tempdir().unwrap().path(), "k", &["-t", "ed25519"]);
    let mut req = request(&key, Duration::minutes(5));
    req.account = "root,admin";
    assert_eq!(
        refusal(&req, Some(&active())).to_string(),
        "INVALID_INPUT: --account \"root,admin\" holds a comma (a principal list): a principal names exactly one account on one node"
    );
    let mut req = request(&key, Duration::minutes(5));
    req.node_id = "node-*";
    assert_eq!(
        refusal(&req, Some(&active())).to_string(),
        "INVALID_INPUT: --node \"node-*\" holds a wildcard (* or ?): a principal names exactly one account on one node"
    );
}

#[test]
fn ssh_revoke_refuses_an_unknown_serial_and_revokes_once() {
    assert_eq!(
        decide_revoke(77, None, "done").unwrap_err().to_string(),
        "NOT_FOUND: no SSH certificate has serial 77 (`bcctl ssh list` shows them)"
    );
    let live = SshCertState {
        node_id: "node-7".into(),
        revoked: false,
    };
    assert_eq!(
        decide_revoke(77, Some(&live), "done").unwrap().events.len(),
        1
    );
    let gone = SshCertState {
        revoked: true,
        ..live
    };
    assert!(decide_revoke(77, Some(&gone), "done")
        .unwrap()
        .events
        .is_empty());
}

#[test]
fn ssh_ca_round_trips_in_bundles_and_older_bundles_stay_readable() {
    let keys = KeySet::generate(
        TrustDomain::new("ops.example.com").unwrap(),
        now(),
        Default::default(),
    )
    .unwrap();
    let line = keys.ssh_ca.as_ref().unwrap().public_key_line();
    let secret = DeploymentSecret::new("a-deployment-secret-of-more-than-32-characters").unwrap();
    let kdf = BundleKdf::Argon2id(Argon2idParams {
        memory_kib: 64,
        iterations: 1,
        parallelism: 1,
    });
    let sealed = seal_bundle_with(&keys, &secret, kdf).unwrap();
    let opened = open_bundle(&sealed, Some(&secret)).unwrap();
    assert_eq!(opened.keys.unwrap().ssh_ca.unwrap().public_key_line(), line);
    assert_eq!(
        opened.public.pins().unwrap().ssh_ca_public_key,
        Some(line.clone())
    );
    let plain = open_bundle(&plaintext_bundle(&keys).unwrap(), None).unwrap();
    assert_eq!(plain.keys.unwrap().ssh_ca.unwrap().public_key_line(), line);
    // The public line is covered by the seal.
    let other = SshCa::generate().unwrap().public_key_line();
    let swapped = String::from_utf8(sealed.clone())
        .unwrap()
        .replace(&line, &other);
    assert!(open_bundle(swapped.as_bytes(), Some(&secret)).is_err());
    // An older bundle (no SSH CA) opens, then gets one once.
    let mut old = keys;
    old.ssh_ca = None;
    let bytes = seal_bundle_with(&old, &secret, kdf).unwrap();
    let mut reopened = open_bundle(&bytes, Some(&secret)).unwrap().keys.unwrap();
    assert!(reopened.ssh_ca.is_none());
    reopened.add_ssh_ca().unwrap();
    assert_eq!(
        reopened.add_ssh_ca().unwrap_err().to_string(),
        "INVALID_STATE: the bundle already has an SSH CA (`bcctl pki show` prints its public key)"
    );
}
