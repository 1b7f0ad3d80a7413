//! `bcctl doctor` and `bcctl healthcheck` through the real binary: each finding on a deployment
//! made to have it, and nothing above info on a fresh `bcctl up`.
//!
//! - healthy: `bcctl up --port 0` in a clean directory, doctor finds `./.bcctl` by itself;
//! - an expiring and an expired CA: bundles made through the domain API with short CA lifetimes
//!   (`pki init` has no lifetime flag), sealed under a secret;
//! - the wrong secret: `BC_DEPLOYMENT_SECRET` set to another deployment's (pki.unseal);
//! - a half-done rotation: `bcctl pki rotate-command-root --stage add` (pki.rotation, info);
//! - a lagging feed: an event another (newer) control plane wrote, `node.identity.revoked` at a
//!   schema version this build has no upcaster for, appended to the running deployment's log;
//!   the gateway's feed stops there (fails closed) and doctor reads it from the metrics;
//! - an unsigned quorum change: a first approver set published, then a `[quorum]` naming another
//!   set without the current approvers' signatures (pki.quorum-unsigned, the epoch to sign);
//! - healthcheck: SERVING against the running `up`, refused on a closed port.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use base64::Engine;
use commands::quorum::{settle_trust_bundle, BundleConfig};
use commands::SystemClock;
use domain::pki::{seal_bundle, DeploymentSecret, KeySet, KeySetLifetimes};
use domain::quorum::{ApproverKey, ApproverSet, ApproverSetOffer, TrustDomain};
use events::store::testkit::TestDb;
use events::store::{EventStore, ExpectedVersion};
use serde_json::Value;

use crate::support::{bcctl_bin, wait_for, Proc};

const SECRET: &str = "a-doctor-test-secret-of-more-than-32-characters";

