//! The privilege split on one machine, as real users (issue 24): a non-root `bcd join --reset`
//! is refused and moves nothing; the hand-over gives the data directory and its files to the
//! `[helper] user` without following a symlink; `bcd doctor`'s `tpm` check fails while that
//! user is in `tss` or may open the TPM's device or socket, and passes otherwise.
//!
//! Run: `cargo test -p bcd --test suite privilege_local::` (as root, with swtpm).

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Stdio};

use bcd::files::pem_files::FileSettings;
use bcd::files::DataDir;
use bcd::helper::privilege::SystemUser;
use bcd::join::handover::hand_over;
use bcd::status::tpm_check::{check_user, Finding};
use swtpm_fixture::swtpm::Swtpm;
use swtpm_fixture::unix_user::UnixUser;

const PIN: &str = "sha256/47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=";

fn chmod(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

/// A config.toml for data dir `data`, with `extra` appended (sections).
fn config(dir: &Path, data: &Path, extra: &str) -> std::path::PathBuf {
    let path = dir.join("config.toml");
    fs::write(
        &path,
        format!(
            "server = \"127.0.0.1:1\"\ndata_dir = \"{}\"\nserving_ca_spki_pin = \"{PIN}\"\n\
             join_encryption_key_pin = \"{PIN}\"\njoin_signing_key_pin = \"{PIN}\"\n{extra}",
            data.display()
        ),
    )
    .unwrap();
    chmod(&path, 0o644);
    path
}

fn bcd(cfg: &Path, args: &[&str]) -> Command {
    let mut cmd = crate::common::bcd_command(cfg, args);
    cmd.stdin(Stdio::null());
    cmd
}

fn listing(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    files.sort();
    files
}

#[test]
fn a_non_root_reset_is_refused_and_moves_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    chmod(tmp.path(), 0o755);
    let data = tmp.path().join("data");
    fs::create_dir(&data).unwrap();
    for (name, bytes) in [
        ("identity.json", &b"{\"not\": \"read\"}"[..]),
        ("node.key", b"key"),
        ("node.key.next", b"next"),
        ("journal.db", b"journal"),
    ] {
        fs::write(data.join(name), bytes).unwrap();
        chmod(&data.join(name), 0o644);
    }
    chmod(&data, 0o777);
    let before = listing(&data);
    let cfg = config(tmp.path(), &data, "");
    let user = UnixUser::create();
    for args in [&["join", "--reset"][..], &["join", "--reset", "--yes"]] {
        let mut cmd = bcd(&cfg, args);
        user.runs(&mut cmd);
        let out = cmd.output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            "bcd join --reset: run it as root\n",
            "{args:?}"
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout), "", "{args:?}");
        assert_eq!(listing(&data), before, "{args:?}");
    }
}

#[test]
fn a_non_root_join_under_helper_is_refused_before_the_token_is_read() {
    let tmp = tempfile::tempdir().unwrap();
    chmod(tmp.path(), 0o755);
    let data = tmp.path().join("data");
    let user = UnixUser::create();
    let cfg = config(
        tmp.path(),
        &data,
        &format!("[helper]\nuser = \"{}\"\n", user.name()),
    );
    let token = tmp.path().join("join-token");
    fs::write(&token, "bct_not_read\n").unwrap();
    chmod(&token, 0o666);
    let mut cmd = bcd(
        &cfg,
        &["join", "--token-file", &token.display().to_string()],
    );
    user.runs(&mut cmd);
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "bcd join: [helper] user is {u}: the join stores the identity and hands it over to \
             {u}, and only root can do that; this process runs as {u} (uid {uid}): run bcd join \
             as root; nothing was read or sent\n",
            u = user.name(),
            uid = user.uid()
        )
    );
    assert_eq!(fs::read_to_string(&token).unwrap(), "bct_not_read\n");
    assert!(!data.exists());
}

#[test]
fn the_hand_over_gives_the_files_and_changes_only_a_link() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let dir = DataDir::new(&data);
    dir.ensure_exists().unwrap();
    for name in [
        "identity.json",
        "node.key",
        "journal.db",
        "approver-set.json",
        "cert.pem",
        "node.key.reset-20260926T114200Z",
    ] {
        dir.write(name, name.as_bytes()).unwrap();
    }
    // node.key.next swapped for a symlink to a file of root's elsewhere.
    let target = tmp.path().join("root-only");
    fs::write(&target, b"root's").unwrap();
    std::os::unix::fs::symlink(&target, data.join("node.key.next")).unwrap();
    let unix = UnixUser::create();
    let user = SystemUser::by_name(unix.name()).unwrap();
    let given = hand_over(&dir, &FileSettings::defaults(&data), &user).unwrap();
    let names: Vec<String> = given
        .iter()
        .map(|p| p.strip_prefix(tmp.path()).unwrap().display().to_string())
        .collect();
    assert_eq!(
        names,
        [
            "data",
            "data/identity.json",
            "data/node.key",
            "data/node.key.next",
            "data/journal.db",
            "data/approver-set.json",
            "data/cert.pem",
        ]
    );
    for path in &given {
        let meta = fs::symlink_metadata(path).unwrap();
        assert_eq!(
            (meta.uid(), meta.gid()),
            (unix.uid(), unix.gid()),
            "{path:?}"
        );
    }
    let target_meta = fs::metadata(&target).unwrap();
    assert_eq!((target_meta.uid(), target_meta.gid()), (0, 0));
    let moved = fs::metadata(data.join("node.key.reset-20260926T114200Z")).unwrap();
    assert_eq!(moved.uid(), 0);
}

