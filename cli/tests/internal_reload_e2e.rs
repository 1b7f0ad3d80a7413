//! Issue 40 item 17: a split gateway's internal client certificate is reloaded from its files,
//! without a restart. The real binaries on Postgres: `bcctl serve --role api` and `--role
//! gateway`; the gateway's agent-facing serving certificate lives 6 s, so it asks the api for a
//! new one every few seconds, and each answer is a `gateway.serving.issued` event in which the
//! api records the internal certificate that call's connection proved
//! (`internal_certificate_serial`). That is the api's own view of which certificate the gateway
//! presents.
//!
//! The certificate is re-issued over its files (`bcctl pki issue-internal --replace`): the
//! gateway logs the reload with the new serial, its metric names it, and the api's next events
//! carry it. A mismatched pair (another certificate over the cert file) and a half-written
//! certificate are refused with a log line, and the api keeps seeing the certificate in use.
//!
//! Run: `cargo test -p cli --test suite internal_reload_e2e::` (Postgres at `DATABASE_URL`).

use crate::support;

use support::{bcctl_bin, metrics, wait_for, Proc};

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use events::schema::GatewayServingIssued;
use events::store::testkit::TestDb;
use events::store::{EventStore, LogStore};

const SECRET: &str = "internal-reload-deployment-secret-0123456789";
const STREAM: &str = "gateway/gateway-1";

