//! bcd killed at every step of a join (issue 17, "faults survived"), with the real binaries:
//! `bcctl up` serves, a real `bcd join` is stopped at a fault point (`bcd::fault`, debug builds
//! only: `BCD_TEST_CRASH_AT=<point>` makes it SIGSTOP itself there) and the test SIGKILLs it.
//! Then the files on disk must never mix two identities (the identity loads, or there is none),
//! and the next `bcd join` completes, or says exactly what to do and doing it completes.
//!
//! - A plain join, killed at each step from "key and CSR made" to "identity stored, token file
//!   not yet deleted". Killed before the control plane answered, the next join completes with
//!   the same token. Killed after it answered (it committed the join and spent the single-use
//!   token) but before `identity.json` was in place, the next join sends the request kept in
//!   `join.pending` again and the control plane answers it with the identity it issued: it
//!   completes with the same single-use token (issue 40; before, it was refused and needed a new
//!   token). Killed after, the next join says `already joined` and deletes the token file. No
//!   temporary file, and no `join.pending`, is left once a join has completed.
//! - `bcd join --reset --yes`, killed after each file it moves aside. Nothing of the old
//!   identity is ever deleted (each file is found again under a `.reset-` name), and the new
//!   identity never sits beside the old one's files.
//!
//! Both backends (the token's single use is the store's). Run:
//! `cargo test -p cli --test suite fault_join_kill::` (Postgres at `DATABASE_URL` for the
//! Postgres case).

use crate::support;

use support::{bcctl_bin, bcd_bin, Proc};

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bcd::files::DataDir;
use bcd::identity_store::{load_read_only, LoadError};
use events::store::testkit::TestDb;

struct Up {
    _proc: Proc,
    facts: serde_json::Value,
    secret: String,
    db_url: String,
}

impl Up {
    fn s(&self, key: &str) -> String {
        self.facts[key]
            .as_str()
            .unwrap_or_else(|| panic!("bcctl up --json has no {key}: {}", self.facts))
            .to_owned()
    }

    /// A new single-use token, written to `path` (mode 0600) for `--token-file`.
    fn token_file(&self, path: &Path) -> PathBuf {
        let out = Command::new(bcctl_bin())
            .args([
                "token", "create", "--tenant", "default", "--site", "site-1", "--json",
            ])
            .arg("--database-url")
            .arg(&self.db_url)
            .arg("--pki")
            .arg(self.s("pkiBundle"))
            .env("BC_DEPLOYMENT_SECRET", &self.secret)
            .stdin(Stdio::null())
            .output()
            .expect("run bcctl token create");
        assert!(
            out.status.success(),
            "bcctl token create: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("token JSON");
        let secret = v["secret"].as_str().expect("secret");
        fs::write(path, format!("{secret}\n")).expect("write the token file");
        fs::set_permissions(path, fs::Permissions::from_mode(0o600)).expect("chmod");
        path.to_owned()
    }

    fn bcd_join(&self, data: &Path, token_file: &Path, extra: &[&str]) -> Command {
        let mut cmd = Command::new(bcd_bin());
        cmd.arg("--config")
            .arg(self.s("bcdConfig"))
            .arg("--data-dir")
            .arg(data)
            .arg("join")
            .args(extra)
            .arg("--token-file")
            .arg(token_file)
            .env_remove("BCD_JOIN_TOKEN")
            .env_remove("BCD_SERVER")
            .env_remove("BCD_DATA_DIR")
            .env_remove("BCD_CONFIG")
            .env_remove(bcd::fault::CRASH_AT_ENV)
            .stdin(Stdio::null());
        cmd
    }
}

fn start_up(tmp: &Path, db_url: &str) -> Up {
    let log = tmp.join("bcctl-up.log");
    let child = Command::new(bcctl_bin())
        .args(["up", "--port", "0", "--json", "--dir"])
        .arg(tmp.join("up"))
        .arg("--database-url")
        .arg(db_url)
        .env_remove("BC_DEPLOYMENT_SECRET")
        .env_remove("DATABASE_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(fs::File::create(&log).expect("log")))
        .spawn()
        .expect("spawn bcctl up");
    let mut proc = Proc {
        name: "bcctl up".into(),
        child,
        log,
    };
    let stdout = proc.child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        if let Some(Ok(line)) = lines.next() {
            let _ = tx.send(line);
        }
        for _ in lines {}
    });
    let line = rx
        .recv_timeout(Duration::from_secs(120))
        .unwrap_or_else(|_| panic!("bcctl up printed nothing in 120 s:\n{}", proc.log_text()));
    let facts: serde_json::Value =
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("bcctl up --json: {e}: {line}"));
    let secret = fs::read_to_string(tmp.join("up").join("deployment-secret"))
        .expect("bcctl up wrote its development secret")
        .trim()
        .to_owned();
    Up {
        _proc: proc,
        facts,
        secret,
        db_url: db_url.to_owned(),
    }
}

