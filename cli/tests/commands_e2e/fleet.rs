//! The signed-command end-to-end tests' fleet: `bcctl up` with a serve configuration (the
//! approver quorum), approver keys made with `bcctl batch keygen`, and `bcd` machines each with
//! its own configuration directory (the hooks table, an optional first-set pin) and data
//! directory, joined and holding sessions.

use crate::support::{bcctl_bin, bcd_bin, wait_for, Proc};

use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The development server and what `bcctl up --json` printed.
pub struct Server {
    pub proc: Proc,
    pub facts: serde_json::Value,
    pub secret: String,
    pub db_url: String,
    pub work: PathBuf,
}

impl Server {
    pub fn s(&self, key: &str) -> String {
        self.facts[key]
            .as_str()
            .unwrap_or_else(|| panic!("bcctl up --json has no {key}: {}", self.facts))
            .to_owned()
    }

    /// bcctl against the server's store and PKI bundle, with its deployment secret.
    pub fn bcctl_raw(&self, args: &[&str]) -> Output {
        Command::new(bcctl_bin())
            .args(args)
            .env("DATABASE_URL", &self.db_url)
            .env("BC_DEPLOYMENT_SECRET", &self.secret)
            .env("BC_TRUST_DOMAIN", "bc.local")
            .current_dir(self.work.parent().expect("the deployment's parent"))
            .stdin(Stdio::null())
            .output()
            .expect("run bcctl")
    }

    /// [`Server::bcctl_raw`] that must succeed; its standard output as JSON.
    pub fn bcctl_json(&self, args: &[&str]) -> serde_json::Value {
        let out = self.bcctl_raw(args);
        assert!(
            out.status.success(),
            "bcctl {args:?}: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "bcctl {args:?} --json: {e}: {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }

    pub fn new_token(&self, uses: u32) -> String {
        let uses = uses.to_string();
        let v = self.bcctl_json(&[
            "token", "create", "--tenant", "default", "--site", "site-1", "--uses", &uses, "--json",
        ]);
        v["secret"].as_str().expect("token secret").to_owned()
    }
}

/// `bcctl up` in `tmp/.bcctl` on `db_url` with `serve_config` as its `--config`; bcctl runs in
/// `tmp`, so every verb finds the deployment by itself.
pub fn start_server(tmp: &Path, db_url: &str, serve_config: &str) -> Server {
    start_server_at(tmp, db_url, serve_config, 0, "first")
}

/// A free TCP port on 127.0.0.1, for a server restarted on the same address.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// [`start_server`] on `port` (0: any), its configuration and log named after `run`; a later
/// run in the same `tmp` restarts the same deployment.
pub fn start_server_at(
    tmp: &Path,
    db_url: &str,
    serve_config: &str,
    port: u16,
    run: &str,
) -> Server {
    let work = tmp.join(".bcctl");
    let config = tmp.join(format!("serve-{run}.toml"));
    fs::write(&config, serve_config).expect("write serve config");
    let log = tmp.join(format!("bcctl-{run}.log"));
    let port = port.to_string();
    let child = Command::new(bcctl_bin())
        .args([
            "up",
            "--port",
            &port,
            // The admin API is not used here: any free port, never port + 1 (which may be taken).
            "--admin-port",
            "0",
            "--json",
            "--token-uses",
            "5",
            "--dir",
        ])
        .arg(&work)
        .arg("--database-url")
        .arg(db_url)
        .arg("--config")
        .arg(&config)
        .env("BC_COMMAND_POLL_INTERVAL", "100ms")
        .env_remove("BC_DEPLOYMENT_SECRET")
        .env_remove("DATABASE_URL")
        .current_dir(tmp)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(fs::File::create(&log).expect("bcctl log")))
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
        .unwrap_or_else(|_| panic!("bcctl up printed nothing; its log:\n{}", proc.log_text()));
    let facts: serde_json::Value =
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("bcctl up --json: {e}: {line}"));
    let secret = fs::read_to_string(work.join("deployment-secret"))
        .expect("bcctl up wrote its development secret")
        .trim()
        .to_owned();
    Server {
        proc,
        facts,
        secret,
        db_url: db_url.to_owned(),
        work,
    }
}