/// `bcctl args` in `dir` with none of the deployment's variables set, so every verb finds the
/// deployment by the rule alone.
fn bcctl(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(bcctl_bin());
    cmd.current_dir(dir).args(args);
    for var in [
        "BC_DEPLOYMENT_SECRET",
        "BC_DEPLOYMENT_SECRET_FILE",
        "BC_PKI_BUNDLE",
        "BC_METRICS_LISTEN",
        "BC_LISTEN",
        "DATABASE_URL",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

fn run(mut cmd: Command) -> Output {
    cmd.output().expect("run bcctl")
}

/// doctor's `--json` report (stdout), with the exit code.
fn doctor(cmd: Command) -> (i32, Value) {
    let out = run(cmd);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "doctor --json: {e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().expect("exit code"), report)
}

/// The (id, level) pairs above ok.
fn notable(report: &Value) -> Vec<(String, String)> {
    report["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter(|f| f["level"] != "ok")
        .map(|f| {
            (
                f["id"].as_str().expect("id").to_owned(),
                f["level"].as_str().expect("level").to_owned(),
            )
        })
        .collect()
}

fn finding<'a>(report: &'a Value, id: &str, level: &str) -> &'a Value {
    report["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .find(|f| f["id"] == id && f["level"] == level)
        .unwrap_or_else(|| panic!("no {level} {id} in {report}"))
}

/// `bcctl up --port 0 --json` in `dir`; its JSON facts.
fn up(dir: &Path) -> (Proc, Value) {
    let mut proc = Proc::spawn(
        "bcctl up",
        bcctl(dir, &["up", "--port", "0", "--json"]),
        dir.join("up.log"),
    );
    proc.wait_line("\"joinCommand\"", Duration::from_secs(120));
    let text = proc.log_text();
    let line = text
        .lines()
        .find(|l| l.starts_with('{'))
        .expect("the JSON line");
    let facts: Value = serde_json::from_str(line).expect("up --json");
    (proc, facts)
}

fn metrics(facts: &Value) -> String {
    facts["metrics"].as_str().expect("metrics URL").to_owned()
}

#[test]
fn a_fresh_up_has_nothing_above_info_and_is_serving() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let (_up, facts) = up(d);
    let (code, report) = doctor(bcctl(
        d,
        &["doctor", "--json", "--metrics", &metrics(&facts)],
    ));
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["worst"], "info", "{report}");
    assert_eq!(report["exitCode"], 0);
    // SQLite has no clock of its own: the one info.
    assert_eq!(
        notable(&report),
        [("clock.skew".to_string(), "info".to_string())],
        "{report}"
    );
    let ids: std::collections::BTreeSet<&str> = report["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .map(|f| f["id"].as_str().expect("id"))
        .collect();
    for id in [
        "pki.unseal",
        "pki.ca-expiring",
        "pki.rotation",
        "pki.quorum-change",
        "store.unmigrated",
        "clock.skew",
        "audit.lag",
        "audit.seal-lag",
        "cert.expiry",
        "feed.lag",
    ] {
        assert!(ids.contains(id), "{id} not checked: {report}");
    }
    assert_eq!(
        finding(&report, "pki.unseal", "ok")["message"],
        format!(
            "{}/.bcctl/pki.json opens with this deployment's secret",
            d.canonicalize().expect("canonical").display()
        )
    );
    assert_eq!(
        report["findings"]
            .as_array()
            .expect("findings")
            .iter()
            .filter(|f| f["id"] == "pki.ca-expiring")
            .count(),
        5,
        "root, node, serving, operator CA and command-signing root: {report}"
    );
    // Without --metrics doctor reads the metrics address `up` recorded in the deployment's
    // bcctl.toml (a free port here), not the default 127.0.0.1:9464: the same findings, the feed
    // caught up (issue 44 item 5).
    let addr = metrics(&facts)
        .trim_start_matches("http://")
        .trim_end_matches("/metrics")
        .to_owned();
    let toml = std::fs::read_to_string(d.join(".bcctl/bcctl.toml")).expect("bcctl.toml");
    assert!(
        toml.contains(&format!("\nmetrics_listen = \"{addr}\"\n")),
        "{toml}"
    );
    // The page of the all role says what the process is and how the audit trail stands
    // (issue 44 item 6, decision 0104).
    let page = {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(&addr).expect("the metrics listener");
        s.write_all(b"GET /metrics HTTP/1.1\r\n\r\n")
            .expect("write");
        let mut page = String::new();
        s.read_to_string(&mut page).expect("read");
        page
    };
    for line in [
        "\nbc_build_info{role=\"all\",version=\"0.1.0\"} 1\n",
        "\nbc_ca_certificate_not_after_seconds{ca=\"operator\"} ",
        "\n# TYPE bc_audit_unsealed_age_seconds gauge\n",
    ] {
        assert!(page.contains(line), "{line:?} in {page}");
    }
    let (code, found) = doctor(bcctl(d, &["doctor", "--json"]));
    assert_eq!(code, 0, "{found}");
    assert_eq!(notable(&found), notable(&report), "{found}");
    let feed = finding(&found, "feed.lag", "ok")["message"]
        .as_str()
        .expect("message")
        .to_owned();
    assert!(
        feed.starts_with("the gateway's revocation feed is caught up ("),
        "{feed}"
    );
    // The text form says the same.
    let out = run(bcctl(d, &["doctor", "--metrics", &metrics(&facts)]));
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("doctor: 0 error(s), 0 warning(s), 1 info; worst: info"),
        "{text}"
    );

    // healthcheck: SERVING on the running server (the serving CA from ./.bcctl/pki.json).
    let address = facts["address"].as_str().expect("address");
    let out = run(bcctl(d, &["healthcheck", "--address", address, "--json"]));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let health: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(health["status"], "SERVING");
    assert_eq!(health["server"], address);
    // A closed port: refused, exit 1, the reason in the JSON error.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = closed.local_addr().expect("addr").port();
    drop(closed);
    let server = format!("127.0.0.1:{port}");
    let out = run(bcctl(d, &["healthcheck", "--address", &server, "--json"]));
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let err: Value = serde_json::from_slice(&out.stderr).expect("JSON error");
    let message = err["error"]["message"].as_str().expect("message");
    assert!(
        message.starts_with(&format!("healthcheck {server}: refused: ")),
        "{message}"
    );
    assert_eq!(err["error"]["exitCode"], 1);
    // Pinned to another deployment's serving CA: the server is not trusted, exit 1.
    let other = d.join("other-pki.json");
    let init = run(bcctl(
        d,
        &[
            "pki",
            "init",
            "--trust-domain",
            "other.example.com",
            "--pki",
            other.to_str().expect("utf-8"),
            "--plaintext",
        ],
    ));
    assert!(
        init.status.success(),
        "{}",
        String::from_utf8_lossy(&init.stderr)
    );
    let out = run(bcctl(
        d,
        &[
            "healthcheck",
            "--address",
            address,
            "--pki",
            other.to_str().expect("utf-8"),
            "--json",
        ],
    ));
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let err: Value = serde_json::from_slice(&out.stderr).expect("JSON error");
    let message = err["error"]["message"].as_str().expect("message");
    assert!(
        message.starts_with(&format!("healthcheck {address}: TLS")),
        "{message}"
    );
    // Not HOST:PORT: a usage error.
    let out = run(bcctl(d, &["healthcheck", "--address", "nowhere"]));
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_wrong_secret_a_half_done_rotation_and_a_stopped_feed() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let (mut up_proc, facts) = up(d);
    let metrics = metrics(&facts);

    // The wrong secret: pki.unseal error, exit 1.
    let mut cmd = bcctl(d, &["doctor", "--json", "--metrics", &metrics]);
    cmd.env("BC_DEPLOYMENT_SECRET", SECRET);
    let (code, report) = doctor(cmd);
    assert_eq!(code, 1, "{report}");
    assert_eq!(report["worst"], "error");
    assert_eq!(
        notable(&report),
        [
            ("pki.unseal".to_string(), "error".to_string()),
            ("clock.skew".to_string(), "info".to_string()),
        ],
        "{report}"
    );
    let unseal = finding(&report, "pki.unseal", "error");
    assert_eq!(
        unseal["message"],
        format!(
            "PKI bundle {}/.bcctl/pki.json: INVALID_CONFIG: the PKI bundle does not open with this BC_DEPLOYMENT_SECRET: it was sealed under another secret (or its kdf or kdfParams were changed)",
            d.canonicalize().expect("canonical").display()
        )
    );
    assert!(
        unseal["fix"]
            .as_str()
            .expect("fix")
            .starts_with("set BC_DEPLOYMENT_SECRET (or BC_DEPLOYMENT_SECRET_FILE) to the secret"),
        "{unseal}"
    );

    // A half-done rotation: info, exit 0, the next stage named.
    let db = d.join(".bcctl/events.db");
    let url = format!("sqlite://{}", db.display());
    let mut add = bcctl(
        d,
        &[
            "pki",
            "rotate-command-root",
            "--stage",
            "add",
            "--database-url",
            &url,
            "--pki",
            ".bcctl/pki.json",
            "--json",
        ],
    );
    add.env("BC_DEPLOYMENT_SECRET_FILE", ".bcctl/deployment-secret");
    let out = run(add);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (code, report) = doctor(bcctl(d, &["doctor", "--json", "--metrics", &metrics]));
    assert_eq!(code, 0, "{report}");
    let rotation = finding(&report, "pki.rotation", "info");
    assert_eq!(
        rotation["message"],
        "a command-signing root rotation is half done: a new root is published but workers do not sign under it yet; 0 of 0 connected node(s) have trust version 2"
    );
    assert_eq!(
        rotation["fix"],
        "bcctl pki rotate-command-root --stage switch (once every daemon has the trust version)"
    );

    // A stopped feed: another control plane's revocation this build cannot read.
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let store = EventStore::connect(&url).await.expect("store");
        let event = events::NewEvent::from_bytes(
            events::new_event_id(),
            "node.identity.revoked",
            99,
            "deployment",
            commands::Clock::now_us(&SystemClock),
            b"from a newer control plane".to_vec(),
        );
        store
            .append("node/ghost", ExpectedVersion::Any, &[event])
            .await
            .expect("append");
    });
    let mut last = Value::Null;
    wait_for(
        "feed.lag to report the stopped feed",
        Duration::from_secs(30),
        || {
            let (_, report) = doctor(bcctl(d, &["doctor", "--json", "--metrics", &metrics]));
            last = report;
            last["findings"].as_array().is_some_and(|f| {
                f.iter()
                    .any(|f| f["id"] == "feed.lag" && f["level"] == "error")
            })
        },
        || up_proc.log_text(),
    );
    let (code, report) = doctor(bcctl(d, &["doctor", "--json", "--metrics", &metrics]));
    assert_eq!(code, 1, "{report}");
    let feed = finding(&report, "feed.lag", "error");
    assert!(
        feed["message"].as_str().expect("message").starts_with(
            "the gateway's revocation feed has stopped at a revocation it cannot read"
        ),
        "{feed}"
    );
    assert_eq!(
        feed["fix"],
        "upgrade bcctl if its log names an event from a newer control plane, then restart bcctl serve"
    );
    // The gateway says so too: NOT_SERVING.
    let address = facts["address"].as_str().expect("address");
    let not_serving = format!("healthcheck {address}: NOT_SERVING");
    let mut last = String::new();
    wait_for(
        "healthcheck to say NOT_SERVING",
        Duration::from_secs(10),
        || {
            let out = run(bcctl(d, &["healthcheck", "--address", address, "--json"]));
            last = String::from_utf8_lossy(&out.stderr).into_owned();
            out.status.code() == Some(1)
                && serde_json::from_str::<Value>(&last)
                    .is_ok_and(|e| e["error"]["message"] == not_serving.as_str())
        },
        String::new,
    );
    assert!(up_proc.is_running(), "{last}");
}

