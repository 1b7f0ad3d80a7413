//! End to end with the real binaries, `curl` and `openssl`, on SQLite and on Postgres: the
//! revocation list the gateway keeps current, serves over HTTP and pushes to bcd (issue 41
//! item 4, decision 0090).
//!
//! `bcctl up --config` with `[crl] listen`; two nodes join, node B runs `bcd node` with
//! `[files] on_renew` recording `BCD_CRL_NUMBER`. Before any revocation `curl` fetches an empty
//! list (`application/pkix-crl`, DER) that `openssl crl -CAfile bundle.pem` verifies, and B's
//! `crl.pem` holds the same list. After `bcctl node revoke` of A, the gateway's list names A's
//! serial (polled every 20 ms, up to 30 s) and so does B's `crl.pem`; `openssl verify -crl_check`
//! refuses A's certificate as "certificate revoked" and accepts B's with either copy; the
//! numbers rose, and `on_renew` ran with the new list's number. The certificates name the
//! gateway's list as their CRL distribution point (`[crl] distribution_point`), and `openssl
//! verify -crl_download` fetches it from there: A revoked, B accepted. The time from the revoke
//! command to each is printed (not asserted). Another path is 404, another method 405.
//!
//! Run: `cargo build -p bcd && BCD_TEST_BIN=$PWD/target/debug/bcd cargo test -p cli --test
//! suite crl_publish_e2e::` (Postgres at `DATABASE_URL`).

use crate::support::{wait_for, Proc};
use crate::x509pop_e2e::{bcd, run, start_server_configured, status, Server};

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use events::store::testkit::TestDb;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Runs `program args`: (success, stdout + stderr).
fn tool(program: &str, args: &[&str]) -> (bool, String) {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e} (apt-get install {program})"));
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// `curl` of `url` into `out`: the HTTP status and content type.
fn curl(url: &str, out: &Path, method: &str) -> (u16, String) {
    let o = out.display().to_string();
    let (ok, text) = tool(
        "curl",
        &[
            "-s",
            "-X",
            method,
            "-o",
            &o,
            "-w",
            "%{http_code} %{content_type}",
            url,
        ],
    );
    assert!(ok, "curl {url}: {text}");
    let (code, kind) = text.split_once(' ').unwrap_or((&text, ""));
    (code.parse().unwrap_or(0), kind.to_owned())
}

/// The revoked serials (upper-case hex, as openssl prints them) and the number of a list.
fn read_list(path: &Path, form: &str) -> (Vec<String>, u128) {
    let p = path.display().to_string();
    let (ok, text) = tool(
        "openssl",
        &["crl", "-inform", form, "-in", &p, "-noout", "-text"],
    );
    assert!(ok, "openssl crl -text {p}: {text}");
    let serials = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Serial Number: "))
        .map(|s| s.trim().to_owned())
        .collect();
    let (ok, n) = tool(
        "openssl",
        &["crl", "-inform", form, "-in", &p, "-noout", "-crlnumber"],
    );
    assert!(ok, "{n}");
    let hex = n.trim().strip_prefix("crlNumber=0x").unwrap_or("");
    (serials, u128::from_str_radix(hex, 16).unwrap_or(0))
}

fn join(server: &Server, data: &Path) -> (String, String) {
    let mut cmd = bcd(server, data, &["join"]);
    cmd.env("BCD_JOIN_TOKEN", server.s("token"));
    let (code, stdout, stderr) = run(cmd);
    assert_eq!(code, 0, "bcd join: {stdout}{stderr}");
    let st = status(server, data);
    let serial = st["serial"].as_str().expect("serial").to_ascii_uppercase();
    (st["nodeId"].as_str().expect("nodeId").to_owned(), serial)
}

/// `openssl verify -crl_check` of `cert` with `crl` (PEM) and the node CA.
fn verify(cert: &Path, crl: &Path, ca: &Path) -> (bool, String) {
    let (c, l, a) = (
        cert.display().to_string(),
        crl.display().to_string(),
        ca.display().to_string(),
    );
    tool(
        "openssl",
        &[
            "verify",
            "-partial_chain",
            "-crl_check",
            "-CRLfile",
            &l,
            "-CAfile",
            &a,
            &c,
        ],
    )
}

/// `openssl verify -crl_check -crl_download` of `cert` with the node CA: the list fetched from
/// the certificate's own CRL distribution point.
fn verify_downloading(cert: &Path, ca: &Path) -> (bool, String) {
    let (c, a) = (cert.display().to_string(), ca.display().to_string());
    tool(
        "openssl",
        &[
            "verify",
            "-partial_chain",
            "-crl_check",
            "-crl_download",
            "-CAfile",
            &a,
            &c,
        ],
    )
}

