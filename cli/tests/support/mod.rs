//! What the end-to-end tests share: the `bcctl` and `bcd` binaries, spawned processes that are
//! killed when dropped, and bounded waits that name what they waited for.

#![allow(dead_code)]

pub mod own_postgres;
pub mod python_venv;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

// How many tests of the cli suite run at once when the caller did not say
// (`RUST_TEST_THREADS` or `--test-threads` win). The suite's tests mostly wait on the processes
// they start (servers, bcd, swtpm, renewals of short leaves): at libtest's default of one
// thread per core (2 here) the whole suite used about 15% of the two cores (192 s wall, 56 s
// CPU); at 4 it took 95 s, at 8 71 s, at 6 72 s (benchmarks/RESULTS.md's history, in git).
events::suite_test_threads!("6");

// The Argon2id cost of the bundles the suite's deployments seal (`bcctl up`, `pki init`):
// 1 MiB and one pass instead of the default 64 MiB and three, unless the caller set them. At the
// default, deriving the bundle's key in every `bcctl` process that opens one was 45% of the
// suite's CPU (`perf record` over the suite: Argon2's compression function and the kernel
// zeroing its 64 MiB), and the suite is bound by its CPU. The seal, the derivation and every
// refusal run the same code at any cost; `pki_kdf_cli` and `cli/src/verbs/pki/kdf.rs` check the
// default and the variables themselves.
#[cfg(target_os = "linux")]
#[used]
#[link_section = ".init_array"]
static SET_SUITE_BUNDLE_COST: extern "C" fn() = {
    extern "C" fn set_suite_bundle_cost() {
        for (name, value) in [
            ("BC_PKI_ARGON2_MEMORY_KIB", "1024"),
            ("BC_PKI_ARGON2_ITERATIONS", "1"),
        ] {
            if std::env::var_os(name).is_none() {
                // Before `main`, while the process has one thread: the write races nothing.
                std::env::set_var(name, value);
            }
        }
    }
    set_suite_bundle_cost
};

pub fn bcctl_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_bcctl"))
}

/// Runs `bcctl args` in `dir` against the store at `url`, without a deployment secret.
pub fn bcctl_at(dir: &Path, url: &str, args: &[&str]) -> Output {
    Command::new(bcctl_bin())
        .current_dir(dir)
        .env("DATABASE_URL", url)
        .env_remove("BC_DEPLOYMENT_SECRET")
        .args(args)
        .output()
        .expect("run bcctl")
}

/// [`bcctl_at`] that must succeed and print JSON.
pub fn ok_json(dir: &Path, url: &str, args: &[&str]) -> serde_json::Value {
    let out = bcctl_at(dir, url, args);
    assert!(
        out.status.success(),
        "bcctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON output")
}