/// A bundle whose node and serving CAs were made `age_days` ago for `lifetime_days`, sealed.
fn short_lived_bundle(path: &Path, age_days: i64, lifetime_days: i64) {
    let now = time::OffsetDateTime::now_utc() - time::Duration::days(age_days);
    let keys = KeySet::generate(
        domain::pki::TrustDomain::new("doctor.example.com").expect("td"),
        now,
        KeySetLifetimes {
            root: time::Duration::days(3652),
            intermediate: time::Duration::days(lifetime_days),
        },
    )
    .expect("keys");
    let bytes = seal_bundle(&keys, &DeploymentSecret::new(SECRET).expect("secret")).expect("seal");
    std::fs::write(path, bytes).expect("write bundle");
}

#[test]
fn an_expiring_and_an_expired_ca() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let db = TestDb::sqlite().expect("sqlite");
    rt.block_on(db.store()).expect("migrate");
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let doctor_on = |bundle: &str| {
        let mut cmd = bcctl(
            d,
            &[
                "doctor",
                "--json",
                "--database-url",
                db.url(),
                "--pki",
                bundle,
            ],
        );
        cmd.env("BC_DEPLOYMENT_SECRET", SECRET)
            .env("BC_METRICS_LISTEN", "off");
        doctor(cmd)
    };
    // Ten days left of twenty: expiring (30 days), a warning, exit 3.
    short_lived_bundle(&d.join("expiring.json"), 10, 20);
    let (code, report) = doctor_on("expiring.json");
    assert_eq!(code, 3, "{report}");
    assert_eq!(report["worst"], "warning");
    let expiring: Vec<&Value> = report["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter(|f| f["id"] == "pki.ca-expiring" && f["level"] == "warning")
        .collect();
    // The node, serving and operator CAs (all made with the short intermediate lifetime).
    assert_eq!(expiring.len(), 3, "{report}");
    assert!(
        expiring[0]["message"]
            .as_str()
            .expect("message")
            .starts_with("the node CA expires at "),
        "{report}"
    );
    assert_eq!(expiring[0]["fix"], "bcctl pki renew-ca --ca node");
    assert!(
        expiring[1]["message"]
            .as_str()
            .expect("message")
            .starts_with("the serving CA expires at "),
        "{report}"
    );
    assert_eq!(expiring[1]["fix"], "bcctl pki renew-ca --ca serving");
    assert_eq!(
        finding(&report, "pki.unseal", "ok")["message"],
        "expiring.json opens with this deployment's secret"
    );
    // Expired two days ago: an error, exit 1.
    short_lived_bundle(&d.join("expired.json"), 12, 10);
    let (code, report) = doctor_on("expired.json");
    assert_eq!(code, 1, "{report}");
    let expired: Vec<&str> = report["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter(|f| f["id"] == "pki.ca-expired" && f["level"] == "error")
        .map(|f| f["message"].as_str().expect("message"))
        .collect();
    assert_eq!(expired.len(), 3, "{report}");
    assert!(
        expired[0].starts_with("the node CA expired at "),
        "{report}"
    );
    assert!(
        expired[1].starts_with("the serving CA expired at "),
        "{report}"
    );
    assert!(
        expired[2].starts_with("the operator CA expired at "),
        "{report}"
    );
    // A file that is not a bundle: pki.unreadable.
    std::fs::write(d.join("garbage.json"), "not json").expect("write");
    let (code, report) = doctor_on("garbage.json");
    assert_eq!(code, 1, "{report}");
    finding(&report, "pki.unreadable", "error");
    // A store that does not exist: store.unreachable, and no file is created.
    let mut cmd = bcctl(
        d,
        &[
            "doctor",
            "--json",
            "--database-url",
            "sqlite:///nonexistent/dir/events.db",
            "--pki",
            "expiring.json",
        ],
    );
    cmd.env("BC_DEPLOYMENT_SECRET", SECRET);
    let (code, report) = doctor(cmd);
    assert_eq!(code, 1, "{report}");
    assert!(finding(&report, "store.unreachable", "error")["message"]
        .as_str()
        .expect("message")
        .starts_with("no store at /nonexistent/dir/events.db"));
}

fn keygen(dir: &Path, name: &str) -> ApproverKey {
    let out = run(bcctl(dir, &["batch", "keygen", "--out", name, "--json"]));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(dir.join(format!("{name}.pub"))).expect("pub");
    let body: String = text.lines().filter(|l| !l.starts_with("-----")).collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(body)
        .expect("base64");
    ApproverKey::from_spki(&der).expect("spki")
}

#[test]
fn an_unsigned_quorum_change_names_the_epoch_to_sign() {
    const TD: &str = "doctor.example.com";
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let db = TestDb::sqlite().expect("sqlite");
    let store = rt.block_on(db.store()).expect("migrate");
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let out = run(bcctl(
        d,
        &[
            "pki",
            "init",
            "--trust-domain",
            TD,
            "--plaintext",
            "--out",
            "pki.json",
            "--json",
        ],
    ));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let alice = keygen(d, "alice.pem");
    keygen(d, "bob.pem");
    // The first set (alice alone) is published, as `bcctl serve` does at start.
    let bytes = std::fs::read(d.join("pki.json")).expect("bundle");
    let root = domain::pki::open_bundle(&bytes, None)
        .expect("open")
        .keys
        .expect("plaintext")
        .command_signing_root
        .cert_der()
        .to_vec();
    rt.block_on(settle_trust_bundle(
        &store,
        &SystemClock,
        &BundleConfig {
            trust_domain: TrustDomain::new(TD).expect("td"),
            command_signing_roots: vec![root.clone()],
            active_root: root,
            approvers: ApproverSetOffer {
                set: ApproverSet::new(vec![alice], 1, vec![], 0).expect("set"),
                epoch: 1,
                signatures: vec![],
            },
            floor: 0,
            pin: None,
        },
    ))
    .expect("settle");
    let doctor_with = |table: &str| {
        std::fs::write(
            d.join("serve.toml"),
            format!("metrics_listen = \"off\"\npki_bundle = \"pki.json\"\ndatabase_url = \"{}\"\n[quorum]\n{table}", db.url()),
        )
        .expect("config");
        doctor(bcctl(d, &["doctor", "--json", "--config", "serve.toml"]))
    };
    // The published set itself: ok.
    let (code, report) = doctor_with("approver_keys = [\"alice.pem.pub\"]\nthreshold = 1\n");
    assert_eq!(code, 0, "{report}");
    assert_eq!(
        finding(&report, "pki.quorum-change", "ok")["message"],
        "the configured approver set is the published one (epoch 1)"
    );
    finding(&report, "pki.quorum-lag", "ok");
    // Bob added without alice's signature for epoch 2: a warning, exit 3, the epoch named.
    let (code, report) =
        doctor_with("approver_keys = [\"alice.pem.pub\", \"bob.pem.pub\"]\nthreshold = 1\n");
    assert_eq!(code, 3, "{report}");
    let unsigned = finding(&report, "pki.quorum-unsigned", "warning");
    assert!(
        unsigned["message"]
            .as_str()
            .expect("message")
            .starts_with("the configured approver set differs from the published one (epoch 1) and its current approvers have not signed it for a higher epoch: "),
        "{unsigned}"
    );
    assert_eq!(
        unsigned["fix"],
        "bcctl batch sign-approvers --epoch 2 (by the current approvers), then set quorum.epoch = 2 and quorum.set_signatures"
    );
    assert_eq!(
        notable(&report),
        [
            ("pki.unseal".to_string(), "info".to_string()),
            ("pki.quorum-unsigned".to_string(), "warning".to_string()),
            ("clock.skew".to_string(), "info".to_string()),
            ("feed.lag".to_string(), "info".to_string()),
        ],
        "{report}"
    );
}

/// On Postgres: the clock is compared with the database's, and `cert.expiry` names the node
/// whose newest certificate ends within the horizon (a warning, exit 3) and the one whose
/// certificates all expired (an info), not the one renewed in time nor the revoked one.
#[test]
fn postgres_clock_and_certificate_horizons() {
    use events::store::{LogStore, LogTx};
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let db = rt.block_on(TestDb::postgres()).expect("postgres");
    let store = rt.block_on(db.store()).expect("migrate");
    let now = commands::Clock::now_us(&SystemClock);
    let hour = 3_600_000_000i64;
    rt.block_on(async {
        let mut tx = store.begin().await.expect("begin");
        let append = |node: &str, serial: &str, not_after_us: i64| {
            let joined = events::schema::NodeJoined {
                node_id: node.into(),
                tenant_id: "t1".into(),
                site_id: "s1".into(),
                pool_id: "p1".into(),
                role: "node".into(),
                attestor: "join-token".into(),
                node_key: "unattested".into(),
                token_id: "tok_seed".into(),
                identity_generation: 1,
                ..Default::default()
            };
            let issued = events::schema::NodeCertificateIssued {
                node_id: node.into(),
                serial: serial.into(),
                der: vec![0x30],
                not_before_us: not_after_us - 24 * hour,
                not_after_us,
                identity_generation: 1,
                cause: "join".into(),
                ..Default::default()
            };
            (
                node.to_string(),
                vec![
                    events::NewEvent::from_payload(events::new_event_id(), "t1", now, &joined),
                    events::NewEvent::from_payload(events::new_event_id(), "t1", now, &issued),
                ],
            )
        };
        let seeded = [
            append("node-late", "0a", now + 2 * hour),
            append("node-gone", "0b", now - hour),
            append("node-fine", "0c", now + 20 * hour),
        ];
        for (node, evs) in seeded {
            commands::append_and_project(
                &mut tx,
                &projections::identity::all(),
                &format!("node/{node}"),
                ExpectedVersion::NoStream,
                &evs,
            )
            .await
            .expect("seed");
        }
        tx.commit().await.expect("commit");
    });
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    short_lived_bundle(&d.join("pki.json"), 0, 730);
    let mut cmd = bcctl(
        d,
        &[
            "doctor",
            "--json",
            "--database-url",
            db.url(),
            "--pki",
            "pki.json",
        ],
    );
    cmd.env("BC_DEPLOYMENT_SECRET", SECRET)
        .env("BC_METRICS_LISTEN", "off");
    let (code, report) = doctor(cmd);
    assert_eq!(code, 3, "{report}");
    let skew = finding(&report, "clock.skew", "ok")["message"]
        .as_str()
        .expect("message");
    assert!(
        skew.starts_with("this host's clock is ") && skew.ends_with(" the database's"),
        "{skew}"
    );
    let late = finding(&report, "cert.expiry", "warning");
    let late_message = late["message"].as_str().expect("message");
    assert!(
        late_message.starts_with("1 active node(s) have no certificate valid beyond 6h 0m from now (a renewal is overdue): node-late ("),
        "{late}"
    );
    let gone = finding(&report, "cert.expiry", "info")["message"]
        .as_str()
        .expect("message");
    assert!(
        gone.starts_with("1 active node(s) hold only expired certificates (offline?): node-gone ("),
        "{gone}"
    );
    assert!(!late_message.contains("node-fine") && !gone.contains("node-fine"));
    // A wider horizon takes in the node renewed in time too.
    let mut cmd = bcctl(
        d,
        &[
            "doctor",
            "--json",
            "--database-url",
            db.url(),
            "--pki",
            "pki.json",
            "--cert-horizon",
            "1d",
        ],
    );
    cmd.env("BC_DEPLOYMENT_SECRET", SECRET)
        .env("BC_METRICS_LISTEN", "off");
    let (_, report) = doctor(cmd);
    assert!(finding(&report, "cert.expiry", "warning")["message"]
        .as_str()
        .expect("message")
        .starts_with("2 active node(s)"));
    // A bad horizon is a usage error.
    let out = run(bcctl(d, &["doctor", "--cert-horizon", "soon"]));
    assert_eq!(out.status.code(), Some(2));
}
