//! Machines an operator can recognise (issue 45 item 1): what a node says about itself at its
//! join, through the real binaries.
//!
//! - A real `bcd join` (SQLite) sends this machine's hostname and boot id, the serials of a fake
//!   sysfs and its own version; `bcctl node show --json` shows exactly those, `node list
//!   --hostname` finds it.
//! - 200 nodes joined through the JoinService (the commands-level join, on the wire's
//!   JoinRequest, not 200 bcd processes), on Postgres and SQLite: `bcctl node list` shows each
//!   one's hostname, serial and bcd version, and `--hostname`, `--serial` and `--bcd-version`
//!   each select exactly the nodes that claimed it.
//!
//! Run: `cargo build -p bcd -p cli` then `cargo test -p cli --test suite node_claims_e2e::`.

use crate::support;
use crate::x509pop_e2e::{bcd, node_in, run, start_server};

use std::fs;
use std::path::Path;
use std::sync::Arc;

use commands::identity::{IdentityConfig, JoinService};
use commands::SystemClock;
use domain::pki::{build_csr, open_bundle, seal_token, KeyRole, PrivateKey, TokenSecret};
use events::store::testkit::TestDb;
use support::{bcctl_at, ok_json};

fn proc_text(path: &str) -> String {
    fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .trim()
        .to_owned()
}

#[test]
fn a_real_bcd_join_shows_its_hostname_boot_id_and_version() {
    let db = TestDb::sqlite().expect("sqlite test db");
    let tmp = tempfile::tempdir().expect("tempdir");
    let server = start_server(tmp.path(), db.url(), "1h");
    let sys = tmp.path().join("sys");
    let dmi = sys.join("class/dmi/id");
    fs::create_dir_all(&dmi).expect("mkdir");
    fs::write(dmi.join("product_serial"), "E2E-PS-1\n").expect("write");
    fs::write(dmi.join("board_serial"), "E2E-BS-1\n").expect("write");
    fs::write(dmi.join("chassis_serial"), "To Be Filled By O.E.M.\n").expect("write");

    let data = tmp.path().join("node");
    let mut join = bcd(&server, &data, &["join"]);
    join.env("BCD_JOIN_TOKEN", server.token(&[]))
        .env("BCD_SYSFS_ROOT", &sys)
        .env_remove("BCD_PROCFS_ROOT");
    let (code, stdout, stderr) = run(join);
    assert_eq!(code, 0, "{stdout}{stderr}\n{}", server.proc.log_text());
    let node = node_in(&stdout, "joined");

    let hostname = proc_text("/proc/sys/kernel/hostname");
    let boot_id = proc_text("/proc/sys/kernel/random/boot_id");
    let shown = server.bcctl_json(&["node", "show", &node, "--json"]);
    let claims = &shown["claims"];
    assert_eq!(claims["hostname"], hostname.as_str(), "{shown}");
    assert_eq!(claims["bootId"], boot_id.as_str(), "{shown}");
    assert_eq!(claims["bcdVersion"], env!("CARGO_PKG_VERSION"), "{shown}");
    assert_eq!(claims["productSerial"], "E2E-PS-1", "{shown}");
    assert_eq!(claims["boardSerial"], "E2E-BS-1", "{shown}");
    // A firmware placeholder is no serial.
    assert_eq!(claims["chassisSerial"], serde_json::Value::Null, "{shown}");
    assert_eq!(shown["node"]["claims"], *claims);

    let text = String::from_utf8_lossy(&server.bcctl(&["node", "show", &node]).stdout).into_owned();
    assert!(
        text.contains(&format!("boot id         {boot_id}")),
        "{text}"
    );
    let found = server.bcctl_json(&["node", "list", "--hostname", &hostname, "--json"]);
    let ids: Vec<&str> = found
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|n| n["nodeId"].as_str())
        .collect();
    assert_eq!(ids, vec![node.as_str()]);
}

/// The claims node `i` of the 200 makes: hostnames `web-0`..`web-3` (50 each), a product serial
/// of its own, board serials `rack-0`..`rack-7` (25 each), bcd 0.2.0 on the first 30.
fn claims_of(i: usize) -> (proto::HardwareClaims, String) {
    let claims = proto::HardwareClaims {
        hostname: format!("web-{}", i % 4),
        product_serial: format!("PS-{i:03}"),
        board_serial: format!("rack-{}", i % 8),
        boot_id: format!("boot-{i}"),
        ..Default::default()
    };
    let version = if i < 30 { "0.2.0" } else { "0.1.0" };
    (claims, version.to_owned())
}

