//! The real `bcd` binary: --reset, token input, already joined, malformed pins; doctor's clock
//! against the last signed time, and an expiry judged by this machine's clock (issue 40 item 3,
//! with bcd's test clock `BCD_TEST_CLOCK_OFFSET_MS`).

use crate::common;

use std::fs;
use std::io::{Seek, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::*;
use domain::pki::TokenSecret;

const PIN: &str = "sha256/47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=";

/// A config.toml with the three pins and a server, for data dir `data`.
fn config(dir: &Path, data: &Path) -> std::path::PathBuf {
    let path = dir.join("config.toml");
    fs::write(
        &path,
        format!(
            "server = \"127.0.0.1:1\"\ndata_dir = \"{}\"\nserving_ca_spki_pin = \"{PIN}\"\n\
             join_encryption_key_pin = \"{PIN}\"\njoin_signing_key_pin = \"{PIN}\"\n",
            data.display()
        ),
    )
    .unwrap();
    path
}

fn bcd(cfg: &Path, args: &[&str]) -> Command {
    crate::common::bcd_command(cfg, args)
}

fn run_with_stdin(mut cmd: Command, stdin: &[u8]) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The child may exit before reading it all.
    let _ = child.stdin.take().unwrap().write_all(stdin);
    child.wait_with_output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn token() -> String {
    TokenSecret::generate().unwrap().expose().to_owned()
}

/// Past the token: the join went on to the JoinService keys beside config.toml (absent here).
const NOT_WIRED: &str = "join-encryption.jwk: cannot read it";

#[test]
fn reset_without_yes_prints_and_moves_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let ks = keyset();
    let (dd, _, _) = joined(&data, &ks, "n1");
    dd.write("journal.db", b"journal").unwrap();
    let cfg = config(tmp.path(), &data);
    let before: Vec<_> = fs::read_dir(&data)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    let out = bcd(&cfg, &["join", "--reset"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("identity.json -> identity.json.reset-"),
        "{stdout}"
    );
    assert!(stdout.contains("node.key -> node.key.reset-"), "{stdout}");
    assert!(
        stdout.contains("journal.db -> journal.db.reset-"),
        "{stdout}"
    );
    assert!(!stdout.contains("node.key.next ->"), "{stdout}");
    assert!(stdout.contains("--yes"), "{stdout}");
    let after: Vec<_> = fs::read_dir(&data)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(before.len(), after.len());
    assert!(dd.exists("identity.json") && dd.exists("node.key") && dd.exists("journal.db"));
}

#[test]
fn reset_with_yes_moves_exactly_the_existing_files() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let ks = keyset();
    let (dd, _, _) = joined(&data, &ks, "n1");
    dd.write("journal.db", b"journal").unwrap();
    dd.write("unrelated", b"stays").unwrap();
    let cfg = config(tmp.path(), &data);
    let out = bcd(&cfg, &["join", "--reset", "--yes"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    // The files moved; the join that follows finds no token.
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("no join token"), "{stderr}");
    let mut names: Vec<String> = fs::read_dir(&data)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names.len(), 4, "{names:?}");
    assert!(names.contains(&"unrelated".to_owned()));
    for base in ["identity.json", "journal.db", "node.key"] {
        let moved = names
            .iter()
            .find(|n| n.starts_with(&format!("{base}.reset-")))
            .unwrap_or_else(|| panic!("{base} not moved: {names:?}"));
        let suffix = &moved[base.len() + ".reset-".len()..];
        // YYYYMMDDTHHMMSSZ
        assert_eq!(suffix.len(), 16, "{moved}");
        assert_eq!(&suffix[8..9], "T");
        assert!(suffix.ends_with('Z'));
        assert!(suffix[..8].chars().all(|c| c.is_ascii_digit()));
        assert!(suffix[9..15].chars().all(|c| c.is_ascii_digit()));
    }
    assert_eq!(
        fs::read(data.join(names.iter().find(|n| n.starts_with("journal.db.")).unwrap())).unwrap(),
        b"journal"
    );
    // Nothing loads afterwards.
    let out = bcd(&cfg, &["status"]).output().unwrap();
    assert!(text(&out.stdout).contains("this node has not joined (run bcd join)"));
}

