//! The output and exit-code convention of docs/CLI.md, checked over every verb `bcctl --help`
//! lists (a new verb is covered, or the test names it): `--help` exits 0; a bogus flag exits 2
//! and, under `--json`, standard error is one JSON object `{"error":{"message","exitCode":2}}`;
//! on a deployment made by `bcctl up --port 0`, found as `./.bcctl` with no flag, every read
//! verb's `--json` output parses and every object key is camelCase; a verb's own invalid input
//! exits 2; a store that cannot be reached fails at once naming the host and the error.

use crate::support;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Runs `bcctl args` in `dir` with none of the variables that name a deployment, so the verb
/// finds it by the rule alone (`./.bcctl`).
fn bcctl(dir: &Path, args: &[&str]) -> Output {
    Command::new(support::bcctl_bin())
        .current_dir(dir)
        .env_remove("DATABASE_URL")
        .env_remove("BC_PKI_BUNDLE")
        .env_remove("BC_DEPLOYMENT_SECRET")
        .env_remove("BC_DEPLOYMENT_SECRET_FILE")
        .env_remove("BC_AUDIT_PIN")
        .args(args)
        .output()
        .expect("run bcctl")
}

/// The subcommand names of a `--help` text's `Commands:` section (without `help`).
pub fn commands_of(help: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut inside = false;
    for line in help.lines() {
        if line.trim_end() == "Commands:" {
            inside = true;
            continue;
        }
        if !inside {
            continue;
        }
        if line.trim().is_empty() || !line.starts_with(' ') {
            break;
        }
        // A command's line is indented by two; a wrapped description by more.
        let Some(rest) = line.strip_prefix("  ") else {
            continue;
        };
        if rest.starts_with(' ') {
            continue;
        }
        let name = rest.split_whitespace().next().unwrap_or("");
        if name != "help" && !name.is_empty() {
            names.push(name.to_string());
        }
    }
    names
}

/// Every leaf verb of `bcctl`, as its words (`["site", "boot", "list"]`).
fn leaf_verbs(dir: &Path) -> Vec<Vec<String>> {
    let mut leaves = Vec::new();
    let mut todo: Vec<Vec<String>> = vec![Vec::new()];
    while let Some(path) = todo.pop() {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let out = bcctl(dir, &args);
        assert_eq!(out.status.code(), Some(0), "bcctl {args:?} must exit 0");
        let subs = commands_of(&String::from_utf8_lossy(&out.stdout));
        if subs.is_empty() {
            leaves.push(path);
        } else {
            for s in subs {
                let mut p = path.clone();
                p.push(s);
                todo.push(p);
            }
        }
    }
    leaves.sort();
    leaves
}

/// What a verb run with `--json` must do.
#[derive(Clone, Copy, Debug)]
enum Expect {
    /// Exit 0, standard output one JSON document.
    Json,
    /// Exit with this code, standard error one JSON error with it.
    Fails(i32),
    /// Exit 0, nothing on standard output (the result went to a file).
    Quiet,
    /// Exit 0, standard output one JSON document of a documented file format (the inclusion
    /// proof, docs/AUDIT.md), whose keys are the format's, not the CLI's (docs/CLI.md).
    FileFormat,
    /// Exit 0, standard output one JSON document whose `discovery` and `jwks` hold the OIDC
    /// documents as the gateway serves them (their keys are OIDC's: `jwks_uri`, ...), every
    /// other key camelCase (`oidc discovery`, docs/WORKLOAD-IDENTITY.md).
    OidcDocuments,
}

