//! End to end with the real binaries and real software TPMs (swtpm), on SQLite and on Postgres:
//! the `tpm` attestor from a tokenless join to recovery (spec 000 "tpm", "Renewing a TPM-held
//! key", "Recovering a node whose TPM changed").
//!
//! `bcctl up --config` serves with `[attestors.tpm]` (the test EK CA's root as its EK root, an
//! enrollment placement) and short leaves. Then:
//!
//! 1. an allow-listed EK joins with `bcd join --attestor tpm` and no token (a token in the
//!    environment is dropped); its certificate carries `urn:bc:tpm-ak:` after the SPIFFE ID, the
//!    one `bcd tpm show` names; `bcd status --json` says `nodeKey: tpm`; `node.key` holds only the
//!    record; `bcd node` renews twice with the AK's certification, the statement carried on;
//! 2. `bcd join --reset --yes --attestor tpm` reclaims the same node id, generation + 1;
//! 3. a second TPM (another EK, allow-listed) on the same machine joins as a new node while the
//!    old node still exists: only the EK binds, the machine's claims bind nothing (a TPM
//!    claiming another machine's product UUID cannot lock it out); the old node is deleted;
//! 4. an unknown EK waits as a join request; `bcctl join-request approve` admits it.
//!
//! Run: `cargo test -p cli --test suite tpm_e2e::` (Postgres at `DATABASE_URL`).

use crate::support::{self, wait_for, Proc};
use crate::x509pop_e2e::{node_in, run, Server};

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use events::store::testkit::TestDb;
use swtpm_fixture::swtpm::{ek_ca, Swtpm};

/// Long enough for a join round trip, short enough for two renewals in a test (bcd renews at
/// 60%: every 7.2 s; 20 s leaves made the two renewals take 24 s).
const LEAF_LIFETIME: &str = "12s";

/// The serve configuration: the EK root, and where an unknown EK waits for approval.
pub(crate) fn serve_config(dir: &Path) -> PathBuf {
    let path = dir.join("serve.toml");
    let text = format!(
        "[attestors.tpm]\nek_roots = [{root:?}]\n\n[attestors.tpm.enrollment]\n\
         tenant = \"default\"\nsite = \"site-1\"\npool = \"default\"\n",
        root = ek_ca().root_pem_path().display().to_string()
    );
    fs::write(&path, text).expect("serve config");
    path
}

/// `bcctl up --config serve.toml` with short leaves.
fn start(tmp: &Path, db_url: &str) -> Server {
    let config = serve_config(tmp);
    crate::x509pop_e2e::start_server_configured(tmp, db_url, LEAF_LIFETIME, 1, Some(&config))
}

/// A bcd config for `tpm`: up's, with `[tpm]` naming the swtpm and the EK intermediate.
fn bcd_config(server: &Server, dir: &Path, tpm: &Swtpm) -> PathBuf {
    let up_config = PathBuf::from(server.s("bcdConfig"));
    let base = fs::read_to_string(&up_config).expect("up's bcd config");
    // Beside up's config: its key files are named relative to it.
    let machine = dir
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("machine");
    let path = up_config.with_file_name(format!("config-{machine}.toml"));
    let text = format!(
        "{base}\n[tpm]\ntcti = {tcti:?}\nek_intermediates = [{issuer:?}]\n",
        tcti = tpm.tcti(),
        issuer = ek_ca().issuer_pem_path().display().to_string()
    );
    fs::create_dir_all(dir).expect("mkdir");
    fs::write(&path, text).expect("bcd config");
    path
}

/// bcd with the TPM config for machine `dir`.
fn bcd_tpm(server: &Server, dir: &Path, tpm: &Swtpm, args: &[&str]) -> Command {
    let config = bcd_config(server, dir, tpm);
    let mut cmd = Command::new(support::bcd_bin());
    cmd.arg("--config")
        .arg(config)
        .arg("--data-dir")
        .arg(dir.join("data"))
        .args(args)
        .env_remove("BCD_JOIN_TOKEN")
        .env_remove("BCD_SERVER")
        .env_remove("BCD_DATA_DIR")
        .env_remove("BCD_CONFIG")
        .env_remove("BCD_TPM_TCTI")
        .env("BCD_SYSFS_ROOT", dir.parent().unwrap_or(dir).join("sysfs"));
    cmd
}

