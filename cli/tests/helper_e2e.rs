//! The node's privilege split end to end (issue 24; spec 002 "Through bcd helper"), with the real
//! binaries, a real control plane on Postgres and a real software TPM behind a device file that
//! only root can open, as a host's `/dev/tpmrm0` is root's and the `tss` group's:
//!
//! 1. `bcd join --attestor tpm` runs as root: the node key is made in the TPM and certified by
//!    the AK; the identity is handed to the `[helper] user` (a throwaway user this test makes).
//! 2. `bcd helper` runs as root, `bcd node` as that user: two processes. The user cannot open
//!    the TPM (bcd's own open and tpm2-tools' both fail), yet the node holds its session, whose
//!    TLS handshakes the node key signs, and renews twice with the AK's certification of each
//!    next key, all through the helper; the certificates keep naming the AK.
//! 3. With the helper stopped, the node says it cannot reach it (naming the socket) and keeps
//!    running; once the helper is back it renews again: its keys were reached through the
//!    helper only.
//! 4. A node started while its helper is down waits for it, then holds its session.
//!
//! Run: `cargo test -p cli --test suite helper_e2e::` (Postgres at `DATABASE_URL`).

use crate::support::{self, wait_for, Proc};
use crate::tpm_e2e::{allow, check_key_record, flush_transient, leaf_uris, machine, serve_config};
use crate::x509pop_e2e::{node_in, run, start_server_configured, Server};

use std::fs;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use events::store::testkit::TestDb;
use swtpm_fixture::swtpm::{ek_ca, Swtpm};
use swtpm_fixture::unix_user::UnixUser;

/// Short leaves: bcd renews at 60%, so two renewals take about 15 s.
const LEAF_LIFETIME: &str = "12s";

/// One machine: its config directory (config.toml and the JoinService keys, readable by the
/// node's user), its data directory, the TPM's and the helper's sockets.
struct Machine {
    root: PathBuf,
    config: PathBuf,
    data: PathBuf,
    helper_socket: PathBuf,
}

fn open_dir(path: &Path) {
    fs::create_dir_all(path).expect("mkdir");
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).expect("chmod 0755");
}

impl Machine {
    /// up's bcd config with `[tpm]` naming the TPM's socket and `[helper]` naming `user`, copied
    /// with the JoinService keys into a directory every user can read (up's own is root's).
    fn new(tmp: &Path, server: &Server, tpm: &Swtpm, user: &UnixUser) -> Machine {
        let root = tmp.join("machine");
        let etc = root.join("etc");
        open_dir(&etc);
        let up_config = PathBuf::from(server.s("bcdConfig"));
        let up_dir = up_config.parent().expect("up's config has a directory");
        for entry in fs::read_dir(up_dir).expect("up's bcd directory") {
            let path = entry.expect("an entry").path();
            if path.extension().is_some_and(|e| e == "jwk") {
                let to = etc.join(path.file_name().expect("a name"));
                fs::copy(&path, &to).expect("copy a JoinService key");
                fs::set_permissions(&to, fs::Permissions::from_mode(0o644)).expect("chmod");
            }
        }
        let run_dir = root.join("run");
        open_dir(&run_dir);
        let helper_socket = run_dir.join("helper.sock");
        let base = fs::read_to_string(&up_config).expect("up's bcd config");
        let config = etc.join("config.toml");
        let text = format!(
            "{base}\n[tpm]\ntcti = {tcti:?}\nek_intermediates = [{issuer:?}]\n\n\
             [helper]\nuser = {user:?}\nsocket = {socket:?}\n",
            tcti = tpm.tcti(),
            issuer = ek_ca().issuer_pem_path().display().to_string(),
            user = user.name(),
            socket = helper_socket.display().to_string(),
        );
        fs::write(&config, text).expect("config.toml");
        fs::set_permissions(&config, fs::Permissions::from_mode(0o644)).expect("chmod");
        Machine {
            data: root.join("data"),
            root,
            config,
            helper_socket,
        }
    }

