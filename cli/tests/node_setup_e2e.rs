//! The `bcctl serve` path on Postgres (issue 22, Must show 1, second half): `node install-script`
//! run by `sh` in a temporary root writes a configuration with which a real `bcd join` joins;
//! `node config --out` writes the same files; reading the bundle without the deployment secret
//! warns that its pins are unauthenticated.

use crate::support;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use events::store::testkit::TestDb;
use support::{bcctl_bin, bcd_bin, Proc};

const SECRET: &str = "a-deployment-secret-for-the-node-setup-test-0123456789";

fn bcctl(args: &[&str], url: &str, pki: &Path, secret: bool) -> Command {
    let mut cmd = Command::new(bcctl_bin());
    cmd.args(args)
        .env("DATABASE_URL", url)
        .env("BC_PKI_BUNDLE", pki)
        .env_remove("BC_DEPLOYMENT_SECRET_FILE");
    if secret {
        cmd.env("BC_DEPLOYMENT_SECRET", SECRET);
    } else {
        cmd.env_remove("BC_DEPLOYMENT_SECRET");
    }
    cmd
}

fn run(mut cmd: Command) -> Output {
    let out = cmd.output().expect("run");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn mode(p: &Path) -> u32 {
    fs::metadata(p).expect("metadata").permissions().mode() & 0o777
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_script_configures_a_node_that_joins_serve_on_postgres() {
    let db = TestDb::postgres().await.expect("postgres");
    let url = db.url().to_string();
    let tmp = tempfile::tempdir().expect("tempdir");
    let t = tmp.path();
    let pki = t.join("pki.json");
    run(bcctl(
        &[
            "pki",
            "init",
            "--trust-domain",
            "setup.test",
            "--out",
            &pki.display().to_string(),
        ],
        &url,
        &pki,
        true,
    ));
    let mut cmd = bcctl(&["serve"], &url, &pki, true);
    cmd.env("BC_LISTEN", "127.0.0.1:0")
        .env("BC_METRICS_LISTEN", "127.0.0.1:0");
    let mut server = Proc::spawn("bcctl serve", cmd, t.join("serve.log"));
    let line = server.wait_line("listening on ", Duration::from_secs(60));
    let gw = line
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned();

    // The script, read with the secret (no warning) and without it (a warning, same script).
    let root = t.join("root");
    let data = root.join("var/lib/bcd");
    let args = [
        "node",
        "install-script",
        "--join-address",
        &gw,
        "--data-dir",
        &data.display().to_string(),
        "--bcd",
        &bcd_bin().display().to_string(),
    ];
    let sealed = run(bcctl(&args, &url, &pki, true));
    assert!(
        sealed.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&sealed.stderr)
    );
    let open = run(bcctl(&args, &url, &pki, false));
    assert!(
        String::from_utf8_lossy(&open.stderr)
            .contains("its pins are unauthenticated: whoever can write that file chose them"),
        "{}",
        String::from_utf8_lossy(&open.stderr)
    );
    assert_eq!(sealed.stdout, open.stdout);
    let script = t.join("install.sh");
    fs::write(&script, &sealed.stdout).expect("write");

    // Run by sh into the temporary root.
    let etc = root.join("etc/bcd");
    let ran = Command::new("sh")
        .arg(&script)
        .env("BCD_ETC", &etc)
        .output()
        .expect("sh");
    assert!(
        ran.status.success(),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let said = String::from_utf8_lossy(&ran.stdout);
    assert!(
        said.contains(&format!(
            "{} join --config {}/config.toml --token-file /path/to/join-token",
            bcd_bin().display(),
            etc.display()
        )),
        "{said}"
    );
    for f in [
        "config.toml",
        "join-encryption.jwk",
        "join-signing.jwk",
        "serving-ca.pem",
    ] {
        assert_eq!(mode(&etc.join(f)), 0o644, "{f}");
    }
    assert_eq!(mode(&data), 0o700);
    let config = fs::read_to_string(etc.join("config.toml")).expect("config");
    assert!(config.contains(&format!("server = \"{gw}\"\n")), "{config}");

    // node config --out writes the same files (but for the header naming the verb).
    let out = t.join("node-config");
    run(bcctl(
        &[
            "node",
            "config",
            "--out",
            &out.display().to_string(),
            "--join-address",
            &gw,
            "--data-dir",
            &data.display().to_string(),
        ],
        &url,
        &pki,
        true,
    ));
    for f in ["join-encryption.jwk", "join-signing.jwk", "serving-ca.pem"] {
        assert_eq!(
            fs::read(out.join(f)).expect("file"),
            fs::read(etc.join(f)).expect("file"),
            "{f}"
        );
    }
    let body = |text: &str| text.lines().skip(1).collect::<Vec<_>>().join("\n");
    assert_eq!(
        body(&fs::read_to_string(out.join("config.toml")).expect("config")),
        body(&config)
    );

    // A token in a file, and a real bcd join with what the script wrote.
    let token = t.join("join-token");
    run(bcctl(
        &["token", "create", "--out", &token.display().to_string()],
        &url,
        &pki,
        false,
    ));
    assert_eq!(mode(&token), 0o600);
    let joined = Command::new(bcd_bin())
        .args(["join", "--config"])
        .arg(etc.join("config.toml"))
        .arg("--token-file")
        .arg(&token)
        .env_remove("BCD_JOIN_TOKEN")
        .env_remove("BCD_DATA_DIR")
        .env_remove("BCD_SERVER")
        .stdin(Stdio::null())
        .output()
        .expect("bcd join");
    let stdout = String::from_utf8_lossy(&joined.stdout);
    assert!(
        joined.status.success() && stdout.starts_with("joined as node_"),
        "{stdout}\n{}\n{}",
        String::from_utf8_lossy(&joined.stderr),
        server.log_text()
    );
    let nodes = run(bcctl(&["node", "list", "--json"], &url, &pki, false));
    let nodes: serde_json::Value = serde_json::from_slice(&nodes.stdout).expect("json");
    assert_eq!(nodes.as_array().map(Vec::len), Some(1));
    assert_eq!(nodes[0]["status"], "active");
    assert!(nodes[0]["spiffeId"]
        .as_str()
        .is_some_and(|s| s.starts_with("spiffe://setup.test/site/site-1/node/node_")));
}
