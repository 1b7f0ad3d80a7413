//! The README and `docs/INSTALL.md` walked exactly as written, on a clean directory, with the
//! real binaries (issue 22): the README's first command (`bcctl up`), the join step it printed,
//! then every line of the README's "A first session" blocks, each exiting 0; INSTALL's
//! `bcctl serve` path on Postgres, whose `node install-script` writes what a node joins with;
//! and the operator's `bcctl` lines of COMMISSIONING's walk-through, on a `bcctl up`.
//!
//! The documents are read at test time, so a document that drifts from the binaries fails
//! here. The walker runs each ```sh line with bash in the walk's directory; `target/release/`
//! in a line names the binaries this test was built with (the debug ones), and a line ending in
//! ` &` is started in the background and stopped at the end. The few substitutions the walker
//! makes are listed where it makes them.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use crate::support::{bcctl_bin, bcd_bin, Proc};

/// The repository's root (the `cli` crate's parent).
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the repository")
        .to_path_buf()
}

fn read_doc(name: &str) -> String {
    std::fs::read_to_string(repo().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The ```sh blocks of the section under the heading `title` (up to the next heading of the
/// same or a higher level), in order.
pub(crate) fn sh_blocks(doc: &str, title: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut level = None::<usize>;
    let mut in_block = None::<String>;
    for line in doc.lines() {
        if let Some(block) = in_block.as_mut() {
            if line.trim_start().starts_with("```") {
                blocks.push(std::mem::take(block));
                in_block = None;
            } else {
                block.push_str(line);
                block.push('\n');
            }
            continue;
        }
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if hashes > 0 && line[hashes..].starts_with(' ') {
            match level {
                Some(l) if hashes <= l => level = None,
                None if line[hashes..].trim() == title => level = Some(hashes),
                _ => {}
            }
            continue;
        }
        if level.is_some() && line.trim_start() == "```sh" {
            in_block = Some(String::new());
        }
    }
    blocks
}

/// A line without its trailing comment (a `#` after whitespace, outside quotes).
fn without_comment(line: &str) -> &str {
    let (mut single, mut double, mut prev_space) = (false, false, true);
    for (i, c) in line.char_indices() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '#' if !single && !double && prev_space => return line[..i].trim_end(),
            _ => {}
        }
        prev_space = c.is_whitespace();
    }
    line
}

/// The commands of a block: comments and blank lines dropped, `\`-continued lines joined.
pub(crate) fn commands_of(block: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut pending = String::new();
    for line in block.lines() {
        let trimmed = without_comment(line.trim());
        if pending.is_empty() && trimmed.is_empty() {
            continue;
        }
        if let Some(head) = trimmed.strip_suffix('\\') {
            pending.push_str(head.trim_end());
            pending.push(' ');
            continue;
        }
        pending.push_str(trimmed);
        out.push(std::mem::take(&mut pending));
    }
    out
}

/// The directory holding the binaries under test (`bcctl`, and `bcd` built beside it).
fn bin_dir() -> PathBuf {
    let bcd = bcd_bin();
    let dir = bcctl_bin().parent().expect("bin dir").to_path_buf();
    assert_eq!(bcd.parent(), Some(dir.as_path()), "bcd beside bcctl");
    dir
}

/// A documented line as the walker runs it: `target/release/` is the binaries under test.
fn localised(line: &str, bins: &Path) -> String {
    line.replace("target/release/", &format!("{}/", bins.display()))
}

/// One walk: its directory, the environment every line gets, the background processes.
struct Walk {
    dir: PathBuf,
    bins: PathBuf,
    env: Vec<(String, String)>,
    background: Vec<Proc>,
    transcript: String,
}

