//! Who `bcd helper` serves, with real processes and users: the helper (root, the real binary)
//! gives its socket to the `[helper] user` with mode 0600, so another user's connect is refused
//! by the kernel; with the mode opened, the helper itself refuses that uid, and root, with its
//! message. `bcd helper` as non-root and `bcd node` as another user than `[helper] user` exit 1
//! with theirs. Other users' connections are made by this test binary run again as them
//! ([`child_connects`]).

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use swtpm_fixture::swtpm::Swtpm;
use swtpm_fixture::unix_user::UnixUser;

/// The environment variable naming the socket [`child_connects`] connects to.
const CONNECT_ENV: &str = "BCD_HELPER_TEST_CONNECT";

/// Run again as another user: connects to the socket of [`CONNECT_ENV`], asks `tpm.ak`, and
/// prints `CONNECT: <first answer line>` or `CONNECT-ERROR: <kind>`. Does nothing otherwise.
#[test]
fn child_connects() {
    let Ok(socket) = std::env::var(CONNECT_ENV) else {
        return;
    };
    match UnixStream::connect(&socket) {
        Err(e) => println!("CONNECT-ERROR: {:?}", e.kind()),
        Ok(mut stream) => {
            let _ = stream.write_all(b"{\"op\":\"tpm.ak\"}\n");
            let mut line = String::new();
            let _ = BufReader::new(stream).read_line(&mut line);
            println!("CONNECT: {}", line.trim_end());
        }
    }
}

/// What [`child_connects`] printed, run as `user` against `socket`.
fn connect_as(user: &UnixUser, socket: &Path) -> String {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = Command::new(exe);
    cmd.args([
        "--exact",
        "helper_peers::child_connects",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CONNECT_ENV, socket);
    user.runs(&mut cmd);
    let out = cmd.output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.find("CONNECT").map(|at| l[at..].to_owned()))
        .unwrap_or_else(|| panic!("no CONNECT line: {out:?}"))
}

/// A readable config with `[tpm]` and, when `user` is given, `[helper]`.
fn config(dir: &Path, tcti: &str, user: Option<&str>, socket: &Path) -> PathBuf {
    let path = dir.join("config.toml");
    let mut text = format!(
        "data_dir = \"{}\"\n[tpm]\ntcti = \"{tcti}\"\n",
        dir.join("data").display()
    );
    if let Some(user) = user {
        text.push_str(&format!(
            "[helper]\nuser = \"{user}\"\nsocket = \"{}\"\n",
            socket.display()
        ));
    }
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    path
}

fn bcd(config: &Path, args: &[&str]) -> Command {
    crate::common::bcd_command(config, args)
}

/// A 0755 temp dir (other users traverse it).
fn open_tempdir() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    tmp
}

/// `bcd helper` as root, once its socket exists; stderr captured.
struct HelperProcess {
    child: Child,
}

