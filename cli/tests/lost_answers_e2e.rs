//! Lost answers end to end (issue 40, items 1 and 2), with the real binaries on Postgres: `bcctl
//! up` serves, bcd reaches it through a TCP proxy in the test ([`proxy`]) that loses the server's
//! answer of a call the control plane committed.
//!
//! - A renewal whose answer is lost, bcd SIGKILLed while it waits for it and started again: the
//!   node renews as itself, with the certificate the lost call committed (the server answers
//!   that renewal again for the key `node.key.next` kept), its identity generation unchanged and
//!   no `security.renew.cloned` event; it holds a session after.
//! - A join with a single-use token whose answer is lost: bcd retries the same request and gets
//!   the identity the lost answer carried; one node row, one `node.joined`.
//! - An x509pop re-join whose answer is lost: bcd retries and gets the re-joined identity; the
//!   node re-joined once (generation 2, one `node.joined` for the re-join).
//!
//! Run: `cargo test -p cli --test suite lost_answers_e2e::` (Postgres at `DATABASE_URL`).

mod proxy;

use crate::support::{bcd_bin, wait_for, Proc};
use crate::x509pop_e2e::{node_in, start_server, status, Server};

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use events::store::testkit::TestDb;
use events::store::{EventStore, LogStore};
use projections::identity::read;
use proxy::{Lose, Probe, Proxy};

/// Leaves long enough for a renewal (at 60%: 12 s) and a restart before the old one expires.
const LEAF_LIFETIME: &str = "20s";

/// Reads of the store the proxy and the checks make.
#[derive(Clone)]
struct Store {
    rt: Arc<tokio::runtime::Runtime>,
    store: EventStore,
}

impl Store {
    fn open(url: &str) -> Store {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime");
        let store = rt.block_on(EventStore::open(url)).expect("open the store");
        Store {
            rt: Arc::new(rt),
            store,
        }
    }

    /// The serials of `node`'s certificates, in issue order.
    fn serials(&self, node: &str) -> Vec<String> {
        self.rt.block_on(async {
            let mut tx = self.store.begin().await.expect("begin");
            let certs = read::certs_of_node(&mut tx, node).await.expect("certs");
            certs.into_iter().map(|c| c.serial).collect()
        })
    }

    /// How many nodes there are.
    fn nodes(&self) -> usize {
        self.rt.block_on(async {
            let mut tx = self.store.begin().await.expect("begin");
            read::nodes_of_tenant(&mut tx, None)
                .await
                .expect("nodes")
                .len()
        })
    }

    /// Every event of `event_type`.
    fn events(&self, event_type: &str) -> Vec<events::RecordedEvent> {
        self.rt.block_on(async {
            let all = self.store.read_batch(0, 1_000_000).await.expect("the log");
            all.into_iter()
                .filter(|e| e.event_type == event_type)
                .collect()
        })
    }

    /// The `node.joined` events of `node`.
    fn joined(&self, node: &str) -> usize {
        self.events("node.joined")
            .iter()
            .filter(|e| e.stream_id == format!("node/{node}"))
            .count()
    }

    fn certs_probe(&self, node: &str) -> Probe {
        let (me, node) = (self.clone(), node.to_owned());
        Arc::new(move || me.serials(&node).len())
    }

    fn nodes_probe(&self) -> Probe {
        let me = self.clone();
        Arc::new(move || me.nodes())
    }
}

/// A copy of up's bcd configuration naming the proxy as the gateway.
fn config_through(server: &Server, proxy: &Proxy, dir: &Path) -> PathBuf {
    let up = PathBuf::from(server.s("bcdConfig"));
    let from = up.parent().expect("config dir");
    fs::create_dir_all(dir).expect("mkdir");
    for f in ["join-encryption.jwk", "join-signing.jwk"] {
        fs::copy(from.join(f), dir.join(f)).expect("copy jwk");
    }
    let text = fs::read_to_string(&up).expect("config");
    let rewritten: Vec<String> = text
        .lines()
        .map(|l| {
            if l.starts_with("server = ") {
                format!("server = \"{}\"", proxy.addr())
            } else {
                l.to_owned()
            }
        })
        .collect();
    assert!(rewritten.iter().any(|l| l.contains(proxy.addr())), "{text}");
    let config = dir.join("config.toml");
    fs::write(&config, rewritten.join("\n") + "\n").expect("write config");
    config
}