/// What `bcd tpm show --json` says of the TPM.
fn tpm_show(server: &Server, dir: &Path, tpm: &Swtpm) -> serde_json::Value {
    let (code, stdout, stderr) = run(bcd_tpm(server, dir, tpm, &["tpm", "show", "--json"]));
    assert_eq!(code, 0, "bcd tpm show: {stdout}{stderr}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("bcd tpm show --json: {e}: {stdout}"))
}

pub(crate) fn allow(server: &Server, ek_sha256: &str) -> String {
    let v = server.bcctl_json(&[
        "tpm",
        "allow",
        "--ek-sha256",
        ek_sha256,
        "--tenant",
        "default",
        "--site",
        "site-1",
        "--pool",
        "default",
        "--json",
    ]);
    v["allowId"]
        .as_str()
        .unwrap_or_else(|| panic!("no allowId in {v}"))
        .to_owned()
}

/// The URI SANs of the leaf in `data`'s identity, as openssl prints them.
pub(crate) fn leaf_uris(data: &Path) -> Vec<String> {
    let identity: serde_json::Value =
        serde_json::from_slice(&fs::read(data.join("identity.json")).expect("identity.json"))
            .expect("identity.json parses");
    let leaf_b64 = identity["chain"][0]
        .as_str()
        .unwrap_or_else(|| panic!("no chain in {identity}"));
    let der = base64_decode(leaf_b64);
    let der_path = data.join("leaf.der");
    fs::write(&der_path, der).expect("leaf.der");
    let out = Command::new("openssl")
        .args([
            "x509",
            "-inform",
            "der",
            "-noout",
            "-ext",
            "subjectAltName",
            "-in",
        ])
        .arg(&der_path)
        .output()
        .expect("openssl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.split([',', '\n'])
        .filter_map(|part| part.trim().strip_prefix("URI:").map(str::to_owned))
        .collect()
}

fn base64_decode(text: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .or_else(|_| base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(text))
        .unwrap_or_else(|e| panic!("not base64: {e}: {text}"))
}

/// The same machine's hardware for every TPM of `tmp`: one product UUID.
pub(crate) fn machine(tmp: &Path) {
    let dmi = tmp.join("sysfs/class/dmi/id");
    fs::create_dir_all(&dmi).expect("sysfs");
    fs::write(
        dmi.join("product_uuid"),
        "4c4c4544-0042-3510-8051-b7c04f4e3232\n",
    )
    .expect("product_uuid");
}

fn scenario(db_url: &str) {
    let started = Instant::now();
    let tmp = tempfile::tempdir().expect("tempdir");
    machine(tmp.path());
    let server = start(tmp.path(), db_url);

    // 1. An allow-listed EK joins with no token.
    let tpm_a = Swtpm::start();
    let a = tmp.path().join("machine-a");
    let shown = tpm_show(&server, &a, &tpm_a);
    let ek_a = shown["ekSha256"].as_str().expect("ekSha256").to_owned();
    let statement = shown["akStatement"]
        .as_str()
        .expect("akStatement")
        .to_owned();
    assert!(statement.starts_with("urn:bc:tpm-ak:000b:"), "{shown}");
    assert_eq!(ek_a.len(), 64, "{shown}");
    allow(&server, &ek_a);
    let mut join = bcd_tpm(&server, &a, &tpm_a, &["join", "--attestor", "tpm"]);
    join.env("BCD_JOIN_TOKEN", "bcjt_not-a-token");
    let (code, stdout, stderr) = run(join);
    assert_eq!(
        code,
        0,
        "{stdout}{stderr}\nserver:\n{}",
        server.proc.log_text()
    );
    let node = node_in(&stdout, "joined");
    let data_a = a.join("data");
    let uris = leaf_uris(&data_a);
    assert_eq!(uris.len(), 2, "{uris:?}");
    assert!(uris[0].starts_with("spiffe://"), "{uris:?}");
    assert_eq!(uris[1], statement, "{uris:?}");
    let st = status_tpm(&server, &a, &tpm_a);
    assert_eq!(st["nodeKey"], "tpm", "{st}");
    check_key_record(&data_a);
    let first_key = fs::read(data_a.join("node.key")).expect("node.key");
    let first_serial = st["serial"].as_str().expect("serial").to_owned();

    // bcd node renews with the AK's certification, twice; the statement is carried on.
    let log = tmp.path().join("bcd-node-a.log");
    let mut agent = Proc::spawn("bcd node (a)", bcd_tpm(&server, &a, &tpm_a, &["node"]), log);
    wait_for(
        "two renewals",
        Duration::from_secs(60),
        || agent.log_text().matches("renewed").count() >= 2,
        || format!("{}\nserver:\n{}", agent.log_text(), server.proc.log_text()),
    );
    let _ = agent.child.kill();
    let _ = agent.wait_exit(Duration::from_secs(10));
    // swtpm has no resource manager: what the killed process had loaded stays loaded (the
    // kernel's /dev/tpmrm0 flushes it when the process goes).
    flush_transient(&tpm_a);
    let st = status_tpm(&server, &a, &tpm_a);
    assert_ne!(st["serial"].as_str(), Some(first_serial.as_str()), "{st}");
    assert_eq!(st["nodeKey"], "tpm", "{st}");
    assert_eq!(leaf_uris(&data_a)[1], statement);
    check_key_record(&data_a);
    assert_ne!(
        fs::read(data_a.join("node.key")).expect("node.key"),
        first_key
    );

    // 2. Recovery: the identity moved aside, the same TPM reclaims the same node.
    let generation = |server: &Server, node: &str| {
        server.bcctl_json(&["node", "show", node, "--json"])["node"]["identityGeneration"]
            .as_i64()
            .unwrap_or(-1)
    };
    let g0 = generation(&server, &node);
    let (code, stdout, stderr) = run(bcd_tpm(
        &server,
        &a,
        &tpm_a,
        &["join", "--reset", "--yes", "--attestor", "tpm"],
    ));
    assert_eq!(
        code,
        0,
        "{stdout}{stderr}\nserver:\n{}",
        server.proc.log_text()
    );
    assert_eq!(node_in(&stdout, "joined"), node, "{stdout}");
    assert_eq!(generation(&server, &node), g0 + 1);

    // 3. Another TPM on the same machine: it proves its own EK and nothing else, so the claims
    //    it shares with the old node (the same sysfs: product UUID) bind nothing and it joins as
    //    a new node while the old one still exists; the operator then deletes the old node.
    let tpm_b = Swtpm::start();
    let b = tmp.path().join("machine-a-new-tpm");
    let ek_b = tpm_show(&server, &b, &tpm_b)["ekSha256"]
        .as_str()
        .expect("ekSha256")
        .to_owned();
    assert_ne!(ek_b, ek_a);
    allow(&server, &ek_b);
    let (code, stdout, stderr) = run(bcd_tpm(&server, &b, &tpm_b, &["join", "--attestor", "tpm"]));
    assert_eq!(
        code,
        0,
        "{stdout}{stderr}\nserver:\n{}",
        server.proc.log_text()
    );
    let node_b = node_in(&stdout, "joined");
    assert_ne!(node_b, node);
    server.bcctl(&["node", "delete", &node, "--yes", "--reason", "TPM replaced"]);

    // 4. An unknown EK waits for an operator.
    let tpm_c = Swtpm::start();
    let c = tmp.path().join("machine-c");
    let mut cmd = bcd_tpm(&server, &c, &tpm_c, &["join", "--attestor", "tpm"]);
    cmd.env("BCD_SYSFS_ROOT", tmp.path().join("no-sysfs"));
    let mut join = Proc::spawn("bcd join (enrolled)", cmd, tmp.path().join("c.log"));
    let line = join.wait_line(
        "bcd join: waiting for approval of ",
        Duration::from_secs(60),
    );
    let id = line
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned();
    assert!(id.starts_with("jr_"), "{}", join.log_text());
    server.bcctl(&["join-request", "approve", &id]);
    let status = join.wait_exit(Duration::from_secs(90));
    assert_eq!(status.code(), Some(0), "{}", join.log_text());
    eprintln!("tpm e2e on {db_url}: {:?}", started.elapsed());
}

fn status_tpm(server: &Server, dir: &Path, tpm: &Swtpm) -> serde_json::Value {
    let (_, stdout, stderr) = run(bcd_tpm(server, dir, tpm, &["status", "--json"]));
    serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("bcd status --json: {e}: {stdout}{stderr}"))
}

/// `tpm2_flushcontext -t`: what a resource manager does when a process exits.
pub(crate) fn flush_transient(tpm: &Swtpm) {
    let status = Command::new("tpm2_flushcontext")
        .arg("-t")
        .env("TPM2TOOLS_TCTI", tpm.tcti())
        .status()
        .expect("tpm2_flushcontext runs");
    assert!(status.success());
}

/// node.key holds only the record: one `BCD TPM NODE KEY` PEM block of 32 bytes, mode 0600.
pub(crate) fn check_key_record(data: &Path) {
    let path = data.join("node.key");
    let text = fs::read_to_string(&path).expect("node.key");
    let body: String = text
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect::<Vec<_>>()
        .concat();
    assert!(
        text.starts_with("-----BEGIN BCD TPM NODE KEY-----\n"),
        "{text}"
    );
    assert!(
        text.trim_end().ends_with("-----END BCD TPM NODE KEY-----"),
        "{text}"
    );
    assert_eq!(base64_decode(&body).len(), 32, "{text}");
    let mode = fs::metadata(&path).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}

/// The reason of the newest `security.join.refused` event in the server's store.
pub(crate) fn last_join_refusal(server: &Server) -> String {
    use events::store::{EventStore, LogStore};
    let url = server.facts["databaseUrlFull"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async move {
        let store = EventStore::open(&url).await.expect("open the store");
        let mut last = String::new();
        for e in store.read_batch(0, 1_000_000).await.expect("read the log") {
            if e.event_type == "security.join.refused" {
                let p: events::schema::JoinRefused = e.decode().expect("a JoinRefused");
                last = p.refusal;
            }
        }
        last
    })
}

#[test]
fn tpm_e2e_sqlite() {
    let db = TestDb::sqlite().expect("sqlite test db");
    scenario(db.url());
}

#[tokio::test(flavor = "multi_thread")]
async fn tpm_e2e_postgres() {
    let db = TestDb::postgres().await.expect("postgres test db");
    let url = db.url().to_owned();
    tokio::task::spawn_blocking(move || scenario(&url))
        .await
        .expect("scenario");
    drop(db);
}