/// Builds `bcd` beside `bcctl` (same target directory and profile) once per test binary: the
/// `bcd` binary is another package's. The build selects cli too (`-p bcd -p cli --bin bcd`):
/// features are unified over the selected packages, and `-p bcd` alone resolves bcd's
/// dependencies with fewer features than the `cargo test` that built this binary (no sqlx, no
/// events `store`), so it rebuilt ~100 of them (tonic, rustls, x509-parser, tss-esapi...)
/// while the tests waited. With cli selected the dependencies are the test run's, except the
/// few its dev-dependencies change (events, domain, sqlx; ~10 crates).
///
/// `BCD_TEST_BIN` names a `bcd` binary built from this tree to use instead (`.ci/run` sets it
/// to the one `cargo test --workspace --no-run` has just built for bcd's own tests, which saves
/// the nested build's ~10 crates while the suite runs). Only for a binary built from the same
/// sources: nothing here checks that it is.
pub fn bcd_bin() -> PathBuf {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    static LOCK: Mutex<()> = Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    BUILT
        .get_or_init(|| {
            if let Some(given) = std::env::var_os("BCD_TEST_BIN") {
                let given = PathBuf::from(given);
                return if given.is_file() {
                    Ok(given)
                } else {
                    Err(format!("BCD_TEST_BIN {} is not a file", given.display()))
                };
            }
            let bcctl = bcctl_bin();
            let profile_dir = bcctl.parent().ok_or("bcctl has no directory")?;
            let target_dir = profile_dir.parent().ok_or("no target directory")?;
            let mut cmd = Command::new(env!("CARGO"));
            // Without the variables cargo sets for this test process: build scripts that watch
            // them (ring's watches CARGO_PKG_NAME and CARGO_MANIFEST_DIR) would be rebuilt here,
            // and again by the next `cargo test`, with everything that depends on them.
            for (name, _) in std::env::vars() {
                let set_for_tests = name.starts_with("CARGO_PKG_")
                    || name.starts_with("CARGO_BIN_EXE_")
                    || name.starts_with("CARGO_MANIFEST_")
                    || [
                        "CARGO_CRATE_NAME",
                        "CARGO_BIN_NAME",
                        "CARGO_PRIMARY_PACKAGE",
                        "CARGO_TARGET_TMPDIR",
                    ]
                    .contains(&name.as_str());
                if set_for_tests {
                    cmd.env_remove(&name);
                }
            }
            cmd.args(["build", "--quiet", "-p", "bcd", "-p", "cli", "--bin", "bcd"])
                .env("CARGO_TARGET_DIR", target_dir)
                .current_dir(env!("CARGO_MANIFEST_DIR"));
            if profile_dir.file_name().is_some_and(|n| n == "release") {
                cmd.arg("--release");
            }
            let status = cmd.status().map_err(|e| format!("running cargo: {e}"))?;
            if !status.success() {
                return Err(format!("cargo build -p bcd failed: {status}"));
            }
            let bcd = profile_dir.join("bcd");
            if bcd.exists() {
                Ok(bcd)
            } else {
                Err(format!("{} missing after the build", bcd.display()))
            }
        })
        .clone()
        .unwrap_or_else(|e| panic!("the bcd binary: {e}"))
}

/// A spawned process, killed (and reaped) when dropped.
pub struct Proc {
    pub name: String,
    pub child: Child,
    pub log: PathBuf,
}