/// `bcctl batch keygen --out DIR/NAME.pem` for each name: (private key path, public key path).
pub fn approver_keys(dir: &Path, names: &[&str]) -> Vec<(PathBuf, PathBuf)> {
    names
        .iter()
        .map(|name| {
            let key = dir.join(format!("{name}.pem"));
            let out = Command::new(bcctl_bin())
                .args(["batch", "keygen", "--out"])
                .arg(&key)
                .output()
                .expect("bcctl batch keygen");
            assert!(
                out.status.success(),
                "keygen: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let public = PathBuf::from(format!("{}.pub", key.display()));
            (key, public)
        })
        .collect()
}

/// A machine: its configuration directory, data directory, marker file and node id.
pub struct Machine {
    pub name: String,
    pub config: PathBuf,
    pub data: PathBuf,
    /// Each run of the reboot hook appends one line: `<command id> <node id>`.
    pub marker: PathBuf,
    pub node_id: String,
    pub agent: Option<Proc>,
}

impl Machine {
    /// A machine whose config is the server's plus `[commands.hooks]` (node.reboot runs a hook
    /// that appends to its marker file; `slow` makes it sleep 5 s after writing) and `pin`.
    pub fn new(tmp: &Path, server: &Server, name: &str, pin: Option<&str>, slow: bool) -> Machine {
        let dir = tmp.join(name);
        let config_dir = dir.join("etc");
        fs::create_dir_all(&config_dir).expect("mkdir etc");
        let up_config = PathBuf::from(server.s("bcdConfig"));
        let up_dir = up_config.parent().expect("bcd config dir");
        for f in ["join-encryption.jwk", "join-signing.jwk"] {
            fs::copy(up_dir.join(f), config_dir.join(f)).expect("copy jwk");
        }
        let marker = dir.join("reboots.log");
        let hook = dir.join("reboot-hook.sh");
        let sleep = if slow { "sleep 5\n" } else { "" };
        fs::write(
            &hook,
            format!(
                "#!/bin/sh\necho \"$BC_COMMAND_ID $BC_NODE_ID\" >> '{}'\n{sleep}echo rebooting \"$BC_NODE_ID\"\n",
                marker.display()
            ),
        )
        .expect("write hook");
        fs::set_permissions(&hook, fs::Permissions::from_mode(0o755)).expect("chmod hook");
        let data = dir.join("data");
        let base = fs::read_to_string(&up_config).expect("read bcd config");
        let base: String = base
            .lines()
            .filter(|l| !l.starts_with("data_dir"))
            .map(|l| format!("{l}\n"))
            .collect();
        let pin_line = pin
            .map(|p| format!("approver_set_sha256 = \"{p}\"\n"))
            .unwrap_or_default();
        let config = config_dir.join("config.toml");
        fs::write(
            &config,
            format!(
                "{pin_line}{base}data_dir = \"{}\"\n\n[commands]\nhook_timeout_seconds = 30\n\n[commands.hooks]\n\"node.reboot\" = \"{}\"\n",
                data.display(),
                hook.display()
            ),
        )
        .expect("write bcd config");
        Machine {
            name: name.to_owned(),
            config,
            data,
            marker,
            node_id: String::new(),
            agent: None,
        }
    }

    fn bcd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(bcd_bin());
        cmd.arg("--config")
            .arg(&self.config)
            .arg("--data-dir")
            .arg(&self.data)
            .args(args)
            .env("BCD_STATUS_INTERVAL_SECONDS", "1")
            .env_remove("BCD_JOIN_TOKEN")
            .env_remove("BCD_SERVER")
            .env_remove("BCD_DATA_DIR")
            .env_remove("BCD_CONFIG");
        cmd
    }

    /// `bcd join` with `token`; records the node id.
    pub fn join(&mut self, token: &str) {
        let out = self
            .bcd(&["join"])
            .env("BCD_JOIN_TOKEN", token)
            .stdin(Stdio::null())
            .output()
            .expect("bcd join");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{}: bcd join: {stdout}{}",
            self.name,
            String::from_utf8_lossy(&out.stderr)
        );
        let line = stdout
            .lines()
            .find(|l| l.starts_with("joined as "))
            .unwrap_or_else(|| panic!("no `joined as` line in {stdout}"));
        self.node_id = line["joined as ".len()..]
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_owned();
    }

    /// Starts `bcd node` and waits for its session.
    pub fn start(&mut self, tmp: &Path) {
        self.spawn_node(tmp);
        if let Some(agent) = self.agent.as_mut() {
            agent.wait_line("session open as", Duration::from_secs(60));
        }
    }

    /// Starts `bcd node` (its log `tmp/NAME-node.log`) without waiting for its session.
    pub fn spawn_node(&mut self, tmp: &Path) {
        let log = tmp.join(format!("{}-node.log", self.name));
        self.agent = Some(Proc::spawn(
            &format!("bcd node ({})", self.name),
            self.bcd(&["node"]),
            log,
        ));
    }

    /// SIGKILLs `bcd node` (no clean shutdown).
    pub fn kill(&mut self) {
        if let Some(mut agent) = self.agent.take() {
            let _ = agent.child.kill();
            let _ = agent.child.wait();
        }
    }

    pub fn log(&self) -> String {
        self.agent.as_ref().map(Proc::log_text).unwrap_or_default()
    }

    /// The lines the reboot hook wrote.
    pub fn reboots(&self) -> Vec<String> {
        fs::read_to_string(&self.marker)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

/// Waits until `bcctl command show ID --json` reports a status in `done`; returns the view.
pub fn wait_command(server: &Server, id: &str, done: &[&str]) -> serde_json::Value {
    let last = std::cell::RefCell::new(serde_json::Value::Null);
    wait_for(
        &format!("command {id} to reach {done:?}"),
        Duration::from_secs(60),
        || {
            let view = server.bcctl_json(&["command", "show", id, "--json"]);
            let reached = done.contains(&view["status"].as_str().unwrap_or_default());
            *last.borrow_mut() = view;
            reached
        },
        || {
            format!(
                "last view: {}\nserver log:\n{}",
                last.borrow(),
                server.proc.log_text()
            )
        },
    );
    last.into_inner()
}