#[test]
fn already_joined_answers_without_reading_a_token() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let ks = keyset();
    joined(&data, &ks, "n1");
    let cfg = config(tmp.path(), &data);
    let stdin_path = tmp.path().join("stdin");
    fs::write(&stdin_path, format!("{}\n", token())).unwrap();
    let stdin = fs::File::open(&stdin_path).unwrap();
    let mut ours = stdin.try_clone().unwrap();
    let out = bcd(&cfg, &["join"])
        .stdin(Stdio::from(stdin))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "already joined as n1 (site eu-1, role node)\n"
    );
    // The shared file offset did not move: standard input was never read.
    assert_eq!(ours.stream_position().unwrap(), 0);
}

#[test]
fn token_from_stdin_first_line_is_accepted() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), &tmp.path().join("data"));
    let out = run_with_stdin(
        bcd(&cfg, &["join"]),
        format!("{}\nmore\n", token()).as_bytes(),
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr.contains(NOT_WIRED), "{stderr}");
}

#[test]
fn token_from_env_is_accepted() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), &tmp.path().join("data"));
    let out = bcd(&cfg, &["join"])
        .env("BCD_JOIN_TOKEN", token())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert!(stderr.contains(NOT_WIRED), "{stderr}");
}

#[test]
fn env_token_is_removed_from_the_environment() {
    use bcd::join::token_input::{read_token, ProcessEnv, TokenSource, TOKEN_ENV};
    let t = token();
    std::env::set_var(TOKEN_ENV, &t);
    let mut stdin = std::io::Cursor::new(Vec::new());
    let got = read_token(None, &mut ProcessEnv, &mut stdin).unwrap();
    assert_eq!(got.secret.expose(), t);
    assert_eq!(got.source, TokenSource::Env);
    assert!(std::env::var_os(TOKEN_ENV).is_none());
}

#[test]
fn stdin_longer_than_4k_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), &tmp.path().join("data"));
    let out = run_with_stdin(bcd(&cfg, &["join"]), &vec![b'a'; 5000]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr.contains("longer than 4 KiB"), "{stderr}");
}

#[test]
fn token_file_mode_is_checked() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), &tmp.path().join("data"));
    let file = tmp.path().join("token");
    fs::write(&file, format!("{}\n", token())).unwrap();
    let file_arg = file.to_str().unwrap();

    fs::set_permissions(&file, fs::Permissions::from_mode(0o644)).unwrap();
    let out = bcd(&cfg, &["join", "--token-file", file_arg])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr.contains("mode 0644"), "{stderr}");
    assert!(stderr.contains("0600 or 0400"), "{stderr}");

    for mode in [0o600, 0o400] {
        fs::set_permissions(&file, fs::Permissions::from_mode(mode)).unwrap();
        let out = bcd(&cfg, &["join", "--token-file", file_arg])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = text(&out.stderr);
        assert!(stderr.contains(NOT_WIRED), "{mode:o}: {stderr}");
        // Not deleted: the join did not succeed.
        assert!(file.exists());
    }

    let big = tmp.path().join("big");
    fs::write(&big, vec![b'a'; 5000]).unwrap();
    fs::set_permissions(&big, fs::Permissions::from_mode(0o600)).unwrap();
    let out = bcd(&cfg, &["join", "--token-file", big.to_str().unwrap()])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(text(&out.stderr).contains("longer than 4 KiB"));

    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(&file, &link).unwrap();
    let out = bcd(&cfg, &["join", "--token-file", link.to_str().unwrap()])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(text(&out.stderr).contains("not a regular file"));
}

