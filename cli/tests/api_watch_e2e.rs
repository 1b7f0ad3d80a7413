//! Every role watchable (issue 44, item 6), with the real binaries on Postgres: `bcctl serve
//! --role api` and `--role gateway` started as a split deployment, the api's `/metrics` scraped
//! before and after a `bcd join` through the gateway (its Join counted by outcome and attestor,
//! the CA ends exact, the audit state read), `bcctl healthcheck` SERVING against each role (the
//! api by `--address` and by `--role api` from a configuration), and against the api once it is
//! stopped: exit 1, "refused". Every metric `docs/prometheus/alerts.yml` names is on one of the
//! two pages; with `promtool` at hand (`PROMTOOL`, else on `PATH`) the rules file is checked
//! and both pages pass `promtool check metrics`.
//!
//! Run: `cargo test -p cli --test suite api_watch_e2e::` (Postgres at `DATABASE_URL`).

use crate::support;

use support::{bcctl_bin, bcd_bin, jwk, Proc};

use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use domain::pki::open_bundle;
use events::store::testkit::TestDb;

const SECRET: &str = "api-watch-deployment-secret-0123456789abcdef";

/// A bcctl command without the settings these tests give.
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
        "BC_METRICS_LISTEN",
        "BC_API_INTERNAL_LISTEN",
        "BC_API_HEALTH_LISTEN",
        "BC_API_INTERNAL_URL",
        "BC_INTERNAL_CERT",
        "BC_INTERNAL_KEY",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

fn run(mut cmd: Command) -> Output {
    cmd.stdin(Stdio::null()).output().expect("run")
}

fn ok(cmd: Command) -> String {
    let out = run(cmd);
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `GET /metrics` on `addr`: the body of a 200.
fn scrape(addr: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).expect("connect to the metrics listener");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("write");
    let mut page = String::new();
    s.read_to_string(&mut page).expect("read");
    let (head, body) = page.split_once("\r\n\r\n").expect("an HTTP answer");
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    body.to_owned()
}

/// The one sample line of `series` (name and labels exactly), its value.
fn sample(page: &str, series: &str) -> Option<String> {
    page.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(str::to_owned)
}

fn not_after(der: &[u8]) -> i64 {
    let (_, cert) = x509_parser::parse_x509_certificate(der).expect("certificate");
    cert.validity().not_after.timestamp()
}

fn promtool() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("PROMTOOL") {
        return Some(PathBuf::from(p));
    }
    Command::new("promtool")
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|_| PathBuf::from("promtool"))
}

/// `bcctl healthcheck --pki BUNDLE ARGS --json`.
fn healthcheck(pki: &Path, args: &[&str]) -> Output {
    let mut cmd = bcctl(&["healthcheck", "--json", "--pki"]);
    cmd.arg(pki).args(args);
    run(cmd)
}

fn assert_serving(out: &Output, server: &str) {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        (v["server"].as_str(), v["status"].as_str()),
        (Some(server), Some("SERVING"))
    );
}

/// The rules file: every metric it names is on a page, and promtool accepts it when at hand.
fn check_rules(pages: &[&str]) {
    let rules = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/prometheus/alerts.yml");
    let text = fs::read_to_string(&rules).expect("docs/prometheus/alerts.yml");
    let mut named = 0;
    for word in text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
        if word.starts_with("bc_") && !word.ends_with('_') {
            named += 1;
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| word.strip_suffix(s))
                .unwrap_or(word);
            let typed = format!("# TYPE {family} ");
            assert!(
                pages.iter().any(|p| p.contains(&typed)),
                "alerts.yml names {word}, on no page"
            );
        }
    }
    assert!(named >= 5, "{named} metric names in {}", rules.display());
    let Some(promtool) = promtool() else {
        eprintln!("promtool not found (PROMTOOL, PATH): the rules and pages are not linted here");
        return;
    };
    let out = Command::new(&promtool)
        .arg("check")
        .arg("rules")
        .arg(&rules)
        .output()
        .expect("promtool");
    assert!(out.status.success(), "promtool check rules: {out:?}");
    for page in pages {
        let mut child = Command::new(&promtool)
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("promtool");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(page.as_bytes())
            .expect("write");
        let out = child.wait_with_output().expect("promtool");
        assert!(
            out.status.success(),
            "promtool check metrics: {out:?}\n{page}"
        );
    }
}