fn bcctl(args: &[&str]) -> Command {
    let mut cmd = Command::new(bcctl_bin());
    cmd.args(args);
    for var in [
        "BC_DEPLOYMENT_SECRET",
        "BC_DEPLOYMENT_SECRET_FILE",
        "DATABASE_URL",
        "BC_PKI_BUNDLE",
        "BC_ROLE",
        "BC_LISTEN",
        "BC_API_INTERNAL_LISTEN",
        "BC_API_INTERNAL_URL",
        "BC_INTERNAL_CERT",
        "BC_INTERNAL_KEY",
        "BC_INTERNAL_RELOAD_INTERVAL",
        "BC_SERVING_LIFETIME",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("BC_METRICS_LISTEN", "off");
    cmd
}

/// `bcctl pki issue-internal` for gateway `gateway-1` into `cert` and `key`: the new serial.
fn issue(pki: &Path, cert: &Path, key: &Path, replace: bool) -> String {
    let mut cmd = bcctl(&[
        "pki",
        "issue-internal",
        "--name",
        "gateway-1",
        "--serving-name",
        "localhost",
        "--serving-name",
        "127.0.0.1",
        "--json",
    ]);
    cmd.arg("--pki")
        .arg(pki)
        .arg("--cert-out")
        .arg(cert)
        .arg("--key-out")
        .arg(key)
        .env("BC_DEPLOYMENT_SECRET", SECRET);
    if replace {
        cmd.arg("--replace");
    }
    let out = cmd.stdin(Stdio::null()).output().expect("bcctl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    v["serial"].as_str().expect("serial").to_owned()
}

/// The internal certificate serial of each `gateway.serving.issued` event of `gateway-1`.
fn seen_by_api(db_url: &str) -> Vec<String> {
    tokio::runtime::Handle::current().block_on(async {
        let store = EventStore::open(db_url).await.expect("store");
        let events = store.read_stream(STREAM).await.expect("read");
        events
            .iter()
            .map(|e| {
                let p: GatewayServingIssued = e.decode().expect("decode");
                p.internal_certificate_serial
            })
            .collect()
    })
}

fn scenario(db_url: &str) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let t = tmp.path();
    let pki = t.join("pki.json");
    let mut init = bcctl(&["pki", "init", "--trust-domain", "reload.test", "--out"]);
    init.arg(&pki).env("BC_DEPLOYMENT_SECRET", SECRET);
    assert!(init.status().expect("pki init").success());
    let (cert, key) = (t.join("internal.crt"), t.join("internal.key"));
    let first = issue(&pki, &cert, &key, false);

    let mut cmd = bcctl(&["serve", "--role", "api"]);
    cmd.env("BC_DEPLOYMENT_SECRET", SECRET)
        .env("DATABASE_URL", db_url)
        .env("BC_PKI_BUNDLE", &pki)
        .env("BC_API_INTERNAL_LISTEN", "127.0.0.1:0")
        .env("BC_API_HEALTH_LISTEN", "127.0.0.1:0");
    let mut api = Proc::spawn("bcctl serve --role api", cmd, t.join("api.log"));
    let api_addr = api.wait_line("internal endpoint on ", Duration::from_secs(60));
    let api_port = api_addr
        .split_whitespace()
        .next()
        .and_then(|a| a.rsplit(':').next())
        .unwrap_or_default()
        .to_owned();

    let mut cmd = bcctl(&["serve", "--role", "gateway"]);
    cmd.env("DATABASE_URL", db_url)
        .env("BC_PKI_BUNDLE", &pki)
        .env("BC_LISTEN", "127.0.0.1:0")
        .env("BC_METRICS_LISTEN", "127.0.0.1:0")
        .env("BC_API_INTERNAL_URL", format!("localhost:{api_port}"))
        .env("BC_INTERNAL_CERT", &cert)
        .env("BC_INTERNAL_KEY", &key)
        .env("BC_INTERNAL_RELOAD_INTERVAL", "200ms")
        .env("BC_SERVING_LIFETIME", "6s");
    let mut gateway = Proc::spawn("bcctl serve --role gateway", cmd, t.join("gateway.log"));
    let line = gateway.wait_line("(metrics http://", Duration::from_secs(60));
    let metrics_addr = line.split('/').next().unwrap_or_default().to_owned();
    let logs = || {
        format!(
            "--- api:\n{}\n--- gateway:\n{}\n--- api saw: {:?}",
            api.log_text(),
            gateway.log_text(),
            seen_by_api(db_url)
        )
    };
    let gauge = |serial: &str| {
        format!("bc_internal_client_certificate_expiry_seconds{{serial=\"{serial}\"}} ")
    };

    // The api sees the first certificate, renewal after renewal.
    wait_for(
        "two serving certificates issued over the first internal certificate",
        Duration::from_secs(30),
        || seen_by_api(db_url).len() >= 2,
        logs,
    );
    assert!(
        seen_by_api(db_url).iter().all(|s| *s == first),
        "{}",
        logs()
    );

    // Re-issued over its files: the gateway presents the new one from its next connection on,
    // without a restart.
    let second = issue(&pki, &cert, &key, true);
    assert_ne!(second, first);
    wait_for(
        "the api to see the re-issued internal certificate",
        Duration::from_secs(30),
        || seen_by_api(db_url).last() == Some(&second),
        logs,
    );
    let text = gateway.log_text();
    assert!(
        text.lines().any(|l| l
            .contains("internal client certificate reloaded: new calls to the api present it")
            && l.contains(&second)),
        "{text}"
    );
    let page = metrics(&metrics_addr);
    assert!(page.contains(&gauge(&second)), "{page}");
    assert!(!page.contains(&gauge(&first)), "{page}");

    // Another certificate over the cert file, the key left: a mismatched pair, refused; so is
    // a half-written certificate. The api keeps seeing the certificate in use.
    let (other_cert, other_key) = (t.join("other.crt"), t.join("other.key"));
    let third = issue(&pki, &other_cert, &other_key, false);
    fs::copy(&other_cert, &cert).expect("copy");
    wait_for(
        "the mismatched pair refused",
        Duration::from_secs(15),
        || {
            gateway.log_text().lines().any(|l| {
                l.contains("Internal client certificate not reloaded")
                    && l.contains("is not the key the certificate")
                    && l.contains("the gateway keeps presenting the certificate in use")
            })
        },
        logs,
    );
    let pem = fs::read_to_string(&other_cert).expect("read");
    fs::write(&cert, &pem[..pem.len() / 3]).expect("write");
    wait_for(
        "the half-written certificate refused",
        Duration::from_secs(15),
        || {
            gateway.log_text().lines().any(|l| {
                l.contains("Internal client certificate not reloaded")
                    && l.contains("no complete PEM CERTIFICATE")
            })
        },
        logs,
    );
    let before = seen_by_api(db_url).len();
    wait_for(
        "two more serving certificates",
        Duration::from_secs(30),
        || seen_by_api(db_url).len() >= before + 2,
        logs,
    );
    let seen = seen_by_api(db_url);
    assert!(seen[before..].iter().all(|s| *s == second), "{}", logs());
    assert!(!seen.contains(&third), "{}", logs());
    let page = metrics(&metrics_addr);
    assert!(page.contains(&gauge(&second)), "{page}");
    assert!(
        page.contains("bc_internal_client_certificate_reloads_total{outcome=\"refused\"} "),
        "{page}"
    );
    let context = logs();
    let alive = gateway.is_running() && api.is_running();
    assert!(alive, "{context}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_split_gateway_reloads_its_internal_certificate() {
    let db = TestDb::postgres().await.expect("postgres test db");
    let url = db.url().to_owned();
    tokio::task::spawn_blocking(move || scenario(&url))
        .await
        .expect("scenario");
    drop(db);
}