#[test]
fn positional_token_is_refused_and_not_echoed() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), &tmp.path().join("data"));
    let t = token();
    for args in [
        vec!["join", t.as_str()],
        vec!["join", "--role", "node", t.as_str()],
        vec!["join", "not-a-token-but-positional"],
    ] {
        let out = bcd(&cfg, &args).stdin(Stdio::null()).output().unwrap();
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("never taken from the command line"),
            "{stderr}"
        );
        for a in &args[1..] {
            if *a != "--role" && *a != "node" {
                assert!(!stderr.contains(a), "{a} echoed: {stderr}");
            }
        }
        assert!(!text(&out.stdout).contains(&t));
    }
    let secret_flag = format!("--token={t}");
    let out = bcd(&cfg, &["join", &secret_flag]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(!text(&out.stderr).contains(&t[5..]));
}

#[test]
fn malformed_pin_stops_bcd_naming_the_key() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("config.toml");
    fs::write(
        &cfg,
        format!(
            "serving_ca_spki_pin = \"{PIN}\"\njoin_encryption_key_pin = \"sha256/short\"\n\
             join_signing_key_pin = \"{PIN}\"\n"
        ),
    )
    .unwrap();
    for args in [
        &["status"][..],
        &["doctor"],
        &["join", "--reset"],
        &["node"],
    ] {
        let out = bcd(&cfg, args).stdin(Stdio::null()).output().unwrap();
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(stderr.contains("join_encryption_key_pin"), "{stderr}");
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn status_and_doctor_on_a_joined_node() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let ks = keyset();
    joined(&data, &ks, "n1");
    let cfg = config(tmp.path(), &data);
    let out = bcd(&cfg, &["status"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).starts_with("joined as n1 (site eu-1, role node)"));
    let out = bcd(&cfg, &["status", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["state"], "ok");
    assert_eq!(v["nodeId"], "n1");
    assert_eq!(v["nodeKey"], "file");
    let out = bcd(&cfg, &["doctor"]).output().unwrap();
    let stdout = text(&out.stdout);
    // No gateway listens at 127.0.0.1:1: the network checks fail with the way back.
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("ok   identity: n1 (site eu-1, role node)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("FAIL gateway: cannot reach the gateway at 127.0.0.1:1"),
        "{stdout}"
    );
    assert!(stdout.contains("check that the gateway runs"), "{stdout}");

    // A mismatched key: status and doctor fail with the way back.
    let dd = bcd::files::DataDir::new(&data);
    dd.write("node.key", bcd::files::key_to_pem(&node_key()).as_bytes())
        .unwrap();
    let out = bcd(&cfg, &["doctor"]).output().unwrap();
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("FAIL identity: the node key does not match the node certificate; join again: bcd join --reset --yes, then bcd join"),
        "{stdout}"
    );
    let out = bcd(&cfg, &["join"]).stdin(Stdio::null()).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("join again: bcd join --reset --yes, then bcd join"));
}