/// The gateway `host:port` bcd is configured with.
fn gateway_addr(server: &Server) -> String {
    let text = fs::read_to_string(server.s("bcdConfig")).expect("config");
    text.lines()
        .find_map(|l| l.strip_prefix("server = "))
        .map(|v| v.trim().trim_matches('"').to_owned())
        .unwrap_or_else(|| panic!("no server in {text}"))
}

fn bcd(config: &Path, data: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(bcd_bin());
    cmd.arg("--config")
        .arg(config)
        .arg("--data-dir")
        .arg(data)
        .args(args)
        .env_remove("BCD_JOIN_TOKEN")
        .env_remove("BCD_SERVER")
        .env_remove("BCD_DATA_DIR")
        .env_remove("BCD_CONFIG")
        .env_remove(bcd::fault::CRASH_AT_ENV)
        .stdin(Stdio::null());
    cmd
}

fn run(mut cmd: Command) -> (i32, String, String) {
    let out = cmd.output().expect("run bcd");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The join and the x509pop re-join whose answers are lost: bcd retries, the same node is
/// admitted once. Returns the node and its data directory.
fn lost_joins(server: &Server, store: &Store, proxy: &Proxy, config: &Path, tmp: &Path) {
    let data = tmp.join("node-j");
    let token = server.token(&["--uses", "1"]);
    let nodes_before = store.nodes();
    proxy.arm(Lose::Close, store.nodes_probe());
    let mut join = bcd(config, &data, &["join"]);
    join.env("BCD_JOIN_TOKEN", &token);
    let (code, stdout, stderr) = run(join);
    assert_eq!(
        code,
        0,
        "bcd join after a lost answer: {stdout}{stderr}\nserver:\n{}",
        server.proc.log_text()
    );
    assert_eq!(proxy.lost(), 1, "the join's answer was lost once: {stderr}");
    eprintln!("bcd join, its answer lost:\n{stderr}{stdout}");
    assert!(stderr.contains("attempt 1 failed"), "{stderr}");
    let node = node_in(&stdout, "joined");
    assert_eq!(store.nodes(), nodes_before + 1, "one node row");
    assert_eq!(store.joined(&node), 1, "one node.joined");
    assert_eq!(store.serials(&node).len(), 1, "one certificate");
    assert_eq!(
        status(server, &data)["serial"]
            .as_str()
            .map(str::to_lowercase),
        Some(store.serials(&node)[0].to_lowercase()),
        "the identity stored is the one the lost answer carried"
    );

    // The x509pop re-join of that node, its answer lost too.
    let serials_before = store.serials(&node);
    proxy.arm(Lose::Close, store.certs_probe(&node));
    let (code, stdout, stderr) = run(bcd(config, &data, &["join", "--attestor", "x509pop"]));
    assert_eq!(
        code,
        0,
        "bcd join --attestor x509pop after a lost answer: {stdout}{stderr}\nserver:\n{}",
        server.proc.log_text()
    );
    assert_eq!(
        proxy.lost(),
        2,
        "the re-join's answer was lost once: {stderr}"
    );
    eprintln!("bcd join --attestor x509pop, its answer lost:\n{stderr}{stdout}");
    assert!(stderr.contains("attempt 1 failed"), "{stderr}");
    assert_eq!(node_in(&stdout, "re-joined by x509pop"), node);
    let serials = store.serials(&node);
    assert_eq!(serials.len(), serials_before.len() + 1, "re-joined once");
    assert_eq!(store.joined(&node), 2, "the join and one re-join");
    assert_eq!(store.nodes(), nodes_before + 1, "still one node row");
    let shown = server.bcctl_json(&["node", "show", &node, "--json"]);
    assert_eq!(shown["node"]["identityGeneration"], 2, "{shown}");
    assert_eq!(
        status(server, &data)["serial"]
            .as_str()
            .map(str::to_lowercase),
        serials.last().map(|s| s.to_lowercase()),
    );
}

/// The renewal whose answer is lost, bcd killed and started again.
fn lost_renewal(server: &Server, store: &Store, proxy: &Proxy, config: &Path, tmp: &Path) {
    let data = tmp.join("node-r");
    proxy.disarm();
    let mut join = bcd(config, &data, &["join"]);
    join.env("BCD_JOIN_TOKEN", server.token(&["--uses", "1"]));
    let (code, stdout, stderr) = run(join);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let node = node_in(&stdout, "joined");
    let first = store.serials(&node);
    assert_eq!(first.len(), 1);

    let lost_before = proxy.lost();
    proxy.arm(Lose::Hold, store.certs_probe(&node));
    let log = tmp.join("bcd-node-r.log");
    let mut agent = Proc::spawn("bcd node (r)", bcd(config, &data, &["node"]), log);
    assert!(
        proxy.wait_lost(lost_before, Duration::from_secs(60)),
        "no renewal committed within 60 s:\n{}\nserver:\n{}",
        agent.log_text(),
        server.proc.log_text()
    );
    // Killed while it waits for the answer: as if the power went.
    agent.child.kill().expect("SIGKILL bcd node");
    let _ = agent.child.wait();
    proxy.disarm();
    let committed = store.serials(&node);
    assert_eq!(committed.len(), 2, "the lost renewal was committed");
    assert!(
        !agent.log_text().contains("renewed: certificate"),
        "the answer reached bcd:\n{}",
        agent.log_text()
    );
    assert!(
        data.join("node.key.next").exists(),
        "node.key.next is kept while the renewal may have been committed"
    );

    let log = tmp.join("bcd-node-r-again.log");
    let mut again = Proc::spawn(
        "bcd node (r, restarted)",
        bcd(config, &data, &["node"]),
        log,
    );
    let renewed = again.wait_line("renewed: certificate serial ", Duration::from_secs(30));
    let serial = renewed.split_whitespace().next().unwrap_or_default();
    assert!(
        serial.eq_ignore_ascii_case(&committed[1]),
        "renewed with the certificate the lost call committed ({}), got {renewed}",
        committed[1]
    );
    wait_for(
        "a session with the renewed certificate",
        Duration::from_secs(30),
        || again.log_text().matches("session open as").count() >= 1,
        || again.log_text(),
    );
    assert!(again.is_running(), "{}", again.log_text());
    eprintln!(
        "bcd node killed while its renewal's answer was lost:\n{}\nstarted again:\n{}",
        agent.log_text(),
        again.log_text()
    );
    assert_eq!(store.events("security.renew.cloned").len(), 0, "no clone");
    assert_eq!(store.events("security.renew.refused").len(), 0);
    let shown = server.bcctl_json(&["node", "show", &node, "--json"]);
    assert_eq!(shown["node"]["identityGeneration"], 1, "{shown}");
    assert_eq!(shown["node"]["status"], "active", "{shown}");
    assert_eq!(status(server, &data)["state"], "ok");
    assert!(!data.join("node.key.next").exists());
}

fn scenario(db_url: &str) {
    let started = Instant::now();
    let tmp = tempfile::tempdir().expect("tempdir");
    let server = start_server(tmp.path(), db_url, LEAF_LIFETIME);
    let store = Store::open(db_url);
    let proxy = Proxy::start(&gateway_addr(&server));
    let config = config_through(&server, &proxy, &tmp.path().join("bcd-config"));
    lost_joins(&server, &store, &proxy, &config, tmp.path());
    lost_renewal(&server, &store, &proxy, &config, tmp.path());
    eprintln!("lost answers e2e: {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread")]
async fn lost_answers_on_postgres() {
    let db = TestDb::postgres().await.expect("postgres test db");
    let url = db.url().to_owned();
    tokio::task::spawn_blocking(move || scenario(&url))
        .await
        .expect("scenario");
    drop(db);
}
