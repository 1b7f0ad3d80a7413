//! End to end with the real binaries and the Debian nginx: software other than bcd uses the
//! node's identity through the PEM files bcd writes, and sees a revoked node as revoked.
//!
//! `bcctl up` (SQLite) issues 15 s leaves (`BC_LEAF_LIFETIME`), so `bcd node` renews every 9 s.
//! A node joins with `[files] on_renew` set to a script that records the serial it was run for
//! and reloads nginx; the join writes `cert.pem` (leaf + node CA, 0644), `bundle.pem` (the node
//! CA, 0644) and `key.pem` (PKCS#8, 0600) in the data directory and runs `on_renew` (which fails
//! there: nginx is not running yet, and the join still succeeds). nginx serves TLS on loopback
//! from those files; after `bcd node`'s renewal the served certificate's serial is the renewed
//! leaf's and `openssl verify -partial_chain -CAfile bundle.pem` accepts it. An `on_renew` made
//! to fail is logged and the node goes on renewing. Then the node is revoked: `bcd node` exits
//! 1, `bcd status --json` says `revoked` with the record, `bcd doctor` fails the `revocation`
//! check with the way back printed once, and with the record gone doctor finds the revocation
//! through the gateway under the same check.
//!
//! Run: `cargo test -p cli --test suite nginx_pem::`.

use crate::support;
use crate::x509pop_e2e::{bcd, run, start_server, status};

use support::{wait_for, Proc};

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use events::store::testkit::TestDb;

const NGINX: &str = "/usr/sbin/nginx";
const LEAF_LIFETIME: &str = "15s";
/// The way back `bcd status` and `bcd doctor` print for a revoked certificate.
const REVOKED_WAY_BACK: &str = "the revoked certificate cannot renew or open a session again; \
join again with fresh evidence: bcd join --reset --yes, then bcd join with a new token (bcctl \
token create on the control plane) or --attestor tpm";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// The serial of the first certificate in PEM `text`, upper-case hex without leading zeros.
fn serial_of_pem(text: &str, scratch: &Path) -> String {
    let begin = text
        .find("-----BEGIN CERTIFICATE-----")
        .expect("a certificate");
    let end_marker = "-----END CERTIFICATE-----";
    let end = text[begin..].find(end_marker).expect("its end") + begin + end_marker.len();
    fs::write(scratch, format!("{}\n", &text[begin..end])).expect("write pem");
    let out = Command::new("openssl")
        .args(["x509", "-noout", "-serial", "-in"])
        .arg(scratch)
        .output()
        .expect("openssl x509");
    assert!(out.status.success(), "{out:?}");
    let line = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    norm(line.strip_prefix("serial=").unwrap_or(&line))
}

fn norm(serial: &str) -> String {
    let s = serial.trim().to_ascii_uppercase();
    let s = s.trim_start_matches('0');
    if s.is_empty() {
        "0".into()
    } else {
        s.into()
    }
}

/// The certificate nginx serves on `port` (PEM, as `openssl s_client` prints it).
fn served(port: u16) -> Option<String> {
    let out = Command::new("openssl")
        .args(["s_client", "-connect", &format!("127.0.0.1:{port}")])
        .stdin(Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.contains("-----BEGIN CERTIFICATE-----").then_some(text)
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).expect("stat").permissions().mode() & 0o7777
}

fn nginx_conf(dir: &Path, port: u16, data: &Path) -> PathBuf {
    let d = dir.display();
    let conf = format!(
        "daemon off;\nmaster_process on;\nworker_processes 1;\npid {d}/nginx.pid;\n\
         error_log {d}/nginx-error.log info;\nevents {{ worker_connections 64; }}\n\
         http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  \
         proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n  \
         uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n  server {{\n    \
         listen 127.0.0.1:{port} ssl;\n    ssl_certificate {cert};\n    \
         ssl_certificate_key {key};\n    location / {{ return 200 \"ok\\n\"; }}\n  }}\n}}\n",
        cert = data.join("cert.pem").display(),
        key = data.join("key.pem").display(),
    );
    let path = dir.join("nginx.conf");
    fs::write(&path, conf).expect("nginx.conf");
    path
}

