//! The real `bcctl` binary: `pki init` / `pki show`, `up`, `migrate`, `status`.

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output};

const SECRET: &str = "a-deployment-secret-of-more-than-32-characters";

fn bcctl(dir: &std::path::Path, args: &[&str], secret: Option<&str>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_bcctl"));
    cmd.current_dir(dir)
        .args(args)
        .env_remove("BC_DEPLOYMENT_SECRET")
        .env_remove("BC_DEPLOYMENT_SECRET_FILE");
    if let Some(s) = secret {
        cmd.env("BC_DEPLOYMENT_SECRET", s);
    }
    cmd.output().expect("bcctl runs")
}

/// `bcctl` with the secret only in the file `BC_DEPLOYMENT_SECRET_FILE` names.
fn bcctl_secret_file(dir: &std::path::Path, args: &[&str], file: &std::path::Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bcctl"))
        .current_dir(dir)
        .args(args)
        .env_remove("BC_DEPLOYMENT_SECRET")
        .env("BC_DEPLOYMENT_SECRET_FILE", file)
        .output()
        .expect("bcctl runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).expect("stdout is JSON")
}

#[test]
fn pki_init_needs_the_secret_and_says_which_variable() {
    let dir = tempfile::tempdir().unwrap();
    let out = bcctl(
        dir.path(),
        &["pki", "init", "--trust-domain", "td.test"],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("MISSING_ENV: set BC_DEPLOYMENT_SECRET"),
        "{}",
        stderr(&out)
    );
    let short = bcctl(
        dir.path(),
        &["pki", "init", "--trust-domain", "td.test"],
        Some("too-short"),
    );
    assert_eq!(short.status.code(), Some(1));
    assert!(
        stderr(&short).contains("holds 9 characters"),
        "{}",
        stderr(&short)
    );
    assert!(!dir.path().join(".bcctl/pki.json").exists());
}

#[test]
fn pki_bundle_is_private_never_overwritten_and_authenticated_with_the_secret() {
    let dir = tempfile::tempdir().unwrap();
    let init = bcctl(
        dir.path(),
        &["pki", "init", "--trust-domain", "td.test", "--json"],
        Some(SECRET),
    );
    assert!(init.status.success(), "{}", stderr(&init));
    let created = json(&init);
    assert_eq!(created["sealed"], true);
    let path = dir.path().join(".bcctl/pki.json");
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let before = std::fs::read(&path).unwrap();

    let again = bcctl(
        dir.path(),
        &["pki", "init", "--trust-domain", "td.test"],
        Some(SECRET),
    );
    assert_eq!(again.status.code(), Some(1));
    assert!(
        stderr(&again).contains("never overwritten"),
        "{}",
        stderr(&again)
    );
    assert_eq!(std::fs::read(&path).unwrap(), before);

    let show = bcctl(dir.path(), &["pki", "show", "--json"], Some(SECRET));
    assert!(show.status.success(), "{}", stderr(&show));
    let shown = json(&show);
    assert_eq!(shown["publicAuthenticated"], true);
    assert_eq!(shown["protection"], "sealed");
    assert_eq!(shown["pins"], created["pins"]);
    for (name, pin) in shown["pins"].as_object().unwrap() {
        let pin = pin.as_str().unwrap();
        if name == "sshCaPublicKey" {
            // The SSH CA's public key as OpenSSH writes it (decision 0095), not a SPKI pin.
            assert!(pin.starts_with("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5"), "{pin}");
            continue;
        }
        assert!(
            pin.starts_with("sha256/") && pin.len() == 7 + 44,
            "{name}: {pin}"
        );
    }

    let unauthenticated = bcctl(dir.path(), &["pki", "show", "--json"], None);
    assert!(unauthenticated.status.success());
    assert_eq!(json(&unauthenticated)["publicAuthenticated"], false);

    let wrong = bcctl(
        dir.path(),
        &["pki", "show"],
        Some("another-secret-that-is-long-enough-to-pass"),
    );
    assert_eq!(wrong.status.code(), Some(1));
}

/// `pki show` reads the public half without the secret, but a secret that is set and too short
/// is the same MISSING_ENV error as for `pki init`, not a silent "NOT authenticated".
#[test]
fn pki_show_refuses_a_secret_that_is_set_but_too_short() {
    let dir = tempfile::tempdir().unwrap();
    let init = bcctl(
        dir.path(),
        &["pki", "init", "--trust-domain", "td.test"],
        Some(SECRET),
    );
    assert!(init.status.success(), "{}", stderr(&init));

    for args in [&["pki", "show"][..], &["pki", "show", "--json"][..]] {
        let short = bcctl(dir.path(), args, Some("too-short"));
        assert_eq!(short.status.code(), Some(1), "{args:?}: {}", stderr(&short));
        let message = "MISSING_ENV: BC_DEPLOYMENT_SECRET holds 9 characters; the deployment secret must be at least 32 (e.g. `openssl rand -base64 48`)";
        // Under --json the error is JSON (docs/CLI.md "Errors").
        let expected = if args.contains(&"--json") {
            format!(
                "{}\n",
                serde_json::json!({"error": {"message": message, "exitCode": 1}})
            )
        } else {
            format!("bcctl: {message}\n")
        };
        assert_eq!(stderr(&short), expected, "{args:?}");
        assert!(short.stdout.is_empty(), "{args:?}: pins printed anyway");
    }

    // Unset, or set empty (which counts as unset): the public half, not authenticated.
    for secret in [None, Some("")] {
        let shown = bcctl(dir.path(), &["pki", "show"], secret);
        assert_eq!(
            shown.status.code(),
            Some(0),
            "{secret:?}: {}",
            stderr(&shown)
        );
        let text = String::from_utf8_lossy(&shown.stdout);
        assert!(
            text.contains(
                "public half:    NOT authenticated (set BC_DEPLOYMENT_SECRET to check it)"
            ),
            "{secret:?}: {text}"
        );
    }
}

#[test]
fn pki_bundle_whose_public_half_changed_refuses_to_load() {
    let dir = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    for d in [dir.path(), other.path()] {
        let init = bcctl(
            d,
            &["pki", "init", "--trust-domain", "td.test"],
            Some(SECRET),
        );
        assert!(init.status.success(), "{}", stderr(&init));
    }
    // Swap in another deployment's audit public key: the seal covers every public field.
    let path = dir.path().join(".bcctl/pki.json");
    let mut doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let foreign: serde_json::Value =
        serde_json::from_slice(&std::fs::read(other.path().join(".bcctl/pki.json")).unwrap())
            .unwrap();
    doc["publicKeys"]["auditSigning"] = foreign["publicKeys"]["auditSigning"].clone();
    let tampered = dir.path().join("tampered.json");
    std::fs::write(&tampered, serde_json::to_vec(&doc).unwrap()).unwrap();
    let show = bcctl(
        dir.path(),
        &["pki", "show", "--file", "tampered.json"],
        Some(SECRET),
    );
    assert_eq!(show.status.code(), Some(1), "{}", stderr(&show));
    assert!(stderr(&show).contains("tampered.json"), "{}", stderr(&show));
}

/// Every command finds the secret the same way: `pki init` seals with the secret in the file
/// `BC_DEPLOYMENT_SECRET_FILE` names, `pki show` authenticates with it, and a file holding an
/// unusable secret is an error naming the file, never an unauthenticated read.
#[test]
fn the_secret_file_named_by_the_environment_seals_and_authenticates() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("secret.txt");
    std::fs::write(&file, format!("{SECRET}\n")).unwrap();
    let init = bcctl_secret_file(
        dir.path(),
        &["pki", "init", "--trust-domain", "td.test", "--json"],
        &file,
    );
    assert!(init.status.success(), "{}", stderr(&init));
    assert_eq!(json(&init)["sealed"], true);

    let show = |secret_file: Option<&std::path::Path>| match secret_file {
        Some(f) => bcctl_secret_file(dir.path(), &["pki", "show", "--json"], f),
        None => bcctl(dir.path(), &["pki", "show", "--json"], None),
    };
    let with_file = show(Some(&file));
    assert!(with_file.status.success(), "{}", stderr(&with_file));
    assert_eq!(json(&with_file)["publicAuthenticated"], true);
    let without = show(None);
    assert!(without.status.success(), "{}", stderr(&without));
    assert_eq!(json(&without)["publicAuthenticated"], false);

    let short = dir.path().join("short.txt");
    std::fs::write(&short, "too short").unwrap();
    let refused = show(Some(&short));
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("short.txt"),
        "{}",
        stderr(&refused)
    );
}

