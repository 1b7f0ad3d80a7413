//! End to end with the real binaries, on SQLite and on Postgres: a provisioned token re-keys a
//! node from a second machine directory. `bcctl up` serves; a machine joins with the printed
//! token (`bcd join`), claiming a product UUID from a sysfs-like tree (`BCD_SYSFS_ROOT`: the
//! test host has no DMI table); `bcctl token create --role provisioned --for-node NODE`; a
//! second data directory with the same product UUID runs `bcd join --attestor provisioned
//! --node-id NODE` and becomes that node (identity generation 2, the first certificate
//! revoked); the same token refuses a third directory, which stores nothing, and a token minted
//! for the node refuses a machine with another product UUID.
//!
//! Run: `cargo test -p cli --test suite provisioned_e2e::`.

use crate::support;

use crate::x509pop_e2e::{start_server_with_uses, Server};
use support::bcd_bin;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use events::store::testkit::TestDb;

const UUID: &str = "4c4c4544-0042-3510-8052-b4c04f4e3332";
const OTHER_UUID: &str = "0b9e4c1a-7f3d-4e2b-9c5a-1d2e3f405162";

/// The server of these tests: `bcctl up` with 24 h leaves and a single-use printed token.
fn start_server(tmp: &Path, db_url: &str) -> Server {
    start_server_with_uses(tmp, db_url, "24h", 1)
}

/// A machine: its data directory and the sysfs-like tree its claims are read from.
struct Machine {
    data: PathBuf,
    sys: PathBuf,
}

fn machine(tmp: &Path, name: &str, uuid: &str) -> Machine {
    let sys = tmp.join(format!("{name}-sys"));
    let dmi = sys.join("class/dmi/id");
    fs::create_dir_all(&dmi).expect("mkdir dmi");
    fs::write(
        dmi.join("product_uuid"),
        format!("{}\n", uuid.to_ascii_uppercase()),
    )
    .expect("write product_uuid");
    Machine {
        data: tmp.join(format!("{name}-data")),
        sys,
    }
}

/// `bcd join ARGS` on `m` with `token` in `BCD_JOIN_TOKEN`: (exit code, stdout, stderr).
fn bcd_join(server: &Server, m: &Machine, token: &str, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(bcd_bin())
        .arg("--config")
        .arg(server.s("bcdConfig"))
        .arg("--data-dir")
        .arg(&m.data)
        .arg("join")
        .args(args)
        .env("BCD_JOIN_TOKEN", token)
        .env("BCD_SYSFS_ROOT", &m.sys)
        .env_remove("BCD_SERVER")
        .env_remove("BCD_DATA_DIR")
        .env_remove("BCD_CONFIG")
        .stdin(Stdio::null())
        .output()
        .expect("run bcd join");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `joined as <node> (site ...` -> `<node>`.
fn joined_node_id(stdout: &str) -> String {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("joined as "))
        .unwrap_or_else(|| panic!("no `joined as` line in {stdout}"));
    line["joined as ".len()..]
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned()
}

fn provisioned_token(server: &Server, node: &str) -> String {
    let created = server.bcctl_json(&[
        "token",
        "create",
        "--tenant",
        "default",
        "--site",
        "site-1",
        "--role",
        "provisioned",
        "--for-node",
        node,
        "--json",
    ]);
    assert_eq!(created["token"]["role"].as_str(), Some("provisioned"));
    created["secret"].as_str().expect("secret").to_owned()
}

fn assert_refused(server: &Server, m: &Machine, token: &str, node: &str) {
    let (code, stdout, stderr) = bcd_join(
        server,
        m,
        token,
        &["--attestor", "provisioned", "--node-id", node],
    );
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stderr.contains("Join refused (ACCESS_DENIED)"), "{stderr}");
    assert!(!m.data.join("identity.json").exists());
}

fn scenario(db_url: &str) {
    let tmp = tempfile::tempdir().expect("tempdir");
    assert!(bcd_bin().exists());
    let server = start_server(tmp.path(), db_url);

    // The first install joins with the printed token and records its product UUID.
    let first = machine(tmp.path(), "first", UUID);
    let (code, stdout, stderr) = bcd_join(&server, &first, &server.s("token"), &[]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let node = joined_node_id(&stdout);

    // A provisioned token must be bound to one machine, and admit one.
    for (extra, says) in [
        (&[][..], "--for-node NODE or --expect-product-uuid UUID"),
        (
            &["--for-node", node.as_str(), "--uses", "2"][..],
            "uses must be 1",
        ),
        (
            &["--for-node", "node_nobody"][..],
            "--for-node node_nobody: no such node",
        ),
    ] {
        let mut args = vec![
            "token",
            "create",
            "--tenant",
            "default",
            "--site",
            "site-1",
            "--role",
            "provisioned",
        ];
        args.extend_from_slice(extra);
        args.push("--json");
        let out = server.bcctl_output(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(stderr.contains("INVALID_INPUT"), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }

    // The machine is reinstalled: its new system joins with the token the deploy rendered,
    // from a new data directory, as the same node.
    let token = provisioned_token(&server, &node);
    let second = machine(tmp.path(), "second", UUID);
    let (code, stdout, stderr) = bcd_join(
        &server,
        &second,
        &token,
        &["--attestor", "provisioned", "--node-id", &node],
    );
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert_eq!(joined_node_id(&stdout), node, "{stdout}");
    let shown = server.bcctl_json(&["node", "show", &node, "--json"]);
    assert_eq!(shown["node"]["identityGeneration"], 2, "{shown}");
    assert_eq!(shown["node"]["attestor"], "provisioned", "{shown}");
    let certs = shown["certificates"].as_array().expect("certificates");
    assert_eq!(certs.len(), 2, "{shown}");
    for cert in certs {
        let revoked = !cert["revokedAtUs"].is_null();
        assert_eq!(revoked, cert["identityGeneration"] == 1, "{cert}");
    }

    // The same token again, from a third directory: refused, nothing stored.
    let third = machine(tmp.path(), "third", UUID);
    assert_refused(&server, &third, &token, &node);

    // A token minted for the node does not admit another machine.
    let token = provisioned_token(&server, &node);
    let stranger = machine(tmp.path(), "stranger", OTHER_UUID);
    assert_refused(&server, &stranger, &token, &node);
    let shown = server.bcctl_json(&["node", "show", &node, "--json"]);
    assert_eq!(shown["node"]["identityGeneration"], 2, "{shown}");
}

#[test]
fn provisioned_rekey_sqlite() {
    let db = TestDb::sqlite().expect("sqlite test db");
    scenario(db.url());
}

#[tokio::test(flavor = "multi_thread")]
async fn provisioned_rekey_postgres() {
    let db = TestDb::postgres().await.expect("postgres test db");
    let url = db.url().to_owned();
    tokio::task::spawn_blocking(move || scenario(&url))
        .await
        .expect("scenario");
    drop(db);
}