impl Proc {
    /// Spawns `cmd` with standard output and standard error into `log`.
    pub fn spawn(name: &str, mut cmd: Command, log: PathBuf) -> Proc {
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::from(fs::File::create(&log).expect("log")))
            .stderr(Stdio::from(
                fs::OpenOptions::new().append(true).open(&log).expect("log"),
            ))
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {name}: {e}"));
        Proc {
            name: name.into(),
            child,
            log,
        }
    }

    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return status,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(100))
                }
                Ok(None) => panic!(
                    "{} did not exit within {within:?}; its log:\n{}",
                    self.name,
                    self.log_text()
                ),
                Err(e) => panic!("{}: {e}", self.name),
            }
        }
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits for a log line containing `marker` and returns the rest of that line after it.
    pub fn wait_line(&mut self, marker: &str, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let text = self.log_text();
            if let Some(line) = text.lines().find(|l| l.contains(marker)) {
                let at = line.find(marker).unwrap_or(0) + marker.len();
                return line[at..].to_owned();
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("{} exited ({status}) before {marker:?}:\n{text}", self.name);
            }
            if Instant::now() >= deadline {
                panic!(
                    "{} printed no {marker:?} within {within:?}:\n{text}",
                    self.name
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Proc {
    /// The first line the process prints on its piped standard output, as JSON (`bcctl up
    /// --json` prints its facts so), waiting at most `within`; the rest of the output is
    /// drained so the process never blocks on a full pipe.
    pub fn first_json_line(&mut self, within: Duration) -> serde_json::Value {
        use std::io::{BufRead, BufReader};
        let stdout = self.child.stdout.take().expect("a piped stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(line)) = lines.next() {
                let _ = tx.send(line);
            }
            for _ in lines {}
        });
        let line = rx.recv_timeout(within).unwrap_or_else(|_| {
            panic!(
                "{} printed nothing; its log:\n{}",
                self.name,
                self.log_text()
            )
        });
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits (polling every 200 ms) until `done`, or panics after `within` with `context()`.
pub fn wait_for(
    what: &str,
    within: Duration,
    mut done: impl FnMut() -> bool,
    context: impl Fn() -> String,
) {
    let deadline = Instant::now() + within;
    while !done() {
        if Instant::now() >= deadline {
            panic!(
                "timed out after {within:?} waiting for {what}\n{}",
                context()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Seeds nodes `node-0` .. `node-{n-1}` of `tenant` into the store at `url` (their
/// `node.joined` events, projected), for tests whose batches name them: a batch's subjects must
/// be nodes of its own tenant.
pub async fn seed_nodes(url: &str, tenant: &str, n: usize) {
    use events::store::{EventStore, ExpectedVersion, LogStore, LogTx};
    let store = EventStore::open(url).await.expect("open the store");
    let mut tx = store.begin().await.expect("begin");
    for i in 0..n {
        let node_id = format!("node-{i}");
        let joined = events::schema::NodeJoined {
            node_id: node_id.clone(),
            tenant_id: tenant.into(),
            site_id: "s1".into(),
            pool_id: "p1".into(),
            role: "node".into(),
            attestor: "join-token".into(),
            node_key: "unattested".into(),
            token_id: "tok_seed".into(),
            identity_generation: 1,
            ..Default::default()
        };
        commands::append_and_project(
            &mut tx,
            &projections::identity::all(),
            &format!("node/{node_id}"),
            ExpectedVersion::NoStream,
            &[events::NewEvent::from_payload(
                events::new_event_id(),
                tenant,
                1_800_000_000_000_000,
                &joined,
            )],
        )
        .await
        .expect("seed a node");
    }
    tx.commit().await.expect("commit the seeded nodes");
}

/// The actor `bcctl` records in direct mode when run by this test process:
/// `local:<USER>@<host>` (cli/src/invocation.rs, `local_actor`).
pub fn local_actor() -> String {
    let user = std::env::var("USER")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "unknown".into());
    let host = fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| fs::read_to_string("/etc/hostname"))
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into());
    format!("local:{user}@{host}")
}

/// A P-256 public key as the JWK `bcd` reads (`join-encryption.jwk`, `join-signing.jwk`).
pub fn jwk(key: &domain::pki::PublicKey) -> String {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine;
    let p = key.uncompressed_point();
    serde_json::json!({
        "kty": "EC", "crv": "P-256",
        "x": URL_SAFE_NO_PAD.encode(&p[1..33]),
        "y": URL_SAFE_NO_PAD.encode(&p[33..65]),
    })
    .to_string()
}

/// Writes `bcd`'s configuration into `dir` (made if missing): the gateway `server`, the
/// deployment's three pins and its two JoinService keys beside them. Returns the path of
/// `config.toml`.
pub fn write_bcd_config(dir: &Path, server: &str, public: &domain::pki::PublicBundle) -> PathBuf {
    let pins = public.pins().expect("pins");
    fs::create_dir_all(dir).expect("mkdir");
    let config = dir.join("config.toml");
    fs::write(
        &config,
        format!(
            "server = \"{server}\"\nserving_ca_spki_pin = \"{}\"\n\
             join_encryption_key_pin = \"{}\"\njoin_signing_key_pin = \"{}\"\n",
            pins.serving_ca, pins.join_encryption, pins.join_signing
        ),
    )
    .expect("config");
    fs::write(
        dir.join("join-encryption.jwk"),
        jwk(&public.join_encryption),
    )
    .expect("jwk");
    fs::write(dir.join("join-signing.jwk"), jwk(&public.join_signing)).expect("jwk");
    config
}

/// `bcd --config CONFIG --data-dir DATA ARGS`, with none of bcd's settings from this
/// process's environment.
pub fn bcd_at(config: &Path, data: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(bcd_bin());
    c.arg("--config")
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
    c
}

/// `GET /metrics`, the page's body (empty when the endpoint does not answer).
pub fn metrics(addr: &str) -> String {
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = std::io::Write::write_all(
        &mut s,
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    let mut page = String::new();
    let _ = std::io::Read::read_to_string(&mut s, &mut page);
    page
}

/// The value of the sample `name` (no labels) on a metrics page: the text after `name ` on the
/// line that starts with it, `None` when there is none (`# HELP` lines never match).
pub fn metric<'p>(page: &'p str, name: &str) -> Option<&'p str> {
    page.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .map(str::trim)
}

/// `bc_revocation_feed_stale` of the metrics endpoint at `addr` (`None` when it does not
/// answer or has no such sample).
pub fn feed_stale(addr: &str) -> Option<String> {
    metric(&metrics(addr), "bc_revocation_feed_stale").map(str::to_owned)
}