/// The read verbs (and the writes safe to repeat) run with `--json` on the deployment, in
/// order: `{work}` is the test's directory. A verb in neither this table nor [`NOT_RUN`] fails
/// the test: add it here.
const RUN: &[(&str, &[&str], Expect)] = &[
    ("status", &[], Expect::Json),
    ("migrate", &[], Expect::Json),
    ("pki show", &[], Expect::Json),
    ("pki trust-version", &[], Expect::Json),
    (
        "token create",
        &["--tenant", "default", "--site", "site-1"],
        Expect::Json,
    ),
    ("token list", &[], Expect::Json),
    ("node list", &[], Expect::Json),
    ("node show", &["nd_missing"], Expect::Fails(1)),
    ("node names show", &["nd_missing"], Expect::Fails(1)),
    (
        "node names add",
        &["nd_missing", "--dns", "a.example.com"],
        Expect::Fails(1),
    ),
    (
        "node names set",
        &["nd_missing", "--dns", "Bad.Example.com"],
        Expect::Fails(2),
    ),
    (
        "node names remove",
        &["nd_missing", "--ip", "10.0.0.1"],
        Expect::Fails(1),
    ),
    ("pool create", &["--tenant", "default", "p1"], Expect::Json),
    ("pool show", &["p1"], Expect::Json),
    ("pool list", &[], Expect::Json),
    (
        "site create",
        &["--id", "s1", "--tenant", "default"],
        Expect::Json,
    ),
    ("site list", &[], Expect::Json),
    ("site show", &["s1"], Expect::Json),
    ("site boot list", &["--site", "s1"], Expect::Json),
    ("tpm list", &[], Expect::Json),
    (
        "attestor entry list",
        &["--list", "tpm-allow"],
        Expect::Json,
    ),
    ("operator list", &[], Expect::Json),
    (
        "ssh ca",
        &["--known-hosts", "--trusted-user-ca"],
        Expect::Json,
    ),
    ("ssh list", &[], Expect::Json),
    ("ssh krl", &["--out", "{work}/revoked.krl"], Expect::Json),
    ("ssh revoke", &["12345"], Expect::Fails(1)),
    ("oidc keys list", &[], Expect::Json),
    ("oidc keys promote", &["no-such-key"], Expect::Fails(1)),
    ("oidc keys retire", &["no-such-key"], Expect::Fails(1)),
    (
        "oidc discovery",
        &["--issuer", "https://id.example.com"],
        Expect::OidcDocuments,
    ),
    ("join-request list", &[], Expect::Json),
    ("join-request show", &["jr_missing"], Expect::Fails(1)),
    ("cloud account list", &[], Expect::Json),
    ("command list", &[], Expect::Json),
    (
        "command show",
        &["cmd_00000000000000000000000000000000"],
        Expect::Fails(1),
    ),
    (
        "batch show",
        &[
            "--batch",
            "0000000000000000000000000000000000000000000000000000000000000000",
        ],
        Expect::Fails(1),
    ),
    ("batch list", &[], Expect::Json),
    (
        "batch scope",
        &[
            "--batch",
            "0000000000000000000000000000000000000000000000000000000000000000",
        ],
        Expect::Fails(1),
    ),
    ("operator list", &[], Expect::Json),
    (
        "tenant create",
        &["acme", "--description", "a tenant"],
        Expect::Json,
    ),
    ("tenant show", &["acme"], Expect::Json),
    ("tenant delete", &["acme"], Expect::Json),
    ("audit seal", &["--all"], Expect::Json),
    // The seal's own event is a leaf after its checkpoint: the tail is unsealed.
    (
        "audit verify",
        &["--tenant", "default", "--allow-unsealed"],
        Expect::Json,
    ),
    (
        "audit export",
        &["--tenant", "default", "--out", "{work}/export.jsonl"],
        Expect::Json,
    ),
    (
        "audit verify",
        &["--bundle", "{work}/export.jsonl"],
        Expect::Json,
    ),
    (
        "audit prove",
        &[
            "--tenant",
            "default",
            "--position",
            "2",
            "--out",
            "{work}/proof.json",
        ],
        Expect::Quiet,
    ),
    (
        "audit prove",
        &["--tenant", "default", "--position", "2", "--out", "-"],
        Expect::FileFormat,
    ),
    ("audit verify-proof", &["{work}/proof.json"], Expect::Json),
    ("replay", &["--at", "0"], Expect::Json),
    ("rebuild", &[], Expect::Json),
];