impl HelperProcess {
    fn start(config: &Path, socket: &Path) -> HelperProcess {
        let child = bcd(config, &["helper"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut helper = HelperProcess { child };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !socket.exists() {
            if let Ok(Some(status)) = helper.child.try_wait() {
                panic!("bcd helper exited {status}: {}", helper.stderr());
            }
            assert!(
                Instant::now() < deadline,
                "no socket at {}",
                socket.display()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        helper
    }

    /// SIGTERM, the exit status, and what it logged.
    fn stop(mut self) -> (Option<i32>, String) {
        let killed = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        let status = self.child.wait().unwrap();
        (status.code(), self.stderr())
    }

    fn stderr(&mut self) -> String {
        let mut text = String::new();
        if let Some(mut err) = self.child.stderr.take() {
            let _ = err.read_to_string(&mut text);
        }
        text
    }
}

impl Drop for HelperProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[test]
fn only_the_helper_user_is_served() {
    let swtpm = Swtpm::start();
    let (served, stranger) = (UnixUser::create(), UnixUser::create());
    let tmp = open_tempdir();
    // The socket's directory does not exist yet: the helper makes it, 0755.
    let socket = tmp.path().join("run").join("helper.sock");
    let cfg = config(tmp.path(), &swtpm.tcti(), Some(served.name()), &socket);
    let helper = HelperProcess::start(&cfg, &socket);

    let meta = std::fs::metadata(&socket).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (served.uid(), served.gid()));
    assert_eq!(meta.mode() & 0o777, 0o600);
    assert_eq!(
        std::fs::metadata(socket.parent().unwrap()).unwrap().mode() & 0o777,
        0o755
    );

    // The helper's user is served.
    let answer = connect_as(&served, &socket);
    assert!(
        answer.starts_with("CONNECT: {\"answer\":\"ak\",\"publicArea\":\""),
        "{answer}"
    );
    // Another user: the kernel refuses the connect (the socket is the helper user's, 0600).
    assert_eq!(
        connect_as(&stranger, &socket),
        "CONNECT-ERROR: PermissionDenied"
    );
    // With the mode opened, the helper refuses that uid itself.
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let refusal = |name: &str, uid: u32| {
        format!(
            "{{\"answer\":\"refused\",\"error\":\"bcd helper serves only {} (uid {}); this \
             connection is {name} (uid {uid})\"}}",
            served.name(),
            served.uid()
        )
    };
    assert_eq!(
        connect_as(&stranger, &socket),
        format!("CONNECT: {}", refusal(stranger.name(), stranger.uid()))
    );
    // Root too, and the connection closes after the one line.
    let mut stream = UnixStream::connect(&socket).unwrap();
    stream.write_all(b"{\"op\":\"tpm.ak\"}\n").unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    assert_eq!(text, format!("{}\n", refusal("root", 0)));

    let (code, log) = helper.stop();
    assert_eq!(code, Some(0), "{log}");
    assert!(!socket.exists(), "the socket is removed at SIGTERM");
    let refused: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("refused a connection from"))
        .collect();
    assert_eq!(refused.len(), 2, "{log}");
    assert!(
        refused[0].ends_with(&format!(
            "bcd helper: refused a connection from {} (uid {}): only {} (uid {}) may use the \
             helper",
            stranger.name(),
            stranger.uid(),
            served.name(),
            served.uid()
        )),
        "{log}"
    );
    assert!(
        refused[1].ends_with(&format!(
            "bcd helper: refused a connection from root (uid 0): only {} (uid {}) may use the \
             helper",
            served.name(),
            served.uid()
        )),
        "{log}"
    );
    assert_eq!(
        log.lines()
            .filter(|l| l.contains(&format!("connection from {} (uid", served.name())))
            .count(),
        1,
        "{log}"
    );
}

#[test]
fn bcd_helper_runs_only_as_root_and_only_with_its_section() {
    let user = UnixUser::create();
    let tmp = open_tempdir();
    let socket = tmp.path().join("helper.sock");
    let cfg = config(
        tmp.path(),
        "device:/dev/no-such-tpm",
        Some(user.name()),
        &socket,
    );
    let mut as_user = bcd(&cfg, &["helper"]);
    user.runs(&mut as_user);
    let out = as_user.output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "bcd helper: run it as root (it holds the TPM for the unprivileged bcd node)\n"
    );
    assert!(!socket.exists());

    let bare = tmp.path().join("bare");
    std::fs::create_dir(&bare).unwrap();
    let cfg = config(&bare, "device:/dev/no-such-tpm", None, &socket);
    let out = bcd(&cfg, &["helper"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "bcd helper: {} has no [helper] section: set [helper] user = \"bcd\" (the user bcd \
             node runs as) to split the node's privileges\n",
            cfg.display()
        )
    );
}

/// Issue 44 item 4: on a host without a TPM (the default device absent) the helper has
/// nothing to hold and exits 0 saying so, so `bcd.service`, which requires it, starts. A TPM
/// that is there but does not answer (a device that exists, a swtpm TCTI) is still an error.
#[test]
fn bcd_helper_on_a_host_without_a_tpm_has_nothing_to_serve_and_exits_0() {
    let user = UnixUser::create();
    let tmp = open_tempdir();
    let socket = tmp.path().join("helper.sock");
    let cfg = config(
        tmp.path(),
        "device:/dev/no-such-tpm",
        Some(user.name()),
        &socket,
    );
    let out = bcd(&cfg, &["helper"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.ends_with(
            " bcd helper: no TPM on this host (device:/dev/no-such-tpm is absent): bcd node \
             keeps its node key in a file and needs no helper; nothing to serve\n"
        ),
        "{stderr}"
    );
    assert!(!socket.exists());

    // A node whose key is in the TPM, with the device absent (a driver loading late at boot):
    // an error, which the unit's restart retries.
    std::fs::create_dir_all(tmp.path().join("data")).unwrap();
    let record = domain::pki::pem_encode(bcd::node_key::TPM_KEY_PEM_LABEL, &[7u8; 32]);
    std::fs::write(tmp.path().join("data/node.key"), record).unwrap();
    let out = bcd(&cfg, &["helper"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "bcd helper: the TPM (device:/dev/no-such-tpm) is unavailable: /dev/no-such-tpm does not \
         exist (this host has no TPM, or its driver is not loaded)\n"
    );
}

#[test]
fn bcd_node_under_helper_runs_only_as_the_helper_user() {
    let (user, other) = (UnixUser::create(), UnixUser::create());
    let tmp = open_tempdir();
    let socket = tmp.path().join("helper.sock");
    let cfg = config(
        tmp.path(),
        "device:/dev/no-such-tpm",
        Some(user.name()),
        &socket,
    );
    let expected = |name: &str, uid: u32| {
        format!(
            "bcd node: [helper] user is {0}; this process runs as {name} (uid {uid}): run it as \
             {0} (bcd.service does)\n",
            user.name()
        )
    };
    let mut as_other = bcd(&cfg, &["node"]);
    other.runs(&mut as_other);
    let out = as_other.output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        expected(other.name(), other.uid())
    );
    let out = bcd(&cfg, &["node"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(String::from_utf8_lossy(&out.stderr), expected("root", 0));
}

#[test]
fn bcd_status_as_the_helper_user_loads_its_tpm_key_through_the_helper_only() {
    let swtpm = Swtpm::start();
    let user = UnixUser::create();
    let tmp = open_tempdir();
    let socket = tmp.path().join("helper.sock");
    let cfg = config(tmp.path(), &swtpm.tcti(), Some(user.name()), &socket);
    let data_dir = tmp.path().join("data");
    std::fs::create_dir(&data_dir).unwrap();
    {
        // Joined as root with a key in the TPM; this connection closes before the helper's.
        let key: bcd::node_key::NodeKey = bcd::tpm::Tpm::open(&swtpm.tcti())
            .unwrap()
            .create_node_key()
            .unwrap()
            .into();
        crate::common::joined_with(&data_dir, &crate::common::keyset(), "n1", &key, &[]);
    }
    let chowned = Command::new("chown")
        .args(["-R", &format!("{}:{}", user.uid(), user.gid())])
        .arg(&data_dir)
        .status()
        .unwrap();
    assert!(chowned.success());
    let status_as_user = || {
        let mut cmd = bcd(&cfg, &["status", "--json"]);
        user.runs(&mut cmd);
        cmd.output().unwrap()
    };

    let helper = HelperProcess::start(&cfg, &socket);
    let out = status_as_user();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["nodeKey"], "tpm", "{report}");
    assert_eq!(out.status.code(), Some(0), "{report}");
    let (code, log) = helper.stop();
    assert_eq!(code, Some(0), "{log}");
    assert_eq!(
        log.lines()
            .filter(|l| l.contains(&format!("connection from {} (uid", user.name())))
            .count(),
        1,
        "{log}"
    );

    // Without the helper the user reaches no key: the failure names the socket.
    let out = status_as_user();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_ne!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains(&format!(
            "bcd helper is unreachable at {}: No such file or directory (os error 2) (start it: \
             systemctl start bcd-helper)",
            socket.display()
        )),
        "{text}"
    );
}

#[test]
fn a_second_helper_and_a_socket_path_that_is_not_a_socket_are_refused() {
    let (first_tpm, second_tpm) = (Swtpm::start(), Swtpm::start());
    let user = UnixUser::create();
    let tmp = open_tempdir();
    let socket = tmp.path().join("helper.sock");
    let first = config(tmp.path(), &first_tpm.tcti(), Some(user.name()), &socket);
    let helper = HelperProcess::start(&first, &socket);

    // Another helper on the same socket: refused, the live one's socket left in place.
    let other_dir = open_tempdir();
    let second = config(
        other_dir.path(),
        &second_tpm.tcti(),
        Some(user.name()),
        &socket,
    );
    let out = bcd(&second, &["helper"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "bcd helper: another helper is listening on {}: stop it first (systemctl stop \
             bcd-helper)\n",
            socket.display()
        )
    );
    assert!(socket.exists());
    let (code, _) = helper.stop();
    assert_eq!(code, Some(0));

    // A regular file where the socket goes: refused, and left as it is.
    std::fs::write(&socket, b"not a socket").unwrap();
    let out = bcd(&first, &["helper"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "bcd helper: {} exists and is not a socket: remove it or set another [helper] \
             socket\n",
            socket.display()
        )
    );
    assert_eq!(std::fs::read(&socket).unwrap(), b"not a socket");
}
