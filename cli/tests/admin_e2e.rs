//! THE end to end of issue 23, with the real binaries on Postgres: an admin makes the
//! deployment (`pki init`), configures two approver keys (`[quorum]`) and the admin listener
//! (`[admin] listen`), and issues an operator, two approver and an auditor certificate (`pki
//! issue-operator`); `bcctl serve` runs. Then, over the admin API only:
//!
//! - the operator creates a join token (its secret file written on the operator's machine) and a
//!   batch;
//! - each approver approves from a directory holding ONLY `profile.toml`, `operator.pem`,
//!   `operator.key`, `serving-ca.pem` and its approver key, in an environment cleared of every
//!   variable but PATH and HOME (no DATABASE_URL, no BC_*): the scope is fetched, the root
//!   recomputed and the approval signed on the approver's machine; the batch becomes approved;
//! - the auditor exports the trail (`--out FILE` and `--out -`), and `bcctl audit verify` of the
//!   export, offline against the audit key's pin, passes;
//! - `events list --json` shows each operator event's actor: the SPIFFE ID and role of the
//!   certificate that caused it.
//!
//! The harness ([`AdminDeployment`]) is shared with `admin_roles.rs`.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use events::store::testkit::TestDb;
use serde_json::{json, Value};

use crate::support::{bcctl_bin, Proc};

pub(crate) const TD: &str = "admin-e2e.example.com";
pub(crate) const SECRET: &str = "an admin e2e deployment secret, long enough to seal";

/// A free TCP port on 127.0.0.1 (bound and released).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// The running deployment: its store, directory, admin address and the people's directories.
pub(crate) struct AdminDeployment {
    pub db: TestDb,
    _root: tempfile::TempDir,
    /// The server's directory (pki.json, serve.toml, the approvers' public keys).
    pub srv: PathBuf,
    /// `127.0.0.1:PORT` of the admin listener.
    pub admin: String,
    /// The audit key's pin (`pki init --json`).
    pub audit_pin: String,
    pub serve: Option<Proc>,
    root: PathBuf,
}

/// One person: a directory with their profile (and for an approver, their approver key).
pub(crate) struct Person {
    pub dir: PathBuf,
    pub name: String,
}

impl Person {
    pub fn spiffe_id(&self) -> String {
        format!("spiffe://{TD}/operator/{}", self.name)
    }
}

impl AdminDeployment {
    /// `pki init`, approver keys for `approvers` (threshold: all of them), the serve
    /// configuration, and `bcctl serve` running with its admin listener.
    pub async fn start(approvers: &[&str]) -> AdminDeployment {
        let db = TestDb::postgres().await.expect("a Postgres database");
        crate::support::seed_nodes(db.url(), "default", 3).await;
        let root = tempfile::tempdir().expect("tempdir");
        let srv = root.path().join("srv");
        std::fs::create_dir_all(&srv).expect("srv");
        let mut d = AdminDeployment {
            db,
            srv,
            admin: format!("127.0.0.1:{}", free_port()),
            audit_pin: String::new(),
            serve: None,
            root: root.path().to_path_buf(),
            _root: root,
        };
        let init = d.admin_ok(&[
            "pki",
            "init",
            "--trust-domain",
            TD,
            "--out",
            "pki.json",
            "--json",
        ]);
        d.audit_pin = init["pins"]["auditSigning"]
            .as_str()
            .unwrap_or_else(|| panic!("pki init --json names no audit pin: {init}"))
            .to_string();
        // Each approver's key is made on a scratch machine: the private key goes to the
        // approver's directory, the public key to the server's configuration.
        let mut pubs = Vec::new();
        for name in approvers {
            let scratch = d.root.join(format!("keygen-{name}"));
            std::fs::create_dir_all(&scratch).expect("scratch");
            let out = d.run_in(&scratch, &["batch", "keygen", "--out", "approver.pem"], &[]);
            assert!(out.status.success(), "keygen: {}", stderr(&out));
            let public = format!("{name}.pem.pub");
            std::fs::rename(scratch.join("approver.pem.pub"), d.srv.join(&public)).expect("pub");
            pubs.push(format!("{public:?}"));
        }
        // The gateway's port, never the admin API's: a port released by one `free_port` may be
        // the next one's (both listeners in one process: "Address already in use").
        let listen = loop {
            let port = free_port();
            if format!("127.0.0.1:{port}") != d.admin {
                break port;
            }
        };
        let config = format!(
            "database_url = {url:?}\npki_bundle = \"pki.json\"\nlisten = \"127.0.0.1:{listen}\"\nmetrics_listen = \"off\"\n\n[admin]\nlisten = {admin:?}\n\n[quorum]\napprover_keys = [{keys}]\nthreshold = {n}\n",
            url = d.db.url(),
            admin = d.admin,
            keys = pubs.join(", "),
            n = approvers.len().max(1),
        );
        std::fs::write(d.srv.join("serve.toml"), config).expect("serve.toml");
        d.start_serve();
        d
    }