/// Verbs of other helpers of issue 22 (they exist once merged): run like [`RUN`] when the
/// binary has them, reported (not failed) when it has not yet. The lead moves them to `RUN`.
const PENDING: &[(&str, &[&str], Expect)] = &[
    ("bundle show", &[], Expect::Json),
    ("events list", &[], Expect::Json),
    ("events show", &["1"], Expect::Json),
    ("tenant list", &[], Expect::Json),
    (
        "node config",
        &["--out", "{work}/node-config"],
        Expect::Json,
    ),
    ("node install-script", &[], Expect::Json),
    ("config template serve", &[], Expect::Json),
    ("doctor", &[], Expect::Json),
];

/// Verbs not run here: they serve, create a deployment, or change it in ways the table above
/// cannot repeat without fixtures of their own (their own tests run them). Each still has its
/// `--help` and bogus-flag check.
const NOT_RUN: &[&str] = &[
    // A key added and not promoted is a doctor warning (oidc.no-signing-key); oidc_e2e runs it.
    "oidc keys add",
    // The deployment's bundle has its SSH CA already (refused); ssh_e2e runs it on an older one.
    "pki add-ssh-ca",
    // Needs an active node and a public key; ssh_e2e runs it.
    "ssh issue",
    "up",
    "serve",
    "pki init",
    "pki issue-internal",
    "pki rotate-command-root",
    "pki renew-ca",
    "pki reseal",
    "pki issue-gateway",
    "pki add-operator-ca",
    "pki issue-operator",
    "pki crl",
    "operator revoke",
    "batch keygen",
    "batch create",
    "batch approve",
    "batch sign-approvers",
    "batch cancel",
    "batch submit-approval",
    "pki add-operator-ca",
    "pki issue-operator",
    "operator revoke",
    "command run",
    "token revoke",
    "node revoke",
    "node delete",
    "node retire",
    "pool update",
    "join-request approve",
    "join-request reject",
    "tpm allow",
    "tpm revoke",
    "attestor entry add",
    "attestor entry remove",
    "site boot add",
    "site boot remove",
    "site lease fence",
    "cloud account add",
    "cloud account remove",
    "healthcheck",
];

/// Verbs that print nothing a script reads, so they need no `--json`.
const NO_JSON: &[&str] = &["serve"];

/// Object keys that are data, not field names (docs/CLI.md "Data maps"): the children of a key
/// named here may be spelled as the data is.
const DATA_MAPS: &[&str] = &["kinds", "labels", "tables"];

fn is_camel(key: &str) -> bool {
    let mut chars = key.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase()) && chars.all(|c| c.is_ascii_alphanumeric())
}

/// Every key of every object in `v` that is not camelCase, as `path.key`.
fn bad_keys(v: &Value, path: &str, out: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                let here = format!("{path}.{k}");
                if !is_camel(k) {
                    out.push(here.clone());
                }
                if DATA_MAPS.contains(&k.as_str()) {
                    if let Value::Object(data) = child {
                        for inner in data.values() {
                            bad_keys(inner, &here, out);
                        }
                        continue;
                    }
                }
                bad_keys(child, &here, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|i| bad_keys(i, path, out)),
        _ => {}
    }
}

/// Standard error holds exactly one JSON error with `code`.
fn assert_json_error(out: &Output, code: i32, what: &str) -> String {
    assert_eq!(out.status.code(), Some(code), "{what}: exit code; {out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{what}: one line on stderr, got {err:?}");
    let v: Value = serde_json::from_str(lines[0])
        .unwrap_or_else(|e| panic!("{what}: stderr is not JSON ({e}): {err:?}"));
    assert_eq!(v["error"]["exitCode"], code, "{what}: {v}");
    let message = v["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("{what}: error.message is a string: {v}"));
    assert!(!message.is_empty(), "{what}: an empty message");
    message.to_string()
}

#[test]
fn every_verb_has_help_and_a_bogus_flag_is_a_json_usage_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let verbs = leaf_verbs(dir.path());
    assert!(verbs.len() > 40, "too few verbs parsed: {verbs:?}");
    for verb in &verbs {
        let name = verb.join(" ");
        let mut args: Vec<&str> = verb.iter().map(String::as_str).collect();
        args.push("--help");
        let help = bcctl(dir.path(), &args);
        assert_eq!(help.status.code(), Some(0), "bcctl {name} --help");
        let text = String::from_utf8_lossy(&help.stdout);
        if !NO_JSON.contains(&name.as_str()) {
            assert!(text.contains("--json"), "bcctl {name} has no --json");
        }
        args.pop();
        args.extend(["--no-such-flag-at-all", "--json"]);
        let out = bcctl(dir.path(), &args);
        let message = assert_json_error(&out, 2, &format!("bcctl {name} --no-such-flag-at-all"));
        assert!(
            message.contains("--no-such-flag-at-all"),
            "bcctl {name}: the message names the flag: {message}"
        );
        assert!(out.stdout.is_empty(), "bcctl {name}: nothing on stdout");
        // Without --json the same error is text, still exit 2.
        args.pop();
        let out = bcctl(dir.path(), &args);
        assert_eq!(out.status.code(), Some(2), "bcctl {name} bogus flag, text");
    }
}