fn ok_text(user: &str, tcti: &str) -> String {
    format!(
        "{user} (bcd node's user) cannot open the TPM ({tcti}); bcd helper holds it for bcd node"
    )
}

fn may_open_text(user: &str, path: &Path, gid: u32, mode: u32) -> String {
    format!(
        "{user} (bcd node's user) may open the TPM: {} is owned by root, gid {gid}, mode \
         {mode:04o}; only root (bcd helper) should: make it root's and the tss group's, 0660 (as \
         the tpm udev rules do for /dev/tpmrm0)",
        path.display()
    )
}

#[test]
fn doctor_fails_a_node_user_in_tss_or_one_that_may_open_the_device() {
    let tmp = tempfile::tempdir().unwrap();
    chmod(tmp.path(), 0o755);
    let device = tmp.path().join("tpmrm0");
    fs::write(&device, b"").unwrap();
    chmod(&device, 0o660);
    let tcti = format!("device:{}", device.display());

    let in_tss = UnixUser::create_in(&["tss"]);
    let user = SystemUser::by_name(in_tss.name()).unwrap();
    assert_eq!(
        check_user(&user, &tcti),
        Finding::Fail(format!(
            "{u} (bcd node's user) is in the tss group, which may open the TPM: take it out \
             (gpasswd -d {u} tss) so that only bcd helper opens it",
            u = in_tss.name()
        ))
    );

    let plain = UnixUser::create();
    let user = SystemUser::by_name(plain.name()).unwrap();
    assert_eq!(
        check_user(&user, &tcti),
        Finding::Ok(ok_text(plain.name(), &tcti))
    );
    // The device's group is the user's: it may open it.
    std::os::unix::fs::chown(&device, None, Some(plain.gid())).unwrap();
    assert_eq!(
        check_user(&user, &tcti),
        Finding::Fail(may_open_text(plain.name(), &device, plain.gid(), 0o660))
    );
    // Back to root's group, but open to others.
    std::os::unix::fs::chown(&device, None, Some(0)).unwrap();
    chmod(&device, 0o666);
    assert_eq!(
        check_user(&user, &tcti),
        Finding::Fail(may_open_text(plain.name(), &device, 0, 0o666))
    );
    // Open to others, in a directory the user cannot search.
    let closed = tmp.path().join("closed");
    fs::create_dir(&closed).unwrap();
    chmod(&closed, 0o700);
    let hidden = closed.join("tpmrm0");
    fs::write(&hidden, b"").unwrap();
    chmod(&hidden, 0o666);
    let hidden_tcti = format!("device:{}", hidden.display());
    assert_eq!(
        check_user(&user, &hidden_tcti),
        Finding::Ok(ok_text(plain.name(), &hidden_tcti))
    );
    // TCP and other TCTIs are not checked.
    assert!(matches!(
        check_user(&user, "swtpm:host=127.0.0.1,port=2321"),
        Finding::Warn(_)
    ));
}

/// `bcd doctor`'s `tpm` line, run as `user`.
fn doctor_tpm_line(cfg: &Path, user: &UnixUser) -> String {
    let mut cmd = bcd(cfg, &["doctor"]);
    user.runs(&mut cmd);
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let lines: Vec<&str> = stdout.lines().filter(|l| l.contains(" tpm: ")).collect();
    assert_eq!(
        lines.len(),
        1,
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    lines[0].to_owned()
}

#[test]
fn doctor_as_the_node_user_checks_the_helpers_socket() {
    let tmp = tempfile::tempdir().unwrap();
    chmod(tmp.path(), 0o755);
    let socket_dir = tmp.path().join("tpm");
    fs::create_dir(&socket_dir).unwrap();
    chmod(&socket_dir, 0o755);
    let socket = socket_dir.join("tpm.sock");
    let tpm = Swtpm::start_unix(&socket);
    let tcti = tpm.tcti();
    let user = UnixUser::create();
    let data = tmp.path().join("data");
    let cfg = config(
        tmp.path(),
        &data,
        &format!(
            "[helper]\nuser = \"{}\"\n[tpm]\ntcti = \"{tcti}\"\n",
            user.name()
        ),
    );
    // swtpm's socket is root's, 0770: the user may not open it, and doctor (as it) cannot.
    assert_eq!(
        doctor_tpm_line(&cfg, &user),
        format!("ok   tpm: {}", ok_text(user.name(), &tcti))
    );
    chmod(&socket, 0o777);
    assert_eq!(
        doctor_tpm_line(&cfg, &user),
        format!(
            "FAIL tpm: {}",
            may_open_text(user.name(), &socket, 0, 0o777)
        )
    );
    // Without [helper] there is no tpm check.
    let plain = config(tmp.path(), &data, "");
    let out = bcd(&plain, &["doctor"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.lines().filter(|l| l.contains(" tpm: ")).count(),
        0,
        "{stdout}"
    );
    drop(tpm);
}
