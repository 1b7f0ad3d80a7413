//! `bcctl --server / --profile` on the client side (cli/src/admin/): direct-store-only verbs
//! refuse the flags with exit 2, the profile's refusals, a server that is not there, the
//! pre-flight refusal of an output that exists, and the `--actor` / `--caller` flags that are
//! gone (the actor comes from the connection, or is the local user in direct mode).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

use crate::support::bcctl_bin;

fn bcctl(dir: &Path, args: &[&str]) -> Output {
    Command::new(bcctl_bin())
        .current_dir(dir)
        .env_remove("DATABASE_URL")
        .env_remove("BCCTL_PROFILE")
        .env_remove("BC_DEPLOYMENT_SECRET")
        .args(args)
        .output()
        .expect("run bcctl")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A profile.toml with a self-signed operator cert (key 0600) and a serving CA.
fn write_profile(dir: &Path, server: Option<&str>) {
    let op = rcgen::generate_simple_self_signed(vec!["operator.example".into()]).expect("cert");
    let ca = rcgen::generate_simple_self_signed(vec!["serving.example".into()]).expect("ca");
    std::fs::write(dir.join("operator.pem"), op.cert.pem()).expect("write");
    let key = dir.join("operator.key");
    std::fs::write(&key, op.signing_key.serialize_pem()).expect("write");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    std::fs::write(dir.join("serving-ca.pem"), ca.cert.pem()).expect("write");
    let server = server
        .map(|s| format!("server = \"{s}\"\n"))
        .unwrap_or_default();
    std::fs::write(
        dir.join("profile.toml"),
        format!("{server}cert = \"operator.pem\"\nkey = \"operator.key\"\nca = \"serving-ca.pem\"\ntrust_domain = \"example.org\"\n"),
    )
    .expect("write");
}

/// A port nothing listens on (bound, then released).
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

#[test]
fn direct_store_only_verbs_refuse_server_with_exit_2() {
    let d = tempfile::tempdir().expect("tempdir");
    for (args, verb) in [
        (&["replay", "--server", "127.0.0.1:1"][..], "replay"),
        (&["rebuild", "--server=127.0.0.1:1"][..], "rebuild"),
        (&["up", "--server", "127.0.0.1:1"][..], "up"),
        (&["serve", "--profile", "p.toml"][..], "serve"),
        (&["doctor", "--server", "127.0.0.1:1"][..], "doctor"),
        (
            &["healthcheck", "--server", "127.0.0.1:1"][..],
            "healthcheck",
        ),
        (&["migrate", "--server", "127.0.0.1:1"][..], "migrate"),
        (
            &["pki", "init", "--out", "x.json", "--server", "127.0.0.1:1"][..],
            "pki init",
        ),
        (
            &[
                "audit",
                "verify",
                "--bundle",
                "e.jsonl",
                "--server",
                "127.0.0.1:1",
            ][..],
            "audit verify",
        ),
        (
            &["batch", "keygen", "--out", "k", "--server", "127.0.0.1:1"][..],
            "batch keygen",
        ),
        (
            &["config", "template", "serve", "--server", "127.0.0.1:1"][..],
            "config template serve",
        ),
    ] {
        let out = bcctl(d.path(), args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert_eq!(
            stderr(&out),
            format!("bcctl: `{verb}` runs only against the store directly (bootstrap and offline work); drop --server\n"),
            "{args:?}"
        );
        assert!(out.stdout.is_empty(), "{args:?}");
    }
    let out = bcctl(d.path(), &["replay", "--server", "127.0.0.1:1", "--json"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        "{\"error\":{\"exitCode\":2,\"message\":\"`replay` runs only against the store directly (bootstrap and offline work); drop --server\"}}\n"
    );
}

#[test]
fn direct_store_only_verbs_say_so_in_their_help() {
    let d = tempfile::tempdir().expect("tempdir");
    for args in [
        &["up", "--help"][..],
        &["pki", "init", "--help"],
        &["rebuild", "--help"],
    ] {
        let out = bcctl(d.path(), args);
        assert!(out.status.success(), "{args:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("Direct-store only: bootstrap and offline work"),
            "{args:?}: {text}"
        );
    }
    let out = bcctl(d.path(), &["token", "create", "--help"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("Direct-store only"), "{text}");
    assert!(
        text.contains("--server <HOST:PORT>") && text.contains("--profile <FILE>"),
        "{text}"
    );
}

#[test]
fn actor_and_caller_flags_are_gone() {
    let d = tempfile::tempdir().expect("tempdir");
    for verb in [
        &["site", "create"][..],
        &["site", "boot", "add"],
        &["site", "boot", "remove"],
        &["site", "lease", "fence"],
        &["join-request", "approve"],
        &["join-request", "reject"],
        &["tpm", "allow"],
        &["tpm", "revoke"],
        &["cloud", "account", "add"],
        &["cloud", "account", "remove"],
    ] {
        let mut args = verb.to_vec();
        args.push("--help");
        let out = bcctl(d.path(), &args);
        assert!(out.status.success(), "{args:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(!text.contains("--actor"), "{args:?}: {text}");
    }
    let out = bcctl(d.path(), &["command", "run", "--help"]);
    assert!(!String::from_utf8_lossy(&out.stdout).contains("--caller"));
    let out = bcctl(
        d.path(),
        &["join-request", "approve", "jr_x", "--actor", "alice"],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).starts_with("error: unexpected argument '--actor' found"),
        "{}",
        stderr(&out)
    );
    let out = bcctl(
        d.path(),
        &[
            "command", "run", "--node", "n", "--kind", "reboot", "--caller", "ops",
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).starts_with("error: unexpected argument '--caller' found"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_missing_profile_and_an_absent_server_exit_1_with_the_way_out() {
    let d = tempfile::tempdir().expect("tempdir");
    // --server alone looks for ./profile.toml.
    let out = bcctl(d.path(), &["token", "list", "--server", "127.0.0.1:1"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        "bcctl: profile profile.toml: no such file (`bcctl pki issue-operator --out DIR` writes DIR/profile.toml; pass --profile FILE or set BCCTL_PROFILE)\n"
    );
    // A profile without a server, and no --server.
    write_profile(d.path(), None);
    let out = bcctl(d.path(), &["token", "list", "--profile", "profile.toml"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        "bcctl: no admin API server: pass --server HOST:PORT or put server = \"host:port\" in the profile profile.toml\n"
    );
    let out = bcctl(d.path(), &["token", "list", "--server", "nowhere"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        "bcctl: --server \"nowhere\": give HOST:PORT (the admin listener, [admin] listen of bcctl serve)\n"
    );
    // Nothing listens there: refused, exit 1 (JSON under --json).
    let port = closed_port();
    let server = format!("127.0.0.1:{port}");
    let out = bcctl(d.path(), &["token", "list", "--server", &server, "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stderr).expect("JSON error");
    assert_eq!(v["error"]["exitCode"], 1);
    let msg = v["error"]["message"].as_str().expect("message");
    assert!(
        msg.starts_with(&format!("admin API {server}: refused: "))
            && msg.ends_with("(is bcctl serve running there with an [admin] listen?)"),
        "{msg}"
    );
    // BCCTL_PROFILE alone never makes a call remote: the verb runs directly (and finds no
    // deployment here).
    let out = Command::new(bcctl_bin())
        .current_dir(d.path())
        .env_remove("DATABASE_URL")
        .env("BCCTL_PROFILE", d.path().join("profile.toml"))
        .args(["token", "list"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).starts_with("bcctl: cannot read the PKI bundle .bcctl/pki.json"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn an_output_that_exists_is_refused_before_the_call() {
    let d = tempfile::tempdir().expect("tempdir");
    write_profile(d.path(), Some(&format!("127.0.0.1:{}", closed_port())));
    std::fs::write(d.path().join("token.txt"), "keep me").expect("write");
    let out = bcctl(
        d.path(),
        &[
            "token",
            "create",
            "--tenant",
            "t",
            "--out",
            "token.txt",
            "--profile",
            "profile.toml",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        "bcctl: token.txt already exists: `token create` never overwrites a file (move it away first)\n"
    );
    assert_eq!(
        std::fs::read_to_string(d.path().join("token.txt")).expect("read"),
        "keep me"
    );
}