/// `bcctl up --port 0 --json` in `work`, its facts once it serves.
fn up(work: &Path) -> (support::Proc, Value) {
    let mut cmd = Command::new(support::bcctl_bin());
    cmd.args(["up", "--port", "0", "--json"])
        .current_dir(work)
        .env_remove("DATABASE_URL")
        .env_remove("BC_DEPLOYMENT_SECRET")
        .env_remove("BC_DEPLOYMENT_SECRET_FILE")
        .env_remove("BC_PKI_BUNDLE")
        .env("BC_METRICS_LISTEN", "off");
    let mut proc = support::Proc::spawn("bcctl up", cmd, work.join("up.log"));
    proc.wait_line("{\"address\"", Duration::from_secs(60));
    let text = proc.log_text();
    let line = text
        .lines()
        .find(|l| l.starts_with("{\"address\""))
        .expect("the facts line");
    (
        proc,
        serde_json::from_str(line).expect("up's facts are JSON"),
    )
}

fn run_table(
    work: &Path,
    table: &[(&str, &[&str], Expect)],
    verbs: &BTreeSet<String>,
    ran: &mut BTreeSet<String>,
    missing: &mut Vec<String>,
) {
    let work_text = work.display().to_string();
    for (verb, extra, expect) in table {
        if !verbs.contains(*verb) {
            missing.push(verb.to_string());
            continue;
        }
        ran.insert(verb.to_string());
        let mut args: Vec<String> = verb.split(' ').map(str::to_string).collect();
        args.extend(extra.iter().map(|a| a.replace("{work}", &work_text)));
        args.push("--json".into());
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = bcctl(work, &argv);
        let what = format!("bcctl {}", args.join(" "));
        match expect {
            Expect::Json => {
                assert_eq!(
                    out.status.code(),
                    Some(0),
                    "{what}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
                    panic!(
                        "{what}: stdout is not one JSON document ({e}): {:?}",
                        String::from_utf8_lossy(&out.stdout)
                    )
                });
                let mut bad = Vec::new();
                bad_keys(&v, "", &mut bad);
                assert!(bad.is_empty(), "{what}: keys not camelCase: {bad:?}\n{v}");
            }
            Expect::FileFormat => {
                assert_eq!(
                    out.status.code(),
                    Some(0),
                    "{what}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                let v: Value = serde_json::from_slice(&out.stdout)
                    .unwrap_or_else(|e| panic!("{what}: stdout is not JSON ({e})"));
                assert_eq!(v["format"], "bc-audit-inclusion-proof", "{what}");
            }
            Expect::OidcDocuments => {
                assert_eq!(out.status.code(), Some(0), "{what}");
                let mut v: Value = serde_json::from_slice(&out.stdout)
                    .unwrap_or_else(|e| panic!("{what}: stdout is not JSON ({e})"));
                assert!(v["discovery"]["jwks_uri"].is_string(), "{what}: {v}");
                assert!(v["jwks"]["keys"].is_array(), "{what}: {v}");
                if let Some(o) = v.as_object_mut() {
                    o.remove("discovery");
                    o.remove("jwks");
                }
                let mut bad = Vec::new();
                bad_keys(&v, "", &mut bad);
                assert!(bad.is_empty(), "{what}: keys not camelCase: {bad:?}\n{v}");
            }
            Expect::Quiet => {
                assert_eq!(
                    out.status.code(),
                    Some(0),
                    "{what}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                assert!(out.stdout.is_empty(), "{what}: nothing on stdout");
            }
            Expect::Fails(code) => {
                assert_json_error(&out, *code, &what);
                assert!(out.stdout.is_empty(), "{what}: nothing on stdout");
            }
        }
    }
}

#[test]
fn every_read_verb_prints_camel_case_json_on_a_fresh_deployment() {
    let dir = tempfile::tempdir().expect("tempdir");
    let work = dir.path();
    let (_server, facts) = up(work);
    for key in facts.as_object().expect("facts").keys() {
        assert!(is_camel(key), "bcctl up --json: key {key}");
    }
    let verbs: BTreeSet<String> = leaf_verbs(work).iter().map(|v| v.join(" ")).collect();
    let mut ran = BTreeSet::new();
    let mut missing = Vec::new();
    run_table(work, RUN, &verbs, &mut ran, &mut missing);
    assert!(
        missing.is_empty(),
        "verbs in RUN that bcctl lacks: {missing:?}"
    );
    let mut pending = Vec::new();
    run_table(work, PENDING, &verbs, &mut ran, &mut pending);
    if !pending.is_empty() {
        eprintln!("note: verbs of issue 22 not in this build yet (run once merged): {pending:?}");
    }
    let unknown: Vec<&String> = verbs
        .iter()
        .filter(|v| !ran.contains(*v) && !NOT_RUN.contains(&v.as_str()))
        .collect();
    assert!(
        unknown.is_empty(),
        "verbs neither run nor listed in NOT_RUN (add each to RUN in cli/tests/cli_convention.rs with its arguments): {unknown:?}"
    );
}

#[test]
fn a_verbs_own_invalid_input_exits_2_with_a_json_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let work = dir.path();
    let db = work.join("events.db");
    let url = format!("sqlite://{}", db.display());
    let migrated = bcctl(work, &["migrate", "--database-url", &url]);
    assert_eq!(migrated.status.code(), Some(0), "{migrated:?}");
    let cases: &[&[&str]] = &[
        &["replay", "--at", "banana"],
        &["rebuild", "--batch", "0"],
        &["batch", "show", "--batch", "not-hex"],
        &["command", "show", "not-a-command-id"],
        &["command", "list", "--status", "sleeping"],
        &["audit", "verify", "--tenant", "t", "--pin", "not-a-pin"],
    ];
    for case in cases {
        let mut args: Vec<&str> = case.to_vec();
        args.extend(["--database-url", &url, "--pki", "/nonexistent/pki.json"]);
        args.push("--json");
        let out = bcctl(work, &args);
        assert_json_error(&out, 2, &format!("bcctl {}", case.join(" ")));
    }
    let out = bcctl(
        work,
        &["replay", "--at", "banana", "--database-url", &url, "--json"],
    );
    let message = assert_json_error(&out, 2, "replay --at banana");
    assert_eq!(message, "INVALID_INPUT: --at \"banana\": expected a log position (an integer ≥ 0) or an RFC 3339 time such as 2026-01-01T00:00:00Z");
}