/// The address after `marker` on the process's log line.
fn address_after(p: &mut Proc, marker: &str) -> String {
    p.wait_line(marker, Duration::from_secs(30))
        .split(|c: char| c.is_whitespace() || c == ',' || c == ')')
        .next()
        .unwrap_or_default()
        .trim_start_matches("http://")
        .trim_end_matches("/metrics")
        .to_owned()
}

fn scenario(db_url: &str) {
    let started = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64();
    let tmp = tempfile::tempdir().expect("tempdir");
    let t = tmp.path();
    let pki = t.join("pki.json");
    let mut init = bcctl(&["pki", "init", "--trust-domain", "watch.test", "--out"]);
    init.arg(&pki).env("BC_DEPLOYMENT_SECRET", SECRET);
    ok(init);
    let public = open_bundle(&fs::read(&pki).expect("pki"), None)
        .expect("bundle")
        .public;
    let (cert, key) = (t.join("internal.crt"), t.join("internal.key"));
    let mut issue = bcctl(&["pki", "issue-internal", "--name", "gateway-1", "--pki"]);
    issue
        .arg(&pki)
        .args(["--serving-name", "localhost", "--serving-name", "127.0.0.1"])
        .arg("--cert-out")
        .arg(&cert)
        .arg("--key-out")
        .arg(&key)
        .env("BC_DEPLOYMENT_SECRET", SECRET);
    ok(issue);

    let mut cmd = bcctl(&["serve", "--role", "api"]);
    cmd.env("BC_DEPLOYMENT_SECRET", SECRET)
        .env("DATABASE_URL", db_url)
        .env("BC_PKI_BUNDLE", &pki)
        .env("BC_API_INTERNAL_LISTEN", "127.0.0.1:0")
        .env("BC_API_HEALTH_LISTEN", "127.0.0.1:0")
        // The internal certificate names localhost alone here: the health listener is still
        // checked by its IP address, which the certificate names too.
        .env("BC_API_INTERNAL_NAMES", "localhost")
        .env("BC_METRICS_LISTEN", "127.0.0.1:0");
    let mut api = Proc::spawn("bcctl serve --role api", cmd, t.join("api.log"));
    let internal = address_after(&mut api, "internal endpoint on ");
    let api_health = address_after(&mut api, ": health on ");
    let api_metrics = address_after(&mut api, "(grpc.health.v1.Health, TLS), metrics ");
    let internal_port = internal.rsplit(':').next().unwrap_or_default().to_owned();

    let mut cmd = bcctl(&["serve", "--role", "gateway"]);
    cmd.env("DATABASE_URL", db_url)
        .env("BC_PKI_BUNDLE", &pki)
        .env("BC_LISTEN", "127.0.0.1:0")
        .env("BC_METRICS_LISTEN", "127.0.0.1:0")
        .env("BC_CRL_LISTEN", "off")
        .env("BC_API_INTERNAL_URL", format!("localhost:{internal_port}"))
        .env("BC_INTERNAL_CERT", &cert)
        .env("BC_INTERNAL_KEY", &key);
    let mut gateway = Proc::spawn("bcctl serve --role gateway", cmd, t.join("gateway.log"));
    let gw = address_after(&mut gateway, "listening on ");
    let gw_metrics = address_after(&mut gateway, "(metrics ");

    // The api's page before any join: the process, the CA ends (exact), the audit state.
    let before = scrape(&api_metrics);
    assert_eq!(
        sample(&before, "bc_build_info{role=\"api\",version=\"0.1.0\"}").as_deref(),
        Some("1"),
        "{before}"
    );
    let start: f64 = sample(&before, "process_start_time_seconds")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("process_start_time_seconds in {before}"));
    assert!(
        start >= started - 1.0 && start <= started + 30.0,
        "{start} {started}"
    );
    for (ca, der) in [
        ("root", &public.root_ca_der),
        ("node", &public.node_ca_der),
        ("serving", &public.serving_ca_der),
    ] {
        let series = format!("bc_ca_certificate_not_after_seconds{{ca=\"{ca}\"}}");
        assert_eq!(
            sample(&before, &series),
            Some(not_after(der).to_string()),
            "{before}"
        );
    }
    for family in [
        "bc_join_requests_total counter",
        "bc_renewals_total counter",
        "bc_attestor_verifications_total counter",
        "bc_audit_sequencer_behind_events gauge",
        "bc_audit_sequencer_lag_seconds gauge",
        "bc_audit_unsealed_leaves gauge",
        "bc_audit_unsealed_age_seconds gauge",
    ] {
        assert!(
            before.contains(&format!("# TYPE {family}\n")),
            "{family}: {before}"
        );
    }
    assert_eq!(
        sample(&before, "bc_join_requests_total{outcome=\"joined\"}"),
        None
    );

    // A machine joins through the gateway: the api counts it.
    let mut token = bcctl(&[
        "token", "create", "--tenant", "default", "--site", "site-1", "--json", "--pki",
    ]);
    token
        .arg(&pki)
        .arg("--database-url")
        .arg(db_url)
        .env("BC_DEPLOYMENT_SECRET", SECRET);
    let v: serde_json::Value = serde_json::from_str(ok(token).trim()).expect("token json");
    let secret = v["secret"].as_str().expect("secret").to_owned();
    let pins = public.pins().expect("pins");
    let conf = t.join("bcd");
    fs::create_dir_all(&conf).expect("mkdir");
    fs::write(
        conf.join("config.toml"),
        format!(
            "server = \"{gw}\"\ndata_dir = \"{}\"\nserving_ca_spki_pin = \"{}\"\n\
             join_encryption_key_pin = \"{}\"\njoin_signing_key_pin = \"{}\"\n",
            t.join("node").display(),
            pins.serving_ca,
            pins.join_encryption,
            pins.join_signing
        ),
    )
    .expect("config");
    fs::write(
        conf.join("join-encryption.jwk"),
        jwk(&public.join_encryption),
    )
    .expect("jwk");
    fs::write(conf.join("join-signing.jwk"), jwk(&public.join_signing)).expect("jwk");
    let mut join = Command::new(bcd_bin());
    join.arg("--config")
        .arg(conf.join("config.toml"))
        .arg("join")
        .env("BCD_JOIN_TOKEN", &secret)
        .env_remove("BCD_SERVER")
        .env_remove("BCD_DATA_DIR")
        .env_remove("BCD_CONFIG");
    let out = run(join);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n--- api:\n{}\n--- gateway:\n{}",
        String::from_utf8_lossy(&out.stderr),
        api.log_text(),
        gateway.log_text()
    );
    let after = scrape(&api_metrics);
    assert_eq!(
        sample(&after, "bc_join_requests_total{outcome=\"joined\"}").as_deref(),
        Some("1"),
        "{after}"
    );
    assert_eq!(
        sample(
            &after,
            "bc_attestor_verifications_total{attestor=\"join-token\",outcome=\"admitted\"}"
        )
        .as_deref(),
        Some("1"),
        "{after}"
    );
    let gw_page = scrape(&gw_metrics);
    assert_eq!(
        sample(
            &gw_page,
            "bc_build_info{role=\"gateway\",version=\"0.1.0\"}"
        )
        .as_deref(),
        Some("1"),
        "{gw_page}"
    );
    assert_eq!(
        sample(&gw_page, "bc_ca_certificate_not_after_seconds{ca=\"node\"}"),
        Some(not_after(&public.node_ca_der).to_string()),
    );
    check_rules(&[&after, &gw_page]);

    // healthcheck: each role SERVING; the api by its address and by --role api.
    assert_serving(&healthcheck(&pki, &["--address", &api_health]), &api_health);
    let config = t.join("api.toml");
    fs::write(&config, format!("api_health_listen = \"{api_health}\"\n")).expect("config");
    let mut args = vec!["--role", "api", "--config"];
    let config_s = config.display().to_string();
    args.push(&config_s);
    assert_serving(&healthcheck(&pki, &args), &api_health);
    assert_serving(&healthcheck(&pki, &["--address", &gw]), &gw);

    // The api stopped: exit 1, the reason.
    api.child.kill().expect("kill the api");
    api.wait_exit(Duration::from_secs(5));
    let out = healthcheck(&pki, &["--address", &api_health]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err: serde_json::Value = serde_json::from_slice(&out.stderr).expect("JSON error");
    let message = err["error"]["message"].as_str().expect("message");
    assert!(
        message.starts_with(&format!("healthcheck {api_health}: refused: ")),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_api_role_serves_metrics_and_health() {
    let db = TestDb::postgres().await.expect("postgres test db");
    let url = db.url().to_owned();
    tokio::task::spawn_blocking(move || scenario(&url))
        .await
        .expect("scenario");
    drop(db);
}