fn scenario(db_url: &str, label: &str) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let config = tmp.path().join("serve.toml");
    let url = format!("http://127.0.0.1:{port}/node-ca.crl");
    fs::write(
        &config,
        format!("[crl]\nlisten = \"127.0.0.1:{port}\"\ndistribution_point = \"{url}\"\n"),
    )
    .expect("config");
    let server = start_server_configured(tmp.path(), db_url, "1h", 3, Some(&config));
    let (a, b) = (tmp.path().join("node-a"), tmp.path().join("node-b"));
    let (node_a, serial_a) = join(&server, &a);
    let (_, serial_b) = join(&server, &b);
    let ca = b.join("bundle.pem");

    // Node B holds a session, [files] on_renew recording each list's number.
    let hook_log = tmp.path().join("hook.log");
    let bcd_config = PathBuf::from(server.s("bcdConfig"));
    let mut text = fs::read_to_string(&bcd_config).expect("bcd config");
    text.push_str(&format!(
        "\n[files]\non_renew = \"echo $BCD_CRL_NUMBER >> {}\"\n",
        hook_log.display()
    ));
    // Both nodes joined: from here on bcd reads the hook (its JWKs are beside the config).
    fs::write(&bcd_config, text).expect("bcd config");
    let node = bcd(&server, &b, &["node"]);
    let node_b = Proc::spawn("bcd node", node, tmp.path().join("bcd-b.log"));
    let b_crl = b.join("crl.pem");

    // Before any revocation: an empty list over HTTP, verified by the node CA, and B's copy.
    let fetched = tmp.path().join("fetched.crl");
    let (code, kind) = curl(&url, &fetched, "GET");
    assert_eq!((code, kind.as_str()), (200, "application/pkix-crl"));
    let f = fetched.display().to_string();
    let (ok, text) = tool(
        "openssl",
        &[
            "crl",
            "-inform",
            "DER",
            "-in",
            &f,
            "-noout",
            "-CAfile",
            &ca.display().to_string(),
        ],
    );
    assert!(ok && text.contains("verify OK"), "{text}");
    let (listed, n0) = read_list(&fetched, "DER");
    assert_eq!(listed, Vec::<String>::new());
    wait_for(
        "node B's crl.pem",
        Duration::from_secs(30),
        || b_crl.exists(),
        || node_b.log_text(),
    );

    // Revoke A: the gateway's list and B's copy name it.
    let revoked_at = Instant::now();
    server.bcctl(&["node", "revoke", &node_a, "--reason", "crl publish test"]);
    let mut at_gateway = None;
    let mut at_node = None;
    wait_for(
        "the revoked serial at the gateway and in node B's crl.pem",
        Duration::from_secs(30),
        || {
            if at_gateway.is_none() {
                let (code, _) = curl(&url, &fetched, "GET");
                if code == 200 && read_list(&fetched, "DER").0 == vec![serial_a.clone()] {
                    at_gateway = Some(revoked_at.elapsed());
                }
            }
            if at_node.is_none() && read_list(&b_crl, "PEM").0 == vec![serial_a.clone()] {
                at_node = Some(revoked_at.elapsed());
            }
            if at_gateway.is_none() || at_node.is_none() {
                std::thread::sleep(Duration::from_millis(20));
            }
            at_gateway.is_some() && at_node.is_some()
        },
        || node_b.log_text(),
    );
    eprintln!(
        "{label}: from `bcctl node revoke` to the new list at the gateway {:?}, in node B's crl.pem {:?}",
        at_gateway.unwrap_or_default(),
        at_node.unwrap_or_default()
    );
    let (_, n1) = read_list(&fetched, "DER");
    let (_, n_b) = read_list(&b_crl, "PEM");
    assert!(
        n1 > n0 && n_b > n0,
        "{n0} then {n1} (gateway), {n_b} (node B)"
    );

    // openssl verify with each copy: A refused as revoked, B accepted.
    let fetched_pem = tmp.path().join("fetched.pem");
    let (ok, text) = tool(
        "openssl",
        &[
            "crl",
            "-inform",
            "DER",
            "-in",
            &f,
            "-out",
            &fetched_pem.display().to_string(),
        ],
    );
    assert!(ok, "{text}");
    for list in [&fetched_pem, &b_crl] {
        let (ok, text) = verify(&a.join("cert.pem"), list, &ca);
        assert!(!ok && text.contains("certificate revoked"), "{text}");
        let (ok, text) = verify(&b.join("cert.pem"), list, &ca);
        assert!(ok && text.contains(": OK"), "{text}");
    }
    // And by the distribution point the certificates name: openssl fetches the list itself.
    let (_, shown) = tool(
        "openssl",
        &[
            "x509",
            "-noout",
            "-text",
            "-in",
            &a.join("cert.pem").display().to_string(),
        ],
    );
    assert!(
        shown.contains("X509v3 CRL Distribution Points") && shown.contains(&format!("URI:{url}")),
        "{shown}"
    );
    let (ok, text) = verify_downloading(&a.join("cert.pem"), &ca);
    assert!(!ok && text.contains("certificate revoked"), "{text}");
    let (ok, text) = verify_downloading(&b.join("cert.pem"), &ca);
    assert!(ok && text.contains(": OK"), "{text}");
    assert_ne!(serial_a, serial_b);

    // on_renew ran after each list B took, the last with the list it holds.
    wait_for(
        "on_renew after the new list",
        Duration::from_secs(30),
        || {
            fs::read_to_string(&hook_log)
                .unwrap_or_default()
                .lines()
                .any(|l| l.trim() == n_b.to_string())
        },
        || node_b.log_text(),
    );
    let log = node_b.log_text();
    assert!(
        log.contains("files: wrote ") && log.contains("crl.pem (revocation list number "),
        "{log}"
    );

    // Another path, another method.
    let other = format!("http://127.0.0.1:{port}/crl");
    assert_eq!(curl(&other, &fetched, "GET").0, 404);
    assert_eq!(curl(&url, &fetched, "POST").0, 405);
    drop(node_b);
}

#[test]
fn crl_publish_e2e_sqlite() {
    let db = TestDb::sqlite().expect("sqlite test db");
    scenario(db.url(), "sqlite");
}

#[tokio::test(flavor = "multi_thread")]
async fn crl_publish_e2e_postgres() {
    let db = TestDb::postgres().await.expect("postgres test db");
    let url = db.url().to_owned();
    tokio::task::spawn_blocking(move || scenario(&url, "postgres"))
        .await
        .expect("scenario");
    drop(db);
}