/// Spawns `cmd` with `BCD_TEST_CRASH_AT=point`, waits until it stopped there, SIGKILLs it.
fn kill_at(mut cmd: Command, point: &str, log: &Path) {
    cmd.env(bcd::fault::CRASH_AT_ENV, point)
        .stdout(Stdio::from(fs::File::create(log).expect("log")))
        .stderr(Stdio::from(
            fs::OpenOptions::new().append(true).open(log).expect("log"),
        ));
    let mut child = cmd.spawn().expect("spawn bcd join");
    let stat = format!("/proc/{}/stat", child.id());
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        // `pid (comm) STATE ...`: the state follows the last `)`.
        let state = fs::read_to_string(&stat)
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .map(|(_, rest)| rest.trim_start().to_owned())
            })
            .and_then(|rest| rest.chars().next());
        if state == Some('T') {
            break;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "bcd join exited ({status}) without reaching the fault point {point} (a release \
                 build has none):\n{}",
                fs::read_to_string(log).unwrap_or_default()
            );
        }
        assert!(
            Instant::now() < deadline,
            "bcd join did not reach {point} within 60 s:\n{}",
            fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let text = fs::read_to_string(log).unwrap_or_default();
    assert!(
        text.contains(&format!("bcd: fault point {point}: stopped")),
        "{text}"
    );
    child.kill().expect("SIGKILL");
    let status = child.wait().expect("reap");
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9)
    );
}

/// The data directory's files (name -> content).
fn files(data: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    if let Ok(entries) = fs::read_dir(data) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            out.insert(name, fs::read(e.path()).unwrap_or_default());
        }
    }
    out
}

fn names(data: &Path) -> Vec<String> {
    files(data).into_keys().collect()
}

/// The identity on disk: `Some(node id)`, `None` when not joined; any other state (a key that
/// is not the certificate's, a missing key...) fails the test with `context`.
fn on_disk(data: &Path, context: &str) -> Option<String> {
    match load_read_only(&DataDir::new(data)) {
        Ok(loaded) => Some(loaded.stored.node_id),
        Err(LoadError::NotJoined) => None,
        Err(e) => panic!(
            "{context}: the files mix identities or are broken: {e}\n{:?}",
            names(data)
        ),
    }
}

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn run(mut cmd: Command) -> Run {
    let out = cmd.output().expect("run bcd join");
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn joined_id(r: &Run, context: &str) -> String {
    assert_eq!(r.code, Some(0), "{context}: {}{}", r.stdout, r.stderr);
    r.stdout
        .lines()
        .find_map(|l| l.strip_prefix("joined as "))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("{context}: no `joined as` in {}{}", r.stdout, r.stderr))
        .to_owned()
}