#[test]
fn a_mistyped_sqlite_path_is_an_error_and_creates_no_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let work = dir.path();
    let path = work.join("evnets.db");
    let url = format!("sqlite://{}", path.display());
    for verb in [
        &["status"][..],
        &["pool", "list"],
        &[
            "audit",
            "verify",
            "--tenant",
            "t",
            "--pin",
            "sha256/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
        ],
        &["replay", "--at", "0"],
    ] {
        let mut args = verb.to_vec();
        args.extend(["--database-url", &url, "--json"]);
        let out = bcctl(work, &args);
        let message = assert_json_error(&out, 1, &format!("bcctl {verb:?}"));
        assert!(
            message.contains(&format!(
                "no store at {}: the SQLite file does not exist",
                path.display()
            )),
            "{verb:?}: {message}"
        );
        assert!(!path.exists(), "{verb:?} created {}", path.display());
    }
}

#[test]
fn an_unreachable_postgres_fails_at_once_naming_the_host_and_the_refusal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let started = Instant::now();
    let out = bcctl(
        dir.path(),
        &[
            "status",
            "--database-url",
            "postgres://postgres:hunter2@127.0.0.1:1/x",
            "--json",
        ],
    );
    let took = started.elapsed();
    let message = assert_json_error(&out, 1, "status on 127.0.0.1:1");
    assert!(message.contains("127.0.0.1:1"), "{message}");
    assert!(message.to_lowercase().contains("refused"), "{message}");
    assert!(
        !message.contains("hunter2"),
        "the password is never shown: {message}"
    );
    assert!(!message.contains("timed out"), "{message}");
    // A bound, not a speed figure: the pool used to retry for 30 s before saying "timed out".
    assert!(took < Duration::from_secs(10), "took {took:?}");
}