    /// Starts `bcctl serve --config serve.toml` and waits until the admin listener accepts.
    pub fn start_serve(&mut self) {
        let mut cmd = self.admin_command(&["serve", "--config", "serve.toml"]);
        cmd.stdin(Stdio::null());
        let mut serve = Proc::spawn("serve", cmd, self.srv.join("serve.log"));
        serve.wait_line("listening on", Duration::from_secs(60));
        let admin = self.admin.clone();
        crate::support::wait_for(
            "the admin listener",
            Duration::from_secs(30),
            || std::net::TcpStream::connect(&admin).is_ok(),
            || serve.log_text(),
        );
        self.serve = Some(serve);
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        self.serve
            .as_ref()
            .map(|s| s.log_text())
            .unwrap_or_default()
    }

    /// bcctl as the admin on the server's machine: direct mode, the deployment's store and
    /// secret (the serve configuration names the store and the bundle).
    fn admin_command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(bcctl_bin());
        cmd.current_dir(&self.srv)
            .env_remove("DATABASE_URL")
            .env_remove("BC_PKI_BUNDLE")
            .env_remove("BC_DEPLOYMENT_SECRET_FILE")
            .env_remove("BCCTL_PROFILE")
            .env("BC_DEPLOYMENT_SECRET", SECRET)
            .env("USER", "root-admin")
            .args(args);
        cmd
    }

    /// A direct admin verb (the store named by serve.toml unless the verb is `pki init`).
    pub fn admin_run(&self, args: &[&str]) -> Output {
        let mut full: Vec<&str> = args.to_vec();
        let takes_config = !matches!(args, ["pki", "init", ..] | ["batch", "keygen", ..]);
        if takes_config {
            full.extend(["--config", "serve.toml"]);
        }
        self.admin_command(&full).output().expect("run bcctl")
    }

    pub fn admin_ok(&self, args: &[&str]) -> Value {
        let out = self.admin_run(args);
        assert!(
            out.status.success(),
            "bcctl {args:?}: {}\n{}",
            stderr(&out),
            String::from_utf8_lossy(&out.stdout)
        );
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "bcctl {args:?}: not JSON ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }

    /// bcctl in `dir` with an environment cleared of everything but PATH and HOME.
    pub fn run_in(&self, dir: &Path, args: &[&str], extra_env: &[(&str, &str)]) -> Output {
        let mut cmd = Command::new(bcctl_bin());
        cmd.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", dir)
            .current_dir(dir)
            .args(args)
            .stdin(Stdio::null());
        for (k, v) in extra_env {
            cmd.env(k, v);
        }
        cmd.output().expect("run bcctl")
    }

    /// Issues an operator certificate (`pki issue-operator`, direct, as the admin) into a new
    /// directory of that person's own.
    pub fn issue(&self, name: &str, role: &str) -> Person {
        let dir = self.root.join(format!("person-{name}"));
        let dir_text = dir.to_str().expect("utf-8").to_string();
        let issued = self.admin_run(&[
            "pki",
            "issue-operator",
            "--name",
            name,
            "--role",
            role,
            "--out",
            &dir_text,
            "--server",
            &self.admin,
        ]);
        assert!(
            issued.status.success(),
            "issue-operator {name}: {}",
            stderr(&issued)
        );
        for file in [
            "profile.toml",
            "operator.pem",
            "operator.key",
            "serving-ca.pem",
        ] {
            assert!(dir.join(file).is_file(), "{file} missing for {name}");
        }
        Person {
            dir,
            name: name.to_string(),
        }
    }

    /// An approver: their certificate, and the approver key made for them at start.
    pub fn issue_approver(&self, name: &str) -> Person {
        let person = self.issue(name, "approver");
        let scratch = self.root.join(format!("keygen-{name}"));
        std::fs::rename(
            scratch.join("approver.pem"),
            person.dir.join("approver.pem"),
        )
        .expect("move the approver key");
        person
    }

    /// A verb over the admin API as `person`, from their directory (`./profile.toml` found by
    /// `--server`), with a cleared environment.
    pub fn as_person(&self, person: &Person, args: &[&str]) -> Output {
        let mut full: Vec<&str> = args.to_vec();
        full.extend(["--server", &self.admin]);
        self.run_in(&person.dir, &full, &[])
    }

    pub fn as_person_ok(&self, person: &Person, args: &[&str]) -> Value {
        let out = self.as_person(person, args);
        assert!(
            out.status.success(),
            "{} bcctl {args:?}: exit {:?}: {}\nserver log:\n{}",
            person.name,
            out.status.code(),
            stderr(&out),
            self.log()
        );
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "bcctl {args:?}: not JSON ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }
}

pub(crate) fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The names of the files in `dir`, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .expect("metadata")
        .permissions()
        .mode()
        & 0o777
}