/// What the next plain `bcd join` does after a kill at a point.
#[derive(Clone, Copy, Debug)]
enum Next {
    /// Completes with the same token (nothing reached the control plane).
    Completes,
    /// The control plane admitted the join and spent the single-use token: the same request
    /// sent again (`join.pending`) is answered with the identity it issued.
    AnsweredAgain,
    /// The identity was stored: `already joined`, the token file deleted.
    AlreadyJoined,
}

const JOIN_POINTS: [(&str, Next); 9] = [
    ("join:prepared", Next::Completes),
    ("join:answer-received", Next::AnsweredAgain),
    ("join:verified", Next::AnsweredAgain),
    ("store:next-removed", Next::AnsweredAgain),
    ("write:node.key:tmp-synced", Next::AnsweredAgain),
    ("write:node.key:renamed", Next::AnsweredAgain),
    ("write:identity.json:tmp-synced", Next::AnsweredAgain),
    ("write:identity.json:renamed", Next::AlreadyJoined),
    ("join:stored", Next::AlreadyJoined),
];

fn killed_join(up: &Up, tmp: &Path, index: usize, point: &str, next: Next) {
    let ctx = format!("killed at {point}");
    let data = tmp.join(format!("join-{index}"));
    let token = up.token_file(&tmp.join(format!("join-{index}.token")));
    kill_at(
        up.bcd_join(&data, &token, &[]),
        point,
        &tmp.join(format!("join-{index}.log")),
    );
    let stored = on_disk(&data, &ctx);
    assert_eq!(
        stored.is_some(),
        matches!(next, Next::AlreadyJoined),
        "{ctx}: {:?}",
        names(&data)
    );
    assert!(
        token.exists(),
        "{ctx}: the token file was deleted before the join completed"
    );

    let again = run(up.bcd_join(&data, &token, &[]));
    match next {
        Next::Completes => {
            joined_id(&again, &ctx);
        }
        Next::AlreadyJoined => {
            let id = stored.unwrap_or_default();
            assert_eq!(again.code, Some(0), "{ctx}: {}", again.stderr);
            assert_eq!(
                again.stdout,
                format!("already joined as {id} (site site-1, role node)\n"),
                "{ctx}"
            );
        }
        Next::AnsweredAgain => {
            // The token is single-use and was spent by the killed join: only the same request
            // answered again can join with it.
            joined_id(&again, &ctx);
            assert!(
                again.stderr.contains(
                    "bcd join: sending again the request of an earlier join that got no answer"
                ),
                "{ctx}: {}",
                again.stderr
            );
        }
    }
    assert!(on_disk(&data, &ctx).is_some());
    assert_eq!(
        names(&data),
        [
            "bundle.pem",
            "cert.pem",
            "identity.json",
            "key.pem",
            "node.key"
        ],
        "{ctx}: only the identity's files and their PEM copies, nothing left over"
    );
    assert!(!token.exists(), "{ctx}: the token file was not deleted");
}

/// The files a reset moves, as `bcd::join::reset` names them.
const RESET_POINTS: [&str; 3] = ["journal.db", "node.key", "identity.json"];