#[test]
fn the_help_parser_reads_wrapped_descriptions() {
    let help = "Usage: x\n\nCommands:\n  up    The main job: create\n        wrapped text\n  status  Print\n  help  Print this\n\nOptions:\n  -h\n";
    assert_eq!(
        commands_of(help),
        vec!["up".to_string(), "status".to_string()]
    );
}

#[test]
fn a_sqlite_store_that_cannot_be_created_names_its_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("no-such-dir").join("events.db");
    let url = format!("sqlite://{}", path.display());
    let out = bcctl(dir.path(), &["migrate", "--database-url", &url, "--json"]);
    let message = assert_json_error(&out, 1, "migrate into a missing directory");
    assert_eq!(
        message,
        format!(
            "cannot open the SQLite store {}: error returned from database: (code: 14) unable to open database file; check that its directory exists and that this user may read and write there",
            path.display()
        )
    );
}

#[test]
fn audit_seal_without_the_secret_names_where_it_looked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let work = dir.path();
    let bundle = work.join("pki.json");
    let init = Command::new(support::bcctl_bin())
        .current_dir(work)
        .env(
            "BC_DEPLOYMENT_SECRET",
            "a-deployment-secret-of-more-than-32-characters",
        )
        .args(["pki", "init", "--trust-domain", "td.test", "--out"])
        .arg(&bundle)
        .output()
        .expect("pki init");
    assert_eq!(init.status.code(), Some(0), "{init:?}");
    let url = format!("sqlite://{}", work.join("events.db").display());
    let migrated = bcctl(work, &["migrate", "--database-url", &url]);
    assert_eq!(migrated.status.code(), Some(0), "{migrated:?}");
    let bundle_text = bundle.display().to_string();
    let out = bcctl(
        work,
        &[
            "audit",
            "seal",
            "--all",
            "--database-url",
            &url,
            "--pki",
            &bundle_text,
            "--json",
        ],
    );
    let message = assert_json_error(&out, 1, "audit seal without a secret");
    assert_eq!(
        message,
        format!(
            "the PKI bundle {bundle_text} is sealed and signing a checkpoint needs its audit key, but BC_DEPLOYMENT_SECRET is not set and no secret file was found (BC_DEPLOYMENT_SECRET_FILE, deployment_secret_file in --config, or DIR/deployment-secret of --dir). On a `bcctl up` deployment the secret is in .bcctl/deployment-secret: run from the directory holding .bcctl, or pass --dir DIR; elsewhere set BC_DEPLOYMENT_SECRET (or BC_DEPLOYMENT_SECRET_FILE) to the secret the bundle was sealed with"
        )
    );
    assert!(!message.contains("openssl rand"), "{message}");
    assert!(!message.contains("--plaintext"), "{message}");
    // Without --json nothing of it is JSON, and stdout stays empty.
    let out = bcctl(
        work,
        &[
            "audit",
            "seal",
            "--all",
            "--database-url",
            &url,
            "--pki",
            &bundle_text,
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("bcctl: the PKI bundle "));
    assert!(out.stdout.is_empty());
}
