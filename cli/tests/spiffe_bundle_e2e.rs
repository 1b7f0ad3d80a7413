//! End to end with the real binaries, on SQLite and on Postgres: the SPIFFE bundle endpoint
//! (issue 41 item 5; `docs/GATEWAY.md`, decision 0091).
//!
//! `bcctl up` serves with `[spiffe_bundle] listen = "127.0.0.1:0"`; an outside SPIFFE relying
//! party (`spiffe_bundle_e2e/read_bundle.py`: Python's `spiffe` package with PyJWT and
//! `cryptography`, installed by this test into a venv from the pinned
//! `spiffe_bundle_e2e/requirements.txt`) fetches `https://127.0.0.1:PORT/bundle.json` with the
//! `https_web` profile, trusting only the root CA; the body is byte for byte what `bcctl bundle
//! show --format spiffe` prints, its one authority byte for byte the root CA of `bcctl bundle
//! show --format json`, the JWK's key the certificate's own, no `kid`, the sequence the published
//! trust bundle's version. `bcctl pki rotate-command-root --stage add` publishes a new version;
//! the endpoint serves it without a restart, within 10 s (the time it took is printed).
//! Another path is 404. Set `BC_SKIP_PYTHON=1` to skip on a machine without python3 or PyPI.
//!
//! Run: `cargo test -p cli --test suite spiffe_bundle_e2e::` (Postgres at `DATABASE_URL`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use events::store::testkit::TestDb;

use crate::x509pop_e2e::{start_server_configured, Server};

fn run(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().expect("command starts");
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The venv of `spiffe_bundle_e2e/requirements.txt` ([`crate::support::python_venv`]).
fn venv() -> PathBuf {
    crate::support::python_venv::venv(
        "spiffe-python-venv",
        "tests/spiffe_bundle_e2e/requirements.txt",
        "spiffe, jwt, cryptography",
    )
}

/// What `read_bundle.py` read at `url`, trusting `cafile`.
fn read(python: &Path, url: &str, cafile: &Path, trust_domain: &str) -> serde_json::Value {
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/spiffe_bundle_e2e/read_bundle.py");
    let out = run(Command::new(python)
        .arg(script)
        .arg(url)
        .arg(cafile)
        .arg(trust_domain)
        .stdin(Stdio::null()));
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// `bcctl bundle show --format spiffe` (default refresh hint): its standard output.
fn show_spiffe(server: &Server, hint: &str) -> String {
    let out = server.bcctl(&[
        "bundle",
        "show",
        "--format",
        "spiffe",
        "--refresh-hint",
        hint,
    ]);
    String::from_utf8(out.stdout).expect("UTF-8")
}

fn scenario(db_url: &str) {
    if std::env::var_os("BC_SKIP_PYTHON").is_some() {
        eprintln!("BC_SKIP_PYTHON set: skipped");
        return;
    }
    let python = venv();
    let tmp = tempfile::tempdir().expect("tempdir");
    let config = tmp.path().join("serve.toml");
    std::fs::write(
        &config,
        "[spiffe_bundle]\nlisten = \"127.0.0.1:0\"\nrefresh_hint = \"90s\"\n",
    )
    .expect("serve.toml");
    let mut server = start_server_configured(tmp.path(), db_url, "1h", 1, Some(&config));
    let addr = server
        .proc
        .wait_line("spiffe_bundle=Some(", Duration::from_secs(30));
    let addr = addr.split(')').next().expect("the address").to_owned();
    let url = format!("https://{addr}/bundle.json");

    let shown = server.bcctl_json(&["bundle", "show", "--format", "json"]);
    let td = shown["trustDomain"]
        .as_str()
        .expect("trustDomain")
        .to_owned();
    let root = shown["certificates"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["role"] == "rootCa"))
        .unwrap_or_else(|| panic!("rootCa in {shown}"));
    let root_pem = root["pem"].as_str().expect("pem");
    let root_der = pem_der(root_pem);
    let cafile = tmp.path().join("root.pem");
    std::fs::write(&cafile, root_pem).expect("root.pem");

    let version = |s: &Server| {
        s.bcctl_json(&["pki", "trust-version", "--json"])["version"]
            .as_u64()
            .expect("version")
    };
    let v1 = version(&server);
    let got = read(&python, &url, &cafile, &td);
    assert_eq!(got["status"], 200, "{got}");
    assert_eq!(
        got["contentType"], "application/json; charset=utf-8",
        "{got}"
    );
    assert_eq!(got["body"], show_spiffe(&server, "90").as_str(), "{got}");
    assert_eq!(got["trustDomain"], td.as_str(), "{got}");
    assert_eq!(
        got["authorities"],
        serde_json::json!([hex::encode(&root_der)]),
        "{got}"
    );
    assert_eq!(got["jwkKeysMatchCertificates"], true, "{got}");
    assert_eq!(got["jwkKids"], serde_json::json!([null]), "{got}");
    assert_eq!(got["sequence"], v1, "{got}");
    assert_eq!(got["refreshHint"], 90, "{got}");

    // A new trust bundle version: served without a restart.
    server.bcctl(&["pki", "rotate-command-root", "--stage", "add"]);
    let v2 = version(&server);
    assert_eq!(v2, v1 + 1);
    let started = Instant::now();
    let after = loop {
        let got = read(&python, &url, &cafile, &td);
        if got["sequence"] == v2 || started.elapsed() > Duration::from_secs(10) {
            break got;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(after["sequence"], v2, "{after}");
    assert_eq!(
        after["body"],
        show_spiffe(&server, "90").as_str(),
        "{after}"
    );
    assert_eq!(after["authorities"], got["authorities"], "{after}");
    eprintln!(
        "spiffe_sequence {v1} -> {v2} served {} ms after `pki trust-version` showed it (python's start included)",
        started.elapsed().as_millis()
    );

    let other = read(&python, &format!("https://{addr}/"), &cafile, &td);
    assert_eq!(other["status"], 404, "{other}");
    assert_eq!(
        other["body"], "not found: the SPIFFE bundle is at /bundle.json\n",
        "{other}"
    );
}

/// The DER of a one-certificate PEM.
fn pem_der(pem: &str) -> Vec<u8> {
    use base64::Engine as _;
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    base64::engine::general_purpose::STANDARD
        .decode(body)
        .expect("PEM base64")
}

#[test]
fn spiffe_bundle_e2e_sqlite() {
    let db = TestDb::sqlite().expect("sqlite test db");
    scenario(db.url());
}

#[tokio::test(flavor = "multi_thread")]
async fn spiffe_bundle_e2e_postgres() {
    let db = TestDb::postgres().await.expect("postgres test db");
    let url = db.url().to_owned();
    tokio::task::spawn_blocking(move || scenario(&url))
        .await
        .expect("scenario");
    drop(db);
}