/// Events of `event_type` in an `events list --json` answer.
fn of_type<'a>(events: &'a Value, event_type: &str) -> Vec<&'a Value> {
    events
        .as_array()
        .expect("an array of events")
        .iter()
        .filter(|e| e["eventType"] == event_type)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operators_approvers_and_auditors_work_off_the_control_plane() {
    let d = AdminDeployment::start(&["approver-1", "approver-2"]).await;
    let ops = d.issue("ops", "operator");
    let a1 = d.issue_approver("approver-1");
    let a2 = d.issue_approver("approver-2");
    let auditor = d.issue("audit", "auditor");

    // The operator: a token, its secret written on the operator's machine (0600), not the
    // server's.
    let token = d.as_person_ok(&ops, &["token", "create", "--out", "join-token", "--json"]);
    assert!(ops.dir.join("join-token").is_file(), "{token}");
    assert_eq!(mode(&ops.dir.join("join-token")), 0o600);
    assert!(!d.srv.join("join-token").exists());

    // The operator: a batch over two seeded nodes, the leaves file sent from its machine.
    std::fs::write(
        ops.dir.join("leaves.json"),
        json!([{ "subject": "node-0", "kind": "node.reimage", "payload_sha256": "ab".repeat(32) },
               { "subject": "node-1", "kind": "node.reimage", "payload_sha256": "cd".repeat(32) }])
        .to_string(),
    )
    .expect("leaves");
    let created = d.as_person_ok(
        &ops,
        &[
            "batch",
            "create",
            "--tenant",
            "default",
            "--idempotency-key",
            "rack-7",
            "--reason",
            "reimage rack 7",
            "--leaves",
            "leaves.json",
            "--json",
        ],
    );
    let batch = created["batchId"].as_str().expect("batch id").to_string();
    assert_eq!(created["required"], 2, "{created}");
    assert_eq!(
        batch,
        domain::quorum::BatchId::derive("default", &ops.spiffe_id(), "rack-7")
            .expect("id")
            .to_hex(),
        "the caller the batch id derives from is the operator's certificate"
    );
    // A payload labelled with another kind's type: refused by the server (spec 003, the kind's
    // own payload type from the registry), over the admin API as on the store.
    std::fs::write(
        ops.dir.join("relabelled.json"),
        json!([{ "subject": "node-0", "kind": "node.reboot",
                 "payload": { "type_url": "type.googleapis.com/bc.command.v1.DiskWipe", "value": "0a00" } }])
        .to_string(),
    )
    .expect("leaves");
    let relabelled = d.as_person(
        &ops,
        &[
            "batch",
            "create",
            "--tenant",
            "default",
            "--idempotency-key",
            "relabelled",
            "--reason",
            "reboot",
            "--leaves",
            "relabelled.json",
        ],
    );
    assert_eq!(relabelled.status.code(), Some(2), "{}", stderr(&relabelled));
    assert_eq!(
        stderr(&relabelled),
        "bcctl: INVALID_INPUT: scope leaf 0: payload typeUrl \"type.googleapis.com/bc.command.v1.DiskWipe\" \
         is not the payload type of node.reboot; node.reboot payloads are \
         type.googleapis.com/bc.command.v1.NodeReboot\n"
    );

    // The approvers: each from its own directory, nothing else there, no database anywhere.
    let only = vec![
        "approver.pem",
        "operator.key",
        "operator.pem",
        "profile.toml",
        "serving-ca.pem",
    ];
    for (i, approver) in [&a1, &a2].into_iter().enumerate() {
        assert_eq!(
            listing(&approver.dir),
            only,
            "{}'s directory",
            approver.name
        );
        // The approver finds the pending batch.
        let pending = d.as_person_ok(
            approver,
            &["batch", "list", "--status", "pending", "--json"],
        );
        assert_eq!(
            pending["batches"][0]["batchId"],
            batch.as_str(),
            "{pending}"
        );
        let approved = d.as_person_ok(
            approver,
            &[
                "batch",
                "approve",
                "--batch",
                &batch,
                "--key",
                "approver.pem",
                "--yes",
                "--json",
            ],
        );
        assert_eq!(approved["signed"], true, "{approved}");
        assert_eq!(approved["recorded"], true, "{approved}");
        assert_eq!(approved["held"], i + 1, "{approved}");
        assert_eq!(
            approved["status"],
            if i == 0 { "pending" } else { "approved" },
            "{approved}"
        );
        assert_eq!(
            listing(&approver.dir),
            only,
            "approving leaves nothing behind"
        );
    }
    let shown = d.as_person_ok(&a1, &["batch", "show", "--batch", &batch, "--json"]);
    assert_eq!(shown["status"], "approved");
    assert_eq!(shown["trustDomain"], TD);

    // The auditor: the trail, exported over the API, verifies offline against the pin.
    d.admin_ok(&["audit", "seal", "--all", "--json"]);
    let export = d.as_person(
        &auditor,
        &[
            "audit",
            "export",
            "--tenant",
            "default",
            "--out",
            "trail.json",
        ],
    );
    assert!(export.status.success(), "export: {}", stderr(&export));
    assert!(auditor.dir.join("trail.json").is_file());
    let piped = d.as_person(
        &auditor,
        &["audit", "export", "--tenant", "default", "--out", "-"],
    );
    assert!(piped.status.success(), "export -: {}", stderr(&piped));
    assert_eq!(
        piped.stdout,
        std::fs::read(auditor.dir.join("trail.json")).expect("trail"),
        "--out - prints the same export"
    );
    let verified = d.run_in(
        &auditor.dir,
        &[
            "audit",
            "verify",
            "--bundle",
            "trail.json",
            "--pin",
            &d.audit_pin,
            "--trust-domain",
            TD,
            "--json",
        ],
        &[],
    );
    assert!(
        verified.status.success(),
        "audit verify: {}\n{}",
        stderr(&verified),
        String::from_utf8_lossy(&verified.stdout)
    );

    // Every operator event names its actor: the certificate's SPIFFE ID and role.
    let events = d.as_person_ok(&auditor, &["events", "list", "--limit", "1000", "--json"]);
    let expect_actor = |event_type: &str, who: &[(&Person, &str)]| {
        let found = of_type(&events, event_type);
        assert_eq!(found.len(), who.len(), "{event_type}: {events}");
        let mut have: Vec<(String, String)> = found
            .iter()
            .map(|e| {
                (
                    e["actor"]["id"].as_str().unwrap_or("none").to_string(),
                    e["actor"]["role"].as_str().unwrap_or("none").to_string(),
                )
            })
            .collect();
        let mut want: Vec<(String, String)> = who
            .iter()
            .map(|(p, role)| (p.spiffe_id(), role.to_string()))
            .collect();
        have.sort();
        want.sort();
        assert_eq!(have, want, "{event_type}'s actors");
    };
    expect_actor("token.created", &[(&ops, "operator")]);
    expect_actor("batch.created", &[(&ops, "operator")]);
    expect_actor(
        "batch.approval.recorded",
        &[(&a1, "approver"), (&a2, "approver")],
    );
    // The certificates' issuance was the admin's, directly: the local user, role admin.
    for e in of_type(&events, "operator.cert.issued") {
        assert_eq!(e["actor"]["role"], "admin", "{e}");
        assert!(
            e["actor"]["id"]
                .as_str()
                .is_some_and(|id| id.starts_with("local:root-admin@")),
            "{e}"
        );
    }
}
