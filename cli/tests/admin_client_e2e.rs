//! `bcctl <verb> --profile FILE` against a real `bcctl up` (SQLite): the operator's directory
//! holds only profile.toml, its certificate and key and the serving CA (as `pki issue-operator`
//! lays them out; issued here from the deployment's operator CA), the environment is cleared of
//! every deployment variable, and the verb's file lands on the caller's side with its mode,
//! never in the server's directory; JSON over the API is the direct run's; a verb's exit 2 is
//! the caller's exit 2; a refusal names the role.
//!
//! Run: `cargo test -p cli --test suite admin_client_e2e::`.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use base64::Engine;
use domain::operator::{OperatorName, OperatorRole};
use domain::pki::{
    issue_operator_certificate, open_bundle, DeploymentSecret, KeyRole, KeySet, PrivateKey,
};

use crate::support::{bcctl_bin, Proc};

fn pem(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(chunk).expect("ascii"));
        out.push('\n');
    }
    out + &format!("-----END {label}-----\n")
}

struct Up {
    _proc: Proc,
    dir: tempfile::TempDir,
    deployment: PathBuf,
    admin: String,
}

fn up() -> Up {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("serve.toml");
    std::fs::write(&cfg, "[admin]\n").expect("config");
    let deployment = dir.path().join(".bcctl");
    let log = dir.path().join("bcctl.log");
    let child = Command::new(bcctl_bin())
        .current_dir(dir.path())
        .args(["up", "--port", "0", "--json", "--dir"])
        .arg(&deployment)
        .arg("--config")
        .arg(&cfg)
        .env_remove("BC_DEPLOYMENT_SECRET")
        .env_remove("DATABASE_URL")
        .env_remove("BC_ADMIN_LISTEN")
        .env("BC_METRICS_LISTEN", "off")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(std::fs::File::create(&log).expect("log")))
        .spawn()
        .expect("spawn bcctl up");
    let mut proc = Proc {
        name: "bcctl up".into(),
        child,
        log,
    };
    let facts = proc.first_json_line(Duration::from_secs(120));
    let admin = facts["adminListen"]
        .as_str()
        .unwrap_or_else(|| panic!("adminListen in {facts}"))
        .to_string();
    Up {
        _proc: proc,
        dir,
        deployment,
        admin,
    }
}

impl Up {
    fn keys(&self) -> KeySet {
        let secret = std::fs::read_to_string(self.deployment.join("deployment-secret"))
            .expect("deployment-secret");
        let secret = DeploymentSecret::new(secret.trim()).expect("secret");
        let bytes = std::fs::read(self.deployment.join("pki.json")).expect("pki.json");
        open_bundle(&bytes, Some(&secret))
            .expect("bundle")
            .keys
            .expect("keys")
    }

    fn direct(&self, args: &[&str]) -> Output {
        Command::new(bcctl_bin())
            .current_dir(self.dir.path())
            .args(args)
            .arg("--dir")
            .arg(&self.deployment)
            .env_remove("BC_DEPLOYMENT_SECRET")
            .env_remove("DATABASE_URL")
            .output()
            .expect("run bcctl")
    }