fn killed_reset(up: &Up, tmp: &Path, moved_last: &str) {
    let ctx = format!("reset killed after moving {moved_last}");
    let data = tmp.join(format!("reset-{moved_last}"));
    let first = up.token_file(&tmp.join(format!("reset-{moved_last}.token")));
    let old_id = joined_id(&run(up.bcd_join(&data, &first, &[])), &ctx);
    // The journal `bcd node` would keep (only its name matters to a reset).
    fs::write(data.join("journal.db"), format!("journal of {old_id}")).expect("journal");
    let mut old = files(&data);
    assert_eq!(
        old.keys().collect::<Vec<_>>(),
        [
            "bundle.pem",
            "cert.pem",
            "identity.json",
            "journal.db",
            "key.pem",
            "node.key"
        ]
    );
    // The PEM files are copies of the identity for other software: a reset leaves them, and
    // the next join replaces them (docs/NODE-FILES.md).
    old.retain(|name, _| !name.ends_with(".pem"));

    let token = up.token_file(&tmp.join(format!("reset-{moved_last}.token2")));
    kill_at(
        up.bcd_join(&data, &token, &["--reset", "--yes"]),
        &format!("reset:moved:{moved_last}"),
        &tmp.join(format!("reset-{moved_last}.log")),
    );
    // The old identity whole, part of it (its key moved: bcd says to reset again), or none.
    match load_read_only(&DataDir::new(&data)) {
        Ok(loaded) => assert_eq!(loaded.stored.node_id, old_id, "{ctx}"),
        Err(LoadError::NotJoined | LoadError::KeyMissing { .. }) => {}
        Err(e) => panic!("{ctx}: {e}: {:?}", names(&data)),
    }

    // The next plain `bcd join`, then what it says to do, if anything.
    let again = run(up.bcd_join(&data, &token, &[]));
    let new_id = match again.code {
        Some(0) if again.stdout.starts_with("already joined as ") => {
            assert_eq!(
                again.stdout,
                format!("already joined as {old_id} (site site-1, role node)\n"),
                "{ctx}"
            );
            // The reset did not happen: run it again.
            let token = up.token_file(&tmp.join(format!("reset-{moved_last}.token3")));
            joined_id(
                &run(up.bcd_join(&data, &token, &["--reset", "--yes"])),
                &ctx,
            )
        }
        Some(0) => joined_id(&again, &ctx),
        _ => {
            assert_eq!(
                again.stderr,
                format!(
                    "bcd join: {}: the node key is missing; join again: bcd join --reset --yes, then bcd join\n",
                    data.join("node.key").display()
                ),
                "{ctx}"
            );
            assert_eq!(again.code, Some(1), "{ctx}");
            joined_id(
                &run(up.bcd_join(&data, &token, &["--reset", "--yes"])),
                &ctx,
            )
        }
    };
    assert_ne!(new_id, old_id, "{ctx}");
    assert_eq!(on_disk(&data, &ctx), Some(new_id.clone()), "{ctx}");

    // Nothing of the old identity was deleted: each file is there under a `.reset-` name, and
    // none of them is left beside the new identity under its own name.
    let now = files(&data);
    for (name, content) in &old {
        let kept: Vec<&String> = now
            .iter()
            .filter(|(n, c)| n.starts_with(&format!("{name}.reset-")) && *c == content)
            .map(|(n, _)| n)
            .collect();
        assert_eq!(
            kept.len(),
            1,
            "{ctx}: the old {name} is gone: {:?}",
            now.keys()
        );
        assert_ne!(
            now.get(name),
            Some(content),
            "{ctx}: the old {name} beside the new identity"
        );
    }
    let current: Vec<&String> = now.keys().filter(|n| !n.contains(".reset-")).collect();
    assert_eq!(
        current,
        [
            "bundle.pem",
            "cert.pem",
            "identity.json",
            "key.pem",
            "node.key"
        ],
        "{ctx}"
    );
}

fn scenario(db_url: &str) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let up = start_up(tmp.path(), db_url);
    for (i, (point, next)) in JOIN_POINTS.iter().enumerate() {
        killed_join(&up, tmp.path(), i, point, *next);
    }
    for moved in RESET_POINTS {
        killed_reset(&up, tmp.path(), moved);
    }
}

#[test]
fn bcd_killed_at_every_join_step_on_sqlite() {
    let db = TestDb::sqlite().expect("sqlite test db");
    scenario(db.url());
}

#[tokio::test(flavor = "multi_thread")]
async fn bcd_killed_at_every_join_step_on_postgres() {
    let db = TestDb::postgres().await.expect("postgres test db");
    let url = db.url().to_owned();
    tokio::task::spawn_blocking(move || scenario(&url))
        .await
        .expect("scenario");
    drop(db);
}