    /// bcd with this machine's config and data directory, the environment cleared of bcd's.
    fn bcd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(support::bcd_bin());
        cmd.arg("--config")
            .arg(&self.config)
            .arg("--data-dir")
            .arg(&self.data)
            .args(args)
            .env_remove("BCD_JOIN_TOKEN")
            .env_remove("BCD_SERVER")
            .env_remove("BCD_DATA_DIR")
            .env_remove("BCD_CONFIG")
            .env_remove("BCD_TPM_TCTI")
            .env(
                "BCD_SYSFS_ROOT",
                self.root.parent().unwrap_or(&self.root).join("sysfs"),
            );
        cmd
    }

    /// The same, run as `user`.
    fn bcd_as(&self, user: &UnixUser, args: &[&str]) -> Command {
        let mut cmd = self.bcd(args);
        user.runs(&mut cmd);
        cmd
    }
}

/// The helper, started as root, once its socket accepts connections.
fn start_helper(m: &Machine, tmp: &Path, n: u32) -> Proc {
    let _ = fs::remove_file(&m.helper_socket);
    let mut helper = Proc::spawn(
        "bcd helper",
        m.bcd(&["helper"]),
        tmp.join(format!("bcd-helper-{n}.log")),
    );
    wait_for(
        "the helper's socket",
        Duration::from_secs(20),
        || m.helper_socket.exists(),
        || helper.log_text(),
    );
    assert!(helper.is_running(), "{}", helper.log_text());
    helper
}