#[test]
fn attestor_usage_errors_and_node_id() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let cfg = config(tmp.path(), &data);
    let run = |args: &[&str]| {
        let out = bcd(&cfg, args).stdin(Stdio::null()).output().unwrap();
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    };
    for (args, says) in [
        (
            &["join", "--attestor", "acme"][..],
            "give --evidence-command CMD",
        ),
        (
            &["join", "--evidence-command", "true"][..],
            "--evidence-command is for another attestor",
        ),
        (
            &["join", "--attestor", "x509pop", "--token-file", "/x"][..],
            "the x509pop attestor takes no token",
        ),
        (
            &["join", "--attestor", "x509pop", "--reset", "--yes"][..],
            "not both",
        ),
        (
            &["join", "--approval-timeout", "0s"][..],
            "--approval-timeout must be more than 0s",
        ),
        (&["join", "--approval-timeout", "1w"][..], "not a duration"),
    ] {
        let (code, _, stderr) = run(args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    // x509pop re-joins from the identity on disk: there is none.
    let (code, _, stderr) = run(&["join", "--attestor", "x509pop"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("this node has not joined"), "{stderr}");

    // A joined machine: the same --node-id is `already joined`, another one is refused.
    let ks = keyset();
    joined(&data, &ks, "n1");
    let (code, stdout, _) = run(&["join", "--node-id", "n1"]);
    assert_eq!(code, Some(0));
    assert_eq!(
        stdout.trim_end(),
        "already joined as n1 (site eu-1, role node)"
    );
    let (code, stdout, stderr) = run(&["join", "--node-id", "n2"]);
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert!(
        stderr.contains("already joined as n1 (site eu-1, role node), not as n2 (--node-id)"),
        "{stderr}"
    );
}

#[test]
fn config_template_prints_the_template_without_reading_a_config() {
    let tmp = tempfile::tempdir().unwrap();
    // A --config that does not exist: the template needs none.
    let out = bcd(&tmp.path().join("missing.toml"), &["config", "template"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), bcd::config::template::TEMPLATE);
    // What it printed is a config.toml bcd loads as is.
    let cfg = tmp.path().join("config.toml");
    fs::write(&cfg, &out.stdout).unwrap();
    let data = tmp.path().join("data");
    let out = bcd(
        &cfg,
        &["--data-dir", data.to_str().unwrap(), "status", "--json"],
    )
    .output()
    .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["state"], "not-joined", "{v}");
}

#[test]
fn a_bad_files_section_stops_bcd_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let cfg = config(tmp.path(), &data);
    let mut text_cfg = fs::read_to_string(&cfg).unwrap();
    text_cfg.push_str("[files]\nkey_mode = 0o604\n");
    fs::write(&cfg, text_cfg).unwrap();
    let out = bcd(&cfg, &["status"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        format!(
            "bcd: {}: [files]: key_mode = 0o604 would let every user read the node key: use \
             0o600, or 0o640 for a group such as nginx's\n",
            cfg.display()
        )
    );
}

#[test]
fn doctor_judges_the_clock_by_the_last_signed_time_and_says_whose_clock_expired_the_certificate() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let ks = keyset();
    let (dd, _, mut stored) = joined(&data, &ks, "n1");
    let cfg = config(tmp.path(), &data);
    // The control plane signed a time ten minutes ahead of this machine's clock (a renewal
    // answer's, say): the clock is at least that far behind.
    let signed = now() + time::Duration::minutes(10);
    stored.observe_server_time(signed);
    dd.write(bcd::files::IDENTITY_FILE, &stored.to_json())
        .unwrap();
    let doctor = |offset_ms: i64| {
        let out = bcd(&cfg, &["doctor"])
            .env("BCD_TEST_CLOCK_OFFSET_MS", offset_ms.to_string())
            .output()
            .unwrap();
        text(&out.stdout)
    };
    let stdout = doctor(0);
    assert!(
        stdout.contains("FAIL local clock: the local clock (")
            && stdout.contains(" s behind the time the control plane signed last (")
            && stdout.contains(
                "renewals and x509pop re-joins are refused past 60 s, and signed commands are \
                 judged at the signed time; fix the clock"
            ),
        "{stdout}"
    );
    // The clock set right (eleven minutes on): nothing behind.
    let stdout = doctor(11 * 60_000);
    assert!(
        stdout.contains("ok   local clock: not behind the time the control plane signed last ("),
        "{stdout}"
    );
    // A clock a day and more ahead takes the certificate for expired: doctor says by whose clock,
    // and what bcd node does about it: here its join signing key (pinned, no join-signing.jwk)
    // does not load, so it does not start until it does; no reset is asked for.
    let stdout = doctor(25 * 3_600_000);
    assert!(
        stdout.contains("FAIL identity: the certificate of n1 (site eu-1, role node) expired at ")
            && stdout.contains(
                " by this machine's clock (bcd doctor's clock checks compare it with the \
                 server's); an expired certificate cannot be renewed; bcd node does not start \
                 until its join signing key loads ("
            )
            && stdout.contains(
                "); once it does, bcd node re-joins by x509pop from the identity on disk by \
                 itself (no token, no reset)\n"
            )
            && !stdout.contains("--reset"),
        "{stdout}"
    );
}