fn scenario(db_url: &str) {
    assert!(
        Path::new(NGINX).exists(),
        "{NGINX} is missing: this test runs the Debian nginx; apt-get install nginx"
    );
    let tmp = tempfile::tempdir().expect("tempdir");
    let server = start_server(tmp.path(), db_url, LEAF_LIFETIME);
    let data = tmp.path().join("node");
    let web = tmp.path().join("nginx");
    fs::create_dir_all(&web).expect("mkdir nginx");
    let port = free_port();
    let conf = nginx_conf(&web, port, &data);
    let marker = tmp.path().join("on-renew.log");
    let fail_flag = tmp.path().join("fail-on-renew");

    // [files] on_renew in the bcd config `bcctl up` wrote (the JWKs are beside it).
    let hook = format!(
        "echo \"$BCD_SERIAL\" >> {marker}; test ! -e {flag} || exit 7; {NGINX} -q -e {err} -c \
         {conf} -p {web} -s reload",
        marker = marker.display(),
        flag = fail_flag.display(),
        err = web.join("reload.log").display(),
        conf = conf.display(),
        web = web.display(),
    );
    let bcd_config = PathBuf::from(server.s("bcdConfig"));
    let mut text = fs::read_to_string(&bcd_config).expect("bcd config");
    text.push_str(&format!(
        "\n[files]\non_renew = {}\non_renew_timeout_seconds = 20\n",
        toml_string(&hook)
    ));
    fs::write(&bcd_config, text).expect("write bcd config");

    // The join writes the files and runs on_renew, which fails (nginx is not running): logged,
    // and the join succeeds.
    let mut join = bcd(&server, &data, &["join"]);
    join.env("BCD_JOIN_TOKEN", server.s("token"));
    let (code, stdout, stderr) = run(join);
    assert_eq!(code, 0, "bcd join: {stdout}{stderr}");
    assert!(
        stderr.contains("bcd join: files: wrote "),
        "bcd join: {stdout}{stderr}"
    );
    assert!(
        stderr.contains("bcd join: files: [files] on_renew ")
            && stderr
                .contains(" failed (exit status: 1); the new files are in place, the node goes on"),
        "{stderr}"
    );
    let joined = status(&server, &data);
    let join_serial = norm(joined["serial"].as_str().expect("serial"));
    let (cert, bundle, key) = (
        data.join("cert.pem"),
        data.join("bundle.pem"),
        data.join("key.pem"),
    );
    assert_eq!(
        (mode(&cert), mode(&bundle), mode(&key)),
        (0o644, 0o644, 0o600)
    );
    let cert_text = fs::read_to_string(&cert).expect("cert.pem");
    let bundle_text = fs::read_to_string(&bundle).expect("bundle.pem");
    assert_eq!(cert_text.matches("-----BEGIN CERTIFICATE-----").count(), 2);
    assert_eq!(
        bundle_text.matches("-----BEGIN CERTIFICATE-----").count(),
        1
    );
    // The bundle is the chain's second certificate: the node CA.
    assert!(
        cert_text.ends_with(&bundle_text),
        "{cert_text}\n{bundle_text}"
    );
    assert!(fs::read_to_string(&key)
        .expect("key.pem")
        .starts_with("-----BEGIN PRIVATE KEY-----\n"));
    assert_eq!(
        serial_of_pem(&cert_text, &tmp.path().join("s.pem")),
        join_serial
    );
    let ran = fs::read_to_string(&marker).expect("on_renew ran at the join");
    assert_eq!(
        ran.lines().map(norm).collect::<Vec<_>>(),
        vec![join_serial.clone()]
    );

    // nginx serves the join's certificate from bcd's files.
    let mut nginx_cmd = Command::new(NGINX);
    nginx_cmd
        .arg("-e")
        .arg(web.join("startup.log"))
        .arg("-c")
        .arg(&conf)
        .arg("-p")
        .arg(&web);
    let nginx = Proc::spawn("nginx", nginx_cmd, web.join("nginx.out"));
    let nginx_log = || {
        format!(
            "{}\n{}",
            nginx.log_text(),
            fs::read_to_string(web.join("nginx-error.log")).unwrap_or_default()
        )
    };
    wait_for(
        "nginx to serve TLS",
        Duration::from_secs(20),
        || served(port).is_some(),
        nginx_log,
    );
    let scratch = tmp.path().join("served.pem");
    let first = serial_of_pem(&served(port).expect("served"), &scratch);
    assert_eq!(first, join_serial);

    // bcd node renews; on_renew reloads nginx, which then serves the renewed leaf.
    let agent = Proc::spawn(
        "bcd node",
        bcd(&server, &data, &["node"]),
        tmp.path().join("bcd-node.log"),
    );
    let renewed_serials = |agent: &Proc| -> Vec<String> {
        agent
            .log_text()
            .lines()
            .filter_map(|l| l.split("renewed: certificate serial ").nth(1))
            .filter_map(|rest| rest.split_whitespace().next())
            .map(norm)
            .collect()
    };
    let mut now_served = first.clone();
    wait_for(
        "nginx to serve a renewed certificate",
        Duration::from_secs(60),
        || {
            if let Some(pem) = served(port) {
                now_served = serial_of_pem(&pem, &scratch);
            }
            now_served != join_serial
        },
        || format!("{}\n{}", agent.log_text(), nginx_log()),
    );
    assert!(
        renewed_serials(&agent).contains(&now_served),
        "served {now_served}, renewed {:?}\n{}",
        renewed_serials(&agent),
        agent.log_text()
    );
    let served_pem = served(port).expect("served");
    fs::write(&scratch, &served_pem).expect("served");
    let verify = Command::new("openssl")
        .args(["verify", "-partial_chain", "-CAfile"])
        .arg(&bundle)
        .arg(&scratch)
        .output()
        .expect("openssl verify");
    assert!(
        verify.status.success(),
        "openssl verify: {}{}",
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr)
    );
    // on_renew ran for the renewal, after the files were in place.
    let ran: Vec<String> = fs::read_to_string(&marker)
        .expect("marker")
        .lines()
        .map(norm)
        .collect();
    assert!(ran.contains(&now_served), "{ran:?}");
    assert!(
        agent.log_text().contains("files: on_renew "),
        "{}",
        agent.log_text()
    );

    // A failing on_renew is logged; bcd node goes on renewing.
    fs::write(&fail_flag, "").expect("flag");
    let mut agent = agent;
    wait_for(
        "a failed on_renew",
        Duration::from_secs(40),
        || agent.log_text().contains("failed (exit status: 7)"),
        || agent.log_text(),
    );
    let renewals = renewed_serials(&agent).len();
    wait_for(
        "a renewal after the failed on_renew",
        Duration::from_secs(40),
        || renewed_serials(&agent).len() > renewals,
        || agent.log_text(),
    );
    assert!(agent.is_running(), "{}", agent.log_text());
    fs::remove_file(&fail_flag).expect("unflag");

    // Revoked: bcd node exits 1; status and doctor say revoked, the way back once.
    let node = joined["nodeId"].as_str().expect("nodeId").to_owned();
    server.bcctl(&["node", "revoke", &node, "--reason", "nginx test"]);
    let exit = agent.wait_exit(Duration::from_secs(20));
    assert_eq!(exit.code(), Some(1), "{}", agent.log_text());
    let st = status(&server, &data);
    assert_eq!(st["state"], "revoked", "{st}");
    let rec = &st["revocation"];
    assert_eq!(rec["serial"], st["serial"], "{st}");
    let expected = format!(
        "{} (site {}, role {}) is revoked: the certificate (serial {}) was revoked: {} (seen by \
         bcd node at {}); {REVOKED_WAY_BACK}",
        st["nodeId"].as_str().unwrap(),
        st["siteId"].as_str().unwrap(),
        st["role"].as_str().unwrap(),
        rec["serial"].as_str().unwrap(),
        rec["reason"].as_str().unwrap(),
        rec["seenAt"].as_str().unwrap(),
    );
    assert_eq!(st["problem"].as_str(), Some(expected.as_str()), "{st}");
    let (code, text, _) = run(bcd(&server, &data, &["status"]));
    assert_eq!(code, 1);
    assert_eq!(text, format!("{expected}\n"));

    let (code, doctor, err) = run(bcd(&server, &data, &["doctor"]));
    assert_eq!(code, 1, "{doctor}{err}");
    assert!(
        doctor.contains(&format!("FAIL revocation: {expected}\n")),
        "{doctor}"
    );
    assert!(
        doctor.contains(
            "warn clock skew: not checked: it needs a session, and this certificate is revoked \
             (see revocation)\n"
        ),
        "{doctor}"
    );
    assert_eq!(
        doctor.matches("bcd join --reset --yes").count(),
        1,
        "{doctor}"
    );
    assert!(
        doctor.contains(&format!(
            "ok   pem files: {} and {} match the identity\n",
            cert.display(),
            bundle.display()
        )),
        "{doctor}"
    );

    // Without the record, doctor learns it from the gateway, under the same check.
    fs::remove_file(data.join("revoked.json")).expect("rm revoked.json");
    let (code, doctor, err) = run(bcd(&server, &data, &["doctor"]));
    assert_eq!(code, 1, "{doctor}{err}");
    assert!(doctor.contains("FAIL revocation: "), "{doctor}");
    assert!(!doctor.contains("clock skew"), "{doctor}");
    assert_eq!(
        doctor.matches("bcd join --reset --yes").count(),
        1,
        "{doctor}"
    );
    eprintln!("doctor on the revoked node (from the gateway):\n{doctor}");
    drop(nginx);
}

/// `s` as a TOML basic string.
fn toml_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[test]
fn nginx_serves_bcds_pem_files_and_reloads_on_renewal() {
    let db = TestDb::sqlite().expect("sqlite test db");
    scenario(db.url());
}
