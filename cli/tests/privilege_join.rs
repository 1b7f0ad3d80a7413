//! The privilege split end to end with the real binaries (issue 24), on SQLite: a root `bcd join`
//! reads the product UUID and a token bound to it admits the machine; the same join as a non-root
//! user cannot read it (0400 root in a fake sysfs), says so, and the bound token refuses it.
//! `bcctl node install-script --helper-user U` writes `[helper] user`, and the script run as
//! root takes U out of `tss`, writes bcd-helper.service and bcd.service, and joins as root; the
//! join hands the data directory, `identity.json` and `node.key` over to U.
//!
//! Run: `cargo test -p cli --test suite privilege_join::` (as root).

use crate::support;
use crate::x509pop_e2e::{bcd, run, start_server, Server};

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

use events::store::testkit::TestDb;
use swtpm_fixture::unix_user::UnixUser;

const UUID: &str = "4c4c4544-0042-3510-8052-b7c04f4e4e01";

fn chmod(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).expect("chmod");
}

/// Everything under `dir` readable (and directories searchable) by other users: the node's
/// configuration of `bcctl up` is read by a non-root join here.
fn open_up(dir: &Path) {
    chmod(dir, 0o755);
    for entry in fs::read_dir(dir).expect("read_dir").flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            open_up(&path);
        } else if name.ends_with(".toml") || name.ends_with(".jwk") || name.ends_with(".pem") {
            chmod(&path, 0o644);
        }
    }
}

/// A sysfs with only the product UUID, 0400 root as the kernel makes it.
fn fake_sysfs(tmp: &Path) -> std::path::PathBuf {
    let sys = tmp.join("sys");
    let id = sys.join("class/dmi/id");
    fs::create_dir_all(&id).expect("mkdir");
    for dir in [&sys, &sys.join("class"), &sys.join("class/dmi"), &id] {
        chmod(dir, 0o755);
    }
    fs::write(
        id.join("product_uuid"),
        format!("{}\n", UUID.to_uppercase()),
    )
    .expect("write");
    chmod(&id.join("product_uuid"), 0o400);
    sys
}

fn server_address(server: &Server) -> String {
    let text = fs::read_to_string(server.s("bcdConfig")).expect("bcd config");
    text.lines()
        .find_map(|l| l.strip_prefix("server = \""))
        .and_then(|l| l.strip_suffix('"'))
        .unwrap_or_else(|| panic!("no server in {text}"))
        .to_owned()
}