/// `bcd status` on a certificate expired by this machine's clock advises what `bcd node` does
/// (issue 44 item 5): an x509pop re-join by itself when its join signing key loads and the
/// certificate expired within the control plane's default grace; join again when it expired
/// longer ago, or when no join signing key is pinned (bcd node could verify no answer).
#[test]
fn status_on_an_expired_certificate_advises_what_bcd_node_does() {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine as _;
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let ks = keyset();
    joined(&data, &ks, "n1");
    let signing = ks.join_signing.public_key();
    let point = signing.uncompressed_point();
    fs::write(
        tmp.path().join("join-signing.jwk"),
        format!(
            "{{\"kty\":\"EC\",\"crv\":\"P-256\",\"x\":\"{}\",\"y\":\"{}\"}}",
            URL_SAFE_NO_PAD.encode(&point[1..33]),
            URL_SAFE_NO_PAD.encode(&point[33..])
        ),
    )
    .unwrap();
    let pinned = tmp.path().join("config.toml");
    fs::write(
        &pinned,
        format!(
            "server = \"127.0.0.1:1\"\ndata_dir = \"{}\"\nserving_ca_spki_pin = \"{PIN}\"\n\
             join_encryption_key_pin = \"{PIN}\"\njoin_signing_key_pin = \"{}\"\n",
            data.display(),
            signing.pin()
        ),
    )
    .unwrap();
    let unpinned = tmp.path().join("unpinned.toml");
    fs::write(
        &unpinned,
        format!(
            "server = \"127.0.0.1:1\"\ndata_dir = \"{}\"\nserving_ca_spki_pin = \"{PIN}\"\n\
             join_encryption_key_pin = \"{PIN}\"\n",
            data.display()
        ),
    )
    .unwrap();
    let status = |cfg: &Path, offset_hours: i64| {
        let out = bcd(cfg, &["status", "--json"])
            .env(
                "BCD_TEST_CLOCK_OFFSET_MS",
                (offset_hours * 3_600_000).to_string(),
            )
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["state"], "expired", "{v}");
        let text_out = bcd(cfg, &["status"])
            .env(
                "BCD_TEST_CLOCK_OFFSET_MS",
                (offset_hours * 3_600_000).to_string(),
            )
            .output()
            .unwrap();
        assert_eq!(
            text(&text_out.stdout),
            format!("{}\n", v["problem"].as_str().unwrap())
        );
        v
    };
    let expired = |v: &serde_json::Value| {
        format!(
            "the certificate of n1 (site eu-1, role node) expired at {} by this machine's clock \
             (bcd doctor's clock checks compare it with the server's); an expired certificate \
             cannot be renewed",
            v["notAfter"].as_str().unwrap()
        )
    };
    // Expired an hour ago, the join signing key loads: bcd node re-joins by itself.
    let v = status(&pinned, 25);
    assert_eq!(v["recovery"], "x509pop");
    assert_eq!(
        v["problem"],
        format!(
            "{}; bcd node re-joins by x509pop from the identity on disk by itself (no token, no \
             reset): a running bcd node does it now, a stopped one when it starts (systemctl \
             start bcd)",
            expired(&v)
        )
    );
    // Expired eight days ago: past the control plane's default grace.
    let v = status(&pinned, 9 * 24);
    assert_eq!(v["recovery"], "join");
    assert_eq!(
        v["problem"],
        format!(
            "{}; bcd node tries to re-join by x509pop, but the certificate expired more than the \
             control plane's default grace (7 days) ago, so the re-join is refused \
             (x509pop:expired-beyond-grace) unless its [attestors.x509pop] grace was raised; \
             join again: bcd join --reset --yes, then bcd join",
            expired(&v)
        )
    );
    // No join signing key pinned: bcd node stops with the way back, and so does status.
    let v = status(&unpinned, 25);
    assert_eq!(v["recovery"], "join");
    assert_eq!(
        v["problem"],
        format!(
            "{}, and bcd node cannot re-join by x509pop: join_signing_key_pin is not set, so no \
             answer could be verified; join again: bcd join --reset --yes, then bcd join",
            expired(&v)
        )
    );
}
