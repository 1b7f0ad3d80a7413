//! `bcctl serve` with a plaintext PKI bundle while a deployment secret is set (issue 17 item
//! 7): whoever can write `pki.json` would choose every key and the secret would protect
//! nothing, so the real binary refuses to start, exit 1, with a message that says what to do;
//! `--allow-plaintext` (or `BC_ALLOW_PLAINTEXT=true`, or `allow_plaintext = true` in the
//! configuration file) starts it with a warning.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::{bcctl_bin, Proc};

const SECRET: &str = "a-deployment-secret-for-the-plaintext-serve-test";
const REFUSAL: &str = "its private keys are in PLAINTEXT, but a deployment secret is set";
const WARNING: &str = "serving a PLAINTEXT PKI bundle";

fn bcctl(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(bcctl_bin());
    cmd.current_dir(dir).args(args);
    for var in [
        "BC_DEPLOYMENT_SECRET",
        "BC_DEPLOYMENT_SECRET_FILE",
        "BC_ALLOW_PLAINTEXT",
        "BC_PKI_BUNDLE",
        "BC_ROLE",
        "DATABASE_URL",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("BC_LISTEN", "127.0.0.1:0")
        .env("BC_METRICS_LISTEN", "off")
        .env(
            "DATABASE_URL",
            format!("sqlite://{}/events.db", dir.display()),
        )
        .stdin(Stdio::null());
    cmd
}

/// A temporary directory with a plaintext bundle `pki.json`.
fn plaintext_deployment() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = bcctl(
        tmp.path(),
        &[
            "pki",
            "init",
            "--trust-domain",
            "compute.example.com",
            "--out",
            "pki.json",
            "--plaintext",
        ],
    )
    .output()
    .expect("bcctl pki init");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    tmp
}

fn assert_refused(mut cmd: Command, what: &str) {
    let out = cmd.output().expect("bcctl serve");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{what}: {stderr}");
    assert!(stderr.contains(REFUSAL), "{what}: {stderr}");
    assert!(
        stderr.contains("pki.json"),
        "{what}: names the file: {stderr}"
    );
    assert!(
        stderr.contains("--allow-plaintext") && stderr.contains("bcctl pki init"),
        "{what}: says what to do: {stderr}"
    );
}

fn assert_starts_and_warns(cmd: Command, log: &Path, what: &str) {
    let mut serve = Proc::spawn(what, cmd, log.to_path_buf());
    serve.wait_line("listening on", Duration::from_secs(60));
    assert!(
        serve.log_text().contains(WARNING),
        "{what}: {}",
        serve.log_text()
    );
}

#[test]
fn a_plaintext_bundle_is_refused_while_a_secret_is_set() {
    let tmp = plaintext_deployment();
    let dir = tmp.path();
    // The secret in the environment.
    let mut cmd = bcctl(dir, &["serve", "--pki-bundle", "pki.json"]);
    cmd.env("BC_DEPLOYMENT_SECRET", SECRET);
    assert_refused(cmd, "BC_DEPLOYMENT_SECRET");
    // The secret in a file.
    let file = dir.join("deployment-secret");
    std::fs::write(&file, SECRET).expect("secret file");
    let mut cmd = bcctl(dir, &["serve", "--pki-bundle", "pki.json"]);
    cmd.env("BC_DEPLOYMENT_SECRET_FILE", &file);
    assert_refused(cmd, "BC_DEPLOYMENT_SECRET_FILE");
    // Nothing was served: no store was even opened.
    assert!(!dir.join("events.db").exists());
}

#[test]
fn allow_plaintext_starts_it_with_a_warning() {
    let tmp = plaintext_deployment();
    let dir = tmp.path();
    let mut cmd = bcctl(
        dir,
        &["serve", "--pki-bundle", "pki.json", "--allow-plaintext"],
    );
    cmd.env("BC_DEPLOYMENT_SECRET", SECRET);
    assert_starts_and_warns(cmd, &dir.join("flag.log"), "--allow-plaintext");

    let mut cmd = bcctl(dir, &["serve", "--pki-bundle", "pki.json"]);
    cmd.env("BC_DEPLOYMENT_SECRET", SECRET)
        .env("BC_ALLOW_PLAINTEXT", "true");
    assert_starts_and_warns(cmd, &dir.join("env.log"), "BC_ALLOW_PLAINTEXT");

    let config = dir.join("serve.toml");
    std::fs::write(&config, "allow_plaintext = true\n").expect("config");
    let mut cmd = bcctl(dir, &["serve", "--pki-bundle", "pki.json", "--config"]);
    cmd.arg(&config).env("BC_DEPLOYMENT_SECRET", SECRET);
    assert_starts_and_warns(cmd, &dir.join("toml.log"), "allow_plaintext = true");
}

/// Without any secret (a development deployment) a plaintext bundle serves, with the warning.
#[test]
fn without_a_secret_a_plaintext_bundle_serves_with_the_warning() {
    let tmp = plaintext_deployment();
    let dir = tmp.path();
    let cmd = bcctl(dir, &["serve", "--pki-bundle", "pki.json"]);
    assert_starts_and_warns(cmd, &dir.join("dev.log"), "no secret");
}