fn scenario(db_url: &str) {
    let tmp = tempfile::tempdir().expect("tempdir");
    chmod(tmp.path(), 0o755);
    let server = start_server(tmp.path(), db_url, "1h");
    open_up(&tmp.path().join("up"));
    let sys = fake_sysfs(tmp.path());
    let sys_s = sys.display().to_string();

    // Root reads the product UUID: a token bound to it admits the machine.
    let bound = server.token(&["--expect-product-uuid", UUID]);
    let data = tmp.path().join("root-node");
    let mut join = bcd(&server, &data, &["join"]);
    join.env("BCD_JOIN_TOKEN", &bound)
        .env("BCD_SYSFS_ROOT", &sys_s);
    let (code, stdout, stderr) = run(join);
    assert_eq!(code, 0, "{stdout}{stderr}\n{}", server.proc.log_text());
    assert!(stdout.contains("joined as "), "{stdout}");
    assert!(!stderr.contains("product UUID"), "{stderr}");

    // A non-root user cannot read it: the join says so, and the bound token refuses it.
    let user = UnixUser::create();
    let data = tmp.path().join("user-node");
    fs::create_dir(&data).expect("mkdir");
    std::os::unix::fs::chown(&data, Some(user.uid()), Some(user.gid())).expect("chown");
    let bound = server.token(&["--expect-product-uuid", UUID]);
    let mut join = bcd(&server, &data, &["join"]);
    join.env("BCD_JOIN_TOKEN", &bound)
        .env("BCD_SYSFS_ROOT", &sys_s)
        .env("BCD_TPM_TCTI", "device:/nonexistent/tpm");
    user.runs(&mut join);
    let (code, stdout, stderr) = run(join);
    assert_eq!(code, 1, "{stdout}{stderr}");
    let warning = format!(
        "bcd join: cannot read the product UUID ({}/class/dmi/id/product_uuid): permission \
         denied (it is readable by root only, and this join runs as {} (uid {})); it is left out \
         of the claims, so a token bound with --expect-product-uuid refuses this machine: run bcd \
         join as root",
        sys.display(),
        user.name(),
        user.uid()
    );
    assert_eq!(
        stderr.lines().filter(|l| *l == warning).count(),
        1,
        "{stderr}"
    );
    assert!(!data.join("identity.json").exists());
    assert_eq!(
        stderr.lines().last().unwrap_or_default(),
        "Join refused (ACCESS_DENIED): check the token (expired, used, for another site or \
         role, or bound to another machine) with the operator",
        "{stderr}"
    );

    // install-script --helper-user: the split set up and the join handed over, as root.
    let helper = UnixUser::create_in(&["tss"]);
    let root = tmp.path().join("root");
    let node_data = root.join("var/lib/bcd");
    let out = server.bcctl(&[
        "node",
        "install-script",
        "--join-address",
        &server_address(&server),
        "--data-dir",
        &node_data.display().to_string(),
        "--bcd",
        &support::bcd_bin().display().to_string(),
        "--helper-user",
        helper.name(),
    ]);
    let script = tmp.path().join("install.sh");
    fs::write(&script, &out.stdout).expect("write");
    // As anyone but root the script stops at once.
    let mut as_user = Command::new("sh");
    as_user
        .arg(&script)
        .env("BCD_ETC", tmp.path().join("user-etc"));
    user.runs(&mut as_user);
    let refused = as_user.output().expect("sh");
    assert_eq!(refused.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&refused.stderr),
        format!(
            "this script sets up bcd's privilege split (bcd helper as root, bcd node as {}): run \
             it as root\n",
            helper.name()
        )
    );
    assert!(!tmp.path().join("user-etc").exists());
    let token_file = tmp.path().join("join-token");
    fs::write(&token_file, server.token(&[])).expect("write");
    chmod(&token_file, 0o600);
    let etc = root.join("etc/bcd");
    let units = root.join("etc/systemd/system");
    let ran = Command::new("sh")
        .arg(&script)
        .env("BCD_ETC", &etc)
        .env("BCD_SYSTEMD_DIR", &units)
        .env("BCD_TOKEN_FILE", &token_file)
        .env_remove("BCD_JOIN_TOKEN")
        .env_remove("BCD_TPM_TCTI")
        .output()
        .expect("sh");
    let said = String::from_utf8_lossy(&ran.stdout).into_owned();
    let err = String::from_utf8_lossy(&ran.stderr).into_owned();
    assert!(ran.status.success(), "{said}{err}");
    let groups = Command::new("id")
        .args(["-nG", helper.name()])
        .output()
        .expect("id");
    let groups = String::from_utf8_lossy(&groups.stdout).into_owned();
    assert!(!groups.split_whitespace().any(|g| g == "tss"), "{groups}");
    let config = fs::read_to_string(etc.join("config.toml")).expect("config");
    assert!(
        config.ends_with(&format!("[helper]\nuser = \"{}\"\n", helper.name())),
        "{config}"
    );
    let node_unit = fs::read_to_string(units.join("bcd.service")).expect("bcd.service");
    assert!(
        node_unit.contains(&format!("\nUser={0}\nGroup={0}\n", helper.name())),
        "{node_unit}"
    );
    // The units run what this install put where it put it, not deploy/systemd's defaults.
    let bcd = support::bcd_bin().display().to_string();
    for line in [
        format!(
            "ExecStart={bcd} node --config {}/config.toml",
            etc.display()
        ),
        format!("ReadWritePaths={}", node_data.display()),
        format!("ConditionPathExists={}/identity.json", node_data.display()),
    ] {
        assert!(node_unit.lines().any(|l| l == line), "{line}:\n{node_unit}");
    }
    let helper_unit =
        fs::read_to_string(units.join("bcd-helper.service")).expect("bcd-helper.service");
    let line = format!(
        "ExecStart={bcd} --config {}/config.toml helper",
        etc.display()
    );
    assert!(
        helper_unit.lines().any(|l| l == line),
        "{line}:\n{helper_unit}"
    );
    assert!(said.contains("joined as "), "{said}{err}");
    assert_eq!(
        said.lines()
            .filter(|l| *l
                == format!(
                    "handed {} over to {} (uid {}) for bcd node",
                    node_data.display(),
                    helper.name(),
                    helper.uid()
                ))
            .count(),
        1,
        "{said}"
    );
    for path in [
        node_data.clone(),
        node_data.join("identity.json"),
        node_data.join("node.key"),
    ] {
        let meta = fs::symlink_metadata(&path).expect("stat");
        assert_eq!(
            (meta.uid(), meta.gid()),
            (helper.uid(), helper.gid()),
            "{path:?}"
        );
    }
    // The token file was consumed; the node user can read its identity: bcd status as it.
    let mut status = Command::new(support::bcd_bin());
    status
        .args(["--config"])
        .arg(etc.join("config.toml"))
        .args(["status", "--json"])
        .env_remove("BCD_DATA_DIR")
        .env_remove("BCD_TPM_TCTI");
    helper.runs(&mut status);
    chmod(&root, 0o755);
    let (code, stdout, stderr) = run(status);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let status: serde_json::Value = serde_json::from_str(&stdout).expect("status --json");
    assert_eq!(status["state"], "ok", "{status}");
}

#[test]
fn privilege_join_sqlite() {
    let db = TestDb::sqlite().expect("sqlite test db");
    scenario(db.url());
}