/// Kills the serving `bcctl up` when the test ends, however it ends.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn up_creates_the_embedded_deployment_serves_and_prints_how_to_join() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join(".bcctl");
    let mut up = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_bcctl"))
            .current_dir(dir.path())
            .args(["up", "--port", "0", "--json"])
            .env_remove("BC_DEPLOYMENT_SECRET")
            .env_remove("DATABASE_URL")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("bcctl up starts"),
    );
    let stdout = up.0.stdout.take().unwrap();
    let mut line = String::new();
    std::io::BufReader::new(stdout)
        .read_line(&mut line)
        .unwrap();
    let facts: serde_json::Value = serde_json::from_str(&line).expect("one JSON line");
    let token = facts["token"].as_str().expect("a join token");
    assert!(token.starts_with("bcjt_"), "{token}");
    let join = facts["joinCommand"].as_str().expect("the bcd command");
    assert!(join.contains("bcd join --config"), "{join}");
    // The secret and the bundle are private, the directory too; the store exists.
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&work), 0o700);
    assert_eq!(mode(&work.join("pki.json")), 0o600);
    assert_eq!(mode(&work.join("deployment-secret")), 0o600);
    assert!(work.join("events.db").exists());
    // Status on the same store while it serves: migrated, and the token's events are there.
    let url = format!("sqlite://{}", work.join("events.db").display());
    let status = bcctl(
        dir.path(),
        &["status", "--json", "--database-url", &url],
        None,
    );
    assert!(status.status.success(), "{}", stderr(&status));
    let status = json(&status);
    assert_eq!(status["backend"], "sqlite");
    assert!(status["schemaVersion"].as_i64().unwrap() >= 1);
    assert!(status["events"].as_i64().unwrap() >= 1, "{status}");
}

#[tokio::test]
async fn status_on_an_unmigrated_postgres_database_says_how_to_fix_it() {
    let db = events::store::testkit::TestDb::postgres_unmigrated()
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let status = bcctl(dir.path(), &["status", "--database-url", db.url()], None);
    assert_eq!(status.status.code(), Some(1));
    assert!(
        stderr(&status).contains("run `bcctl migrate"),
        "{}",
        stderr(&status)
    );
    let migrate = bcctl(dir.path(), &["migrate", "--database-url", db.url()], None);
    assert!(migrate.status.success(), "{}", stderr(&migrate));
    let status = bcctl(
        dir.path(),
        &["status", "--json", "--database-url", db.url()],
        None,
    );
    assert!(status.status.success(), "{}", stderr(&status));
    assert_eq!(json(&status)["backend"], "postgres");
}