async fn join_200(dir: &Path, url: &str, store: events::store::EventStore) {
    let created = ok_json(
        dir,
        url,
        &[
            "token", "create", "--tenant", "t1", "--site", "s1", "--uses", "200", "--json",
        ],
    );
    let secret = TokenSecret::parse(created["secret"].as_str().expect("secret")).expect("secret");
    let bytes = fs::read(dir.join(".bcctl/pki.json")).expect("bundle");
    let keys = open_bundle(&bytes, None)
        .expect("bundle")
        .keys
        .expect("plaintext keys");
    let td = keys.trust_domain.clone();
    let recipient = keys.join_encryption.public_key().clone();
    let svc = JoinService::new(
        store,
        Arc::new(keys),
        Arc::new(SystemClock),
        IdentityConfig::new(td),
    )
    .expect("svc");
    for i in 0..200 {
        let key = PrivateKey::generate(KeyRole::Node).expect("key");
        let csr = build_csr(&key).expect("csr");
        let sealed =
            seal_token(&recipient, &secret, &domain::identity::sha256(&csr)).expect("seal");
        let (claims, agent_version) = claims_of(i);
        let request = proto::JoinRequest {
            csr,
            sealed_token: sealed.as_bytes().to_vec(),
            role: "node".into(),
            claims: Some(claims),
            agent_version,
            ..Default::default()
        };
        gateway::wire::join(svc.joins(), &request)
            .await
            .unwrap_or_else(|e| panic!("join {i}: {e:?}"));
    }
}

fn listed(dir: &Path, url: &str, filter: &[&str]) -> Vec<serde_json::Value> {
    let mut args = vec!["node", "list", "--json"];
    args.extend_from_slice(filter);
    ok_json(dir, url, &args).as_array().expect("a list").clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_list_on_200_nodes_shows_and_filters_their_claims() {
    for db in TestDb::each().await.expect("databases") {
        let store = db.store().await.expect("store");
        let dir = tempfile::tempdir().expect("tempdir");
        let (d, url) = (dir.path(), db.url().to_owned());
        let init = bcctl_at(
            d,
            &url,
            &[
                "pki",
                "init",
                "--trust-domain",
                "claims.example.com",
                "--plaintext",
            ],
        );
        assert!(init.status.success(), "{init:?}");
        join_200(d, &url, store).await;

        let all = listed(d, &url, &[]);
        assert_eq!(all.len(), 200);
        let mut serials: Vec<&str> = all
            .iter()
            .map(|n| {
                let c = &n["claims"];
                assert!(
                    c["hostname"]
                        .as_str()
                        .is_some_and(|h| h.starts_with("web-")),
                    "{n}"
                );
                assert!(c["bcdVersion"].as_str().is_some(), "{n}");
                c["productSerial"].as_str().expect("a product serial")
            })
            .collect();
        serials.sort();
        serials.dedup();
        assert_eq!(serials.len(), 200, "every node's own product serial");

        let count = |filter: &[&str]| listed(d, &url, filter).len();
        assert_eq!(count(&["--hostname", "web-1"]), 50);
        assert_eq!(count(&["--hostname", "web-9"]), 0);
        assert_eq!(count(&["--serial", "PS-007"]), 1);
        assert_eq!(count(&["--serial", "rack-3"]), 25);
        assert_eq!(count(&["--bcd-version", "0.2.0"]), 30);
        assert_eq!(count(&["--bcd-version", "0.1.0"]), 170);
        // All given must hold: web-1 among the first 30 is 1, 5, ..., 29.
        assert_eq!(count(&["--hostname", "web-1", "--bcd-version", "0.2.0"]), 8);
        let one = listed(d, &url, &["--serial", "PS-007"]);
        assert_eq!(one[0]["claims"]["hostname"], "web-3");
        assert_eq!(one[0]["claims"]["boardSerial"], "rack-7");
        assert_eq!(one[0]["claims"]["bcdVersion"], "0.2.0");

        let table = bcctl_at(d, &url, &["node", "list", "--serial", "PS-007"]);
        let text = String::from_utf8_lossy(&table.stdout).into_owned();
        let header = text.lines().next().unwrap_or_default();
        for column in ["HOSTNAME", "SERIAL", "BCD"] {
            assert!(header.contains(column), "{text}");
        }
        let row = text.lines().nth(1).unwrap_or_default();
        for cell in ["web-3", "PS-007", "0.2.0"] {
            assert!(row.contains(cell), "{text}");
        }
    }
}