impl Walk {
    fn new(dir: &Path) -> Walk {
        let bins = bin_dir();
        let path = format!(
            "{}:{}",
            bins.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        Walk {
            dir: dir.to_path_buf(),
            bins,
            env: vec![("PATH".into(), path)],
            background: Vec::new(),
            transcript: String::new(),
        }
    }

    fn command(&self, line: &str) -> Command {
        let mut cmd = Command::new("bash");
        cmd.arg("-c")
            .arg(format!("set -euo pipefail\n{line}"))
            .current_dir(&self.dir)
            .env_remove("BC_DEPLOYMENT_SECRET")
            .env_remove("BC_DEPLOYMENT_SECRET_FILE")
            .env_remove("DATABASE_URL")
            .env_remove("BC_PKI_BUNDLE");
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd
    }

    /// `up` (a `bcctl up` line) started in the walk's directory until it serves, and what it
    /// printed. Substitution: it serves on a free port (`--port 0`), so parallel tests never
    /// meet on 8443; everything else is the document's command.
    fn serve_up(&self, up: &str) -> (Proc, String) {
        let up_line = localised(&format!("{up} --port 0"), &self.bins);
        let up_log = self.dir.join("up.log");
        let mut server = Proc::spawn("bcctl up", self.command(&format!("exec {up_line}")), up_log);
        server.wait_line("serving until Ctrl-C", Duration::from_secs(60));
        let printed = server.log_text();
        (server, printed)
    }

    /// Runs one documented line: it must exit 0 (a line ending in ` &` is started instead).
    fn run(&mut self, documented: &str) -> Output {
        let line = localised(documented, &self.bins);
        if let Some(head) = line.strip_suffix('&') {
            let n = self.background.len();
            let log = self.dir.join(format!("walk-background-{n}.log"));
            let proc = Proc::spawn(
                &format!("`{documented}`"),
                self.command(&format!("exec {}", head.trim())),
                log,
            );
            self.transcript
                .push_str(&format!("$ {documented}\n(started in the background)\n"));
            self.background.push(proc);
            std::thread::sleep(Duration::from_millis(500));
            return Command::new("true").output().expect("true");
        }
        let out = self.command(&line).output().expect("bash");
        self.transcript.push_str(&format!(
            "$ {documented}\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
        assert!(
            out.status.success(),
            "`{documented}` exited {:?}; the walk so far:\n{}",
            out.status.code(),
            self.transcript
        );
        out
    }
}

/// The first command of the README: it must build `bcd` beside `bcctl` and then run `bcctl up`.
fn first_command(readme: &str) -> String {
    let fence = readme
        .find("```sh")
        .expect("the README opens with a ```sh block");
    let first = readme[fence + 5..]
        .lines()
        .find(|l| !l.trim().is_empty())
        .expect("a first command");
    first.split('#').next().unwrap_or(first).trim().to_string()
}

#[test]
fn the_readme_walks_as_written_on_the_embedded_default() {
    let readme = read_doc("README.md");
    let first = first_command(&readme);
    // The first command sets the build up, builds both binaries (so the printed `bcd` step
    // finds one) and runs `bcctl up` from the same target directory. The setup script is run
    // here too (it installs nothing on a machine that has what it needs).
    let steps: Vec<&str> = first.split("&&").map(str::trim).collect();
    let [setup, build, up] = steps[..] else {
        panic!("the first command sets up, builds, then runs up: {first}")
    };
    assert_eq!(setup, "scripts/setup-build", "{first}");
    let ran = Command::new(repo().join(setup))
        .output()
        .expect("scripts/setup-build");
    assert!(ran.status.success(), "{setup}: {ran:?}");
    assert!(build.contains("cargo build"), "{first}");
    assert!(
        build.contains("-p bcd") || build.contains("--bin bcd"),
        "the first command builds bcd too: {first}"
    );
    let up = up.trim();
    assert!(up.starts_with("target/release/bcctl up"), "{first}");

    let dir = tempfile::tempdir().expect("tempdir");
    let mut walk = Walk::new(dir.path());
    let (server, printed) = walk.serve_up(up);
    walk.transcript.push_str(&format!("$ {first}\n{printed}"));
    let join_step = printed
        .lines()
        .skip_while(|l| !l.starts_with("join a machine with:"))
        .nth(1)
        .unwrap_or_else(|| panic!("`bcctl up` printed no join step:\n{printed}"))
        .trim()
        .to_string();
    assert!(
        !join_step.contains(&token_of(&printed)),
        "the join step names no token on its command line: {join_step}"
    );
    walk.run(&join_step);

    let blocks = sh_blocks(&readme, "A first session");
    assert!(
        !blocks.is_empty(),
        "the README has an \"A first session\" section"
    );
    let mut ran = 0;
    for block in &blocks {
        for line in commands_of(block) {
            walk.run(&line);
            ran += 1;
        }
    }
    assert!(
        ran >= 10,
        "the first session walks at least 10 lines, ran {ran}"
    );
    drop(server);
}

/// The token `bcctl up` printed (the line after "join token").
fn token_of(printed: &str) -> String {
    printed
        .lines()
        .skip_while(|l| !l.starts_with("join token"))
        .nth(1)
        .map(|l| l.trim().to_string())
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| "no-token-printed".into())
}

#[test]
fn the_walker_reads_blocks_and_joins_continued_lines() {
    let doc = "# T\n## A first session\ntext\n```sh\n# c\na \\\n  b\n\nc &  # in the background\necho '#x' \"#y\"\n```\n```text\nx\n```\n## Next\n```sh\nd\n```\n";
    let blocks = sh_blocks(doc, "A first session");
    assert_eq!(blocks.len(), 1);
    assert_eq!(
        commands_of(&blocks[0]),
        vec![
            "a b".to_string(),
            "c &".to_string(),
            "echo '#x' \"#y\"".to_string()
        ]
    );
}

#[tokio::test]
async fn the_install_walkthrough_runs_as_written_on_postgres() {
    let install = read_doc("docs/INSTALL.md");
    let blocks = sh_blocks(
        &install,
        "Walkthrough: `bcctl serve` on Postgres and a node set up by `node install-script`",
    );
    assert!(
        blocks.len() >= 4,
        "the walkthrough's blocks: {}",
        blocks.len()
    );
    let db = events::store::testkit::TestDb::postgres_unmigrated()
        .await
        .expect("a Postgres database");
    let work = tempfile::tempdir().expect("tempdir");
    let walk = Walk::new(work.path());
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    // The walkthrough runs in one shell session (`serve` is a background job of it); the
    // variables it says to set first are the only thing the walker adds.
    let script = blocks.join("\n");
    let out = walk
        .command(&format!("set -x\n{script}"))
        .env("BCCTL", bcctl_bin())
        .env("BCD", bcd_bin())
        .env("DATABASE_URL", db.url())
        .env("WORK", work.path())
        .env("SERVER", format!("127.0.0.1:{port}"))
        .output()
        .expect("bash");
    let transcript = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "the walkthrough exited {:?}:\n{transcript}\nserve's log:\n{}",
        out.status.code(),
        std::fs::read_to_string(work.path().join("serve.log")).unwrap_or_default()
    );
    // The node joined with what install-script wrote, and the roots came out as PEM.
    assert!(
        work.path().join("var/lib/bcd/identity.json").exists(),
        "{transcript}"
    );
    let roots = std::fs::read_to_string(work.path().join("roots.pem")).expect("roots.pem");
    assert!(roots.contains("-----BEGIN CERTIFICATE-----"), "{roots}");
}

/// COMMISSIONING's sections whose operator commands run on the control plane, in order.
const COMMISSIONING_SECTIONS: [&str; 2] = ["1. The site and its agent", "2. Register the machine"];

#[test]
fn the_commissioning_operator_commands_run_as_written() {
    let doc = read_doc("docs/COMMISSIONING.md");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut walk = Walk::new(dir.path());
    let (server, _) = walk.serve_up("target/release/bcctl up");
    // The operator's lines only: the agent machine's (`bcd`, `install`, `systemctl`) need a
    // machine of their own, and are walked by the end-to-end tests of bcd site instead.
    let mut ran = Vec::new();
    for section in COMMISSIONING_SECTIONS {
        for block in sh_blocks(&doc, section) {
            for line in commands_of(&block)
                .into_iter()
                .filter(|l| l.starts_with("bcctl "))
            {
                walk.run(&line);
                ran.push(line);
            }
        }
    }
    assert_eq!(ran.len(), 4, "the operator's lines walked: {ran:?}");
    let entries = walk.run("bcctl site boot list --site fra1 --json");
    let text = String::from_utf8_lossy(&entries.stdout);
    assert!(
        text.contains("\"pool\":\"racks\"") || text.contains("\"poolId\":\"racks\""),
        "{text}"
    );
    drop(server);
}