    /// The operator's own directory: profile.toml, operator.pem/.key, serving-ca.pem.
    fn operator_dir(&self, keys: &KeySet, name: &str, role: OperatorRole) -> tempfile::TempDir {
        let ca = keys.operator_ca.as_ref().expect("an operator CA");
        let key = PrivateKey::generate(KeyRole::Node).expect("key");
        let issued = issue_operator_certificate(
            ca,
            &OperatorName::new(name).expect("name"),
            role,
            key.public_key(),
            time::Duration::days(1),
            time::OffsetDateTime::now_utc(),
        )
        .expect("operator certificate");
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path();
        std::fs::write(
            p.join("operator.pem"),
            pem("CERTIFICATE", &issued.der) + &pem("CERTIFICATE", ca.cert_der()),
        )
        .expect("write");
        std::fs::write(p.join("operator.key"), pem("PRIVATE KEY", key.pkcs8_der())).expect("key");
        std::fs::set_permissions(
            p.join("operator.key"),
            std::fs::Permissions::from_mode(0o600),
        )
        .expect("chmod");
        std::fs::write(
            p.join("serving-ca.pem"),
            pem("CERTIFICATE", keys.serving_ca.cert_der()),
        )
        .expect("write");
        std::fs::write(
            p.join("profile.toml"),
            format!(
                "server = \"{}\"\ncert = \"operator.pem\"\nkey = \"operator.key\"\nca = \"serving-ca.pem\"\ntrust_domain = \"{}\"\n",
                self.admin, keys.trust_domain
            ),
        )
        .expect("write");
        dir
    }
}

/// `bcctl args` from `dir` with an environment holding only PATH and HOME.
fn remote(dir: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(bcctl_bin());
    cmd.current_dir(dir).env_clear().args(args);
    for var in ["PATH", "HOME"] {
        if let Some(v) = std::env::var_os(var) {
            cmd.env(var, v);
        }
    }
    cmd.output().expect("run bcctl")
}

#[test]
fn verbs_over_the_admin_api_write_the_callers_files_and_keep_their_exit_codes() {
    let up = up();
    let keys = up.keys();
    let ops = up.operator_dir(&keys, "olive", OperatorRole::Operator);
    let o = ops.path();

    // token create --out FILE: the file is the caller's (0600), not the server's.
    let out = remote(
        o,
        &[
            "token",
            "create",
            "--out",
            "join-token",
            "--json",
            "--profile",
            "profile.toml",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let made: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(made["tokenFile"], "join-token", "{made}");
    let file = o.join("join-token");
    let mode = std::fs::metadata(&file)
        .expect("written here")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    assert!(
        !up.dir.path().join("join-token").exists(),
        "written on the server's side"
    );
    // Written once: a second run is refused before the call.
    let again = remote(
        o,
        &[
            "token",
            "create",
            "--out",
            "join-token",
            "--server",
            &up.admin,
            "--profile",
            "profile.toml",
        ],
    );
    assert_eq!(again.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&again.stderr),
        "bcctl: join-token already exists: `token create` never overwrites a file (move it away first)\n"
    );

    // --server alone finds ./profile.toml; the JSON is the direct run's, byte for byte.
    let listed = remote(o, &["token", "list", "--json", "--server", &up.admin]);
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    let direct = up.direct(&["token", "list", "--json"]);
    assert!(direct.status.success());
    assert_eq!(
        String::from_utf8_lossy(&listed.stdout),
        String::from_utf8_lossy(&direct.stdout)
    );

    // A verb's own usage error: exit 2 locally, its message as a direct run prints it.
    let bad = [
        "site",
        "boot",
        "add",
        "--site",
        "s1",
        "--mac",
        "aa:bb:cc:dd:ee:ff",
        "--kernel",
        "k",
        "--initrd",
        "i",
        "--expires-in",
        "soon",
    ];
    let mut args = bad.to_vec();
    args.extend(["--profile", "profile.toml"]);
    let over = remote(o, &args);
    let here = up.direct(&bad);
    assert_eq!(
        over.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&over.stderr)
    );
    assert_eq!(here.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&over.stderr),
        String::from_utf8_lossy(&here.stderr)
    );

    // The role table's refusal: exit 1, the server's message.
    let auditor = up.operator_dir(&keys, "carol", OperatorRole::Auditor);
    let denied = remote(
        auditor.path(),
        &["token", "create", "--profile", "profile.toml"],
    );
    assert_eq!(denied.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&denied.stderr),
        format!(
            "bcctl: permission denied: token create needs the operator role; spiffe://{}/operator/carol is auditor\n",
            keys.trust_domain
        )
    );
}