fn scenario(db_url: &str) {
    let tmp = tempfile::tempdir().expect("tempdir");
    open_dir(tmp.path());
    machine(tmp.path());
    let user = UnixUser::create();
    let config = serve_config(tmp.path());
    let server = start_server_configured(tmp.path(), db_url, LEAF_LIFETIME, 1, Some(&config));

    // The TPM: a device file of root's, mode 0600, as /dev/tpmrm0 is root's (and tss's).
    let tpm_dir = tmp.path().join("tpm");
    open_dir(&tpm_dir);
    let tpm = Swtpm::start_device(&tpm_dir);
    let device = tpm.device_path().expect("a device").to_owned();
    let m = Machine::new(tmp.path(), &server, &tpm, &user);

    // The user cannot open the TPM: neither bcd's own client nor tpm2-tools.
    let (code, stdout, stderr) = run(m.bcd_as(&user, &["tpm", "show", "--json"]));
    assert_eq!(code, 1, "bcd tpm show as {}: {stdout}{stderr}", user.name());
    assert!(
        stderr.contains(&format!("the TPM ({}) is unavailable", tpm.tcti())),
        "{stderr}"
    );
    let mut getrandom = Command::new("tpm2_getrandom");
    getrandom
        .args(["8", "--hex"])
        .env("TPM2TOOLS_TCTI", tpm.tcti());
    user.runs(&mut getrandom);
    let out = getrandom.output().expect("tpm2_getrandom runs");
    assert!(!out.status.success(), "{out:?}");
    // Why: the kernel refuses the user the device (EACCES), as it would /dev/tpmrm0.
    let mut open = Command::new("python3");
    open.args([
        "-c",
        "import sys\ntry: open(sys.argv[1], 'r+b'); print('opened')\n\
         except OSError as e: print(type(e).__name__, e.errno)",
    ]);
    open.arg(&device);
    user.runs(&mut open);
    let out = open.output().expect("python3 runs");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "PermissionError 13",
        "{out:?}"
    );

    // 1. Root joins with the TPM; the identity is handed to the user.
    let (code, stdout, stderr) = run(m.bcd(&["tpm", "show", "--json"]));
    assert_eq!(code, 0, "{stdout}{stderr}");
    let shown: serde_json::Value = serde_json::from_str(&stdout).expect("tpm show --json");
    let statement = shown["akStatement"]
        .as_str()
        .expect("akStatement")
        .to_owned();
    allow(&server, shown["ekSha256"].as_str().expect("ekSha256"));
    let (code, stdout, stderr) = run(m.bcd(&["join", "--attestor", "tpm"]));
    assert_eq!(
        code,
        0,
        "{stdout}{stderr}\nserver:\n{}",
        server.proc.log_text()
    );
    let node = node_in(&stdout, "joined");
    check_key_record(&m.data);
    for name in ["identity.json", "node.key"] {
        let meta = fs::symlink_metadata(m.data.join(name)).expect("stat");
        assert_eq!((meta.uid(), meta.gid()), (user.uid(), user.gid()), "{name}");
    }
    let first_key = fs::read(m.data.join("node.key")).expect("node.key");

    // 2. The helper as root, the node as the user.
    let helper = start_helper(&m, tmp.path(), 1);
    let mut agent = Proc::spawn(
        "bcd node (unprivileged)",
        m.bcd_as(&user, &["node"]),
        tmp.path().join("bcd-node.log"),
    );
    let context = |agent: &Proc, helper: &Proc| {
        format!(
            "node:\n{}\nhelper:\n{}\nserver:\n{}",
            agent.log_text(),
            helper.log_text(),
            server.proc.log_text()
        )
    };
    wait_for(
        "a session and two renewals",
        Duration::from_secs(60),
        || {
            let log = agent.log_text();
            log.contains(&format!("session open as {node}")) && log.matches("renewed").count() >= 2
        },
        || context(&agent, &helper),
    );
    assert!(agent.is_running(), "{}", context(&agent, &helper));
    // Every renewed certificate still names the AK; the key moved on, still in the TPM.
    let uris = leaf_uris(&m.data);
    assert_eq!(uris.get(1), Some(&statement), "{uris:?}");
    check_key_record(&m.data);
    assert_ne!(
        fs::read(m.data.join("node.key")).expect("node.key"),
        first_key
    );
    let meta = fs::symlink_metadata(m.data.join("identity.json")).expect("stat");
    assert_eq!(
        meta.uid(),
        user.uid(),
        "the node rewrote identity.json as its user"
    );

    // 3. Without the helper the node reaches no key: the next renewal fails naming it.
    let mut helper = helper;
    let _ = helper.child.kill();
    let _ = helper.child.wait();
    // This TPM has no resource manager: what the killed helper had loaded stays loaded (the
    // kernel's /dev/tpmrm0 flushes it when the process goes).
    flush_transient(&tpm);
    let renewed = agent.log_text().matches("renewed").count();
    let unreachable = format!("bcd helper is unreachable at {}", m.helper_socket.display());
    wait_for(
        "the node saying the helper is unreachable",
        Duration::from_secs(30),
        || agent.log_text().contains(&unreachable),
        || context(&agent, &helper),
    );
    assert!(agent.is_running(), "{}", context(&agent, &helper));
    let helper = start_helper(&m, tmp.path(), 2);
    wait_for(
        "a renewal once the helper is back",
        Duration::from_secs(90),
        || agent.log_text().matches("renewed").count() > renewed,
        || context(&agent, &helper),
    );
    let _ = agent.child.kill();
    let _ = agent.wait_exit(Duration::from_secs(10));

    // The node's status, as the user, through the helper: the key is in the TPM.
    let (code, stdout, stderr) = run(m.bcd_as(&user, &["status", "--json"]));
    assert_eq!(code, 0, "{stdout}{stderr}");
    let st: serde_json::Value = serde_json::from_str(&stdout).expect("status --json");
    assert_eq!(st["nodeKey"], "tpm", "{st}");

    // 4. A node that starts before its helper (boot order, a helper restarting) waits for it
    //    instead of exiting, then holds its session.
    let mut helper = helper;
    let _ = helper.child.kill();
    let _ = helper.child.wait();
    flush_transient(&tpm);
    let mut agent = Proc::spawn(
        "bcd node (before its helper)",
        m.bcd_as(&user, &["node"]),
        tmp.path().join("bcd-node-early.log"),
    );
    wait_for(
        "the node waiting for its helper",
        Duration::from_secs(20),
        || {
            agent
                .log_text()
                .lines()
                .any(|l| l.contains(&unreachable) && l.contains("trying again in"))
        },
        || context(&agent, &helper),
    );
    assert!(agent.is_running(), "{}", context(&agent, &helper));
    let helper = start_helper(&m, tmp.path(), 3);
    wait_for(
        "a session once the helper is up",
        Duration::from_secs(60),
        || {
            agent
                .log_text()
                .contains(&format!("session open as {node}"))
        },
        || context(&agent, &helper),
    );
    drop(agent);
    drop(helper);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unprivileged_node_holds_its_session_and_renews_through_the_helper() {
    let db = TestDb::postgres().await.expect("postgres test db");
    let url = db.url().to_owned();
    tokio::task::spawn_blocking(move || scenario(&url))
        .await
        .expect("scenario");
    drop(db);
}
