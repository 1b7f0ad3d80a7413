//! The failover end to end's deployment, with the real `bcctl`: a sealed PKI bundle, two
//! `bcctl serve --role api` replicas on internal ports picked once (so a killed replica comes
//! back where its gateway relays), and two `bcctl serve --role gateway` processes, each with
//! its own internal certificate and relaying to one replica. Every process's standard error goes
//! to its own log file, one per start, which the leadership checks read.

use crate::support::{bcctl_bin, Proc};

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use domain::pki::{open_bundle, PublicBundle};

pub const SECRET: &str = "failover-e2e-deployment-secret-0123456789abcdef";
pub const TD: &str = "failover.test";
/// The replicas' names, in order: the gateway of the same index relays to each.
pub const API_NAMES: [&str; 2] = ["A", "B"];
/// What a `bcctl serve` log line says once the process leads the audit sequencer (the
/// `leader` helper's contract: tracing at INFO, field `task`).
pub const LEADERSHIP_TAKEN: &str = "leadership taken";
pub const LEADERSHIP_LOST: &str = "leadership lost";
pub const SEQUENCER_TASK: &str = "audit-sequencer";

/// A bcctl command with a clean environment for the settings these tests use.
pub fn bcctl(args: &[&str]) -> Command {
    let mut cmd = Command::new(bcctl_bin());
    cmd.args(args);
    for var in [
        "BC_DEPLOYMENT_SECRET",
        "BC_DEPLOYMENT_SECRET_FILE",
        "DATABASE_URL",
        "BC_PKI_BUNDLE",
        "BC_ROLE",
        "BC_LISTEN",
        "BC_API_INTERNAL_LISTEN",
        "BC_API_INTERNAL_URL",
        "BC_INTERNAL_CERT",
        "BC_INTERNAL_KEY",
        "BC_ADMIN_LISTEN",
        "BC_LOG_FORMAT",
        "RUST_LOG",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("BC_METRICS_LISTEN", "off");
    cmd
}

/// Runs `cmd` to success and returns its standard output.
pub fn ok(mut cmd: Command) -> String {
    let out = cmd.stdin(Stdio::null()).output().expect("run bcctl");
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A port nothing listens on now (the kernel's pick, released at once).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// The rest of the first line of `text` after `marker`, up to the next space.
pub fn after(text: &str, marker: &str) -> Option<String> {
    let line = text.lines().find(|l| l.contains(marker))?;
    let at = line.find(marker)? + marker.len();
    line[at..].split_whitespace().next().map(str::to_owned)
}

/// Whether the last audit-sequencer leadership line of `log` says taken.
pub fn leads_sequencer(log: &str) -> bool {
    let mut leads = false;
    for line in log.lines().filter(|l| l.contains(SEQUENCER_TASK)) {
        if line.contains(LEADERSHIP_TAKEN) {
            leads = true;
        } else if line.contains(LEADERSHIP_LOST) {
            leads = false;
        }
    }
    leads
}

/// The deployment: files, ports, and the processes running.
pub struct Deployment {
    pub dir: PathBuf,
    pub db_url: String,
    pub pki: PathBuf,
    pub public: PublicBundle,
    api_ports: [u16; 2],
    /// The running api replicas (`None` while killed).
    pub apis: [Option<Proc>; 2],
    /// Every log file each replica wrote, one per start, oldest first.
    pub api_logs: [Vec<PathBuf>; 2],
    pub gateways: Vec<Proc>,
    /// The gateways' agent-facing addresses (`127.0.0.1:port`).
    pub gateway_addrs: Vec<String>,
}

impl Deployment {
    /// `bcctl pki init` (sealed with [`SECRET`]) and one internal certificate per gateway.
    pub fn create(dir: &Path, db_url: &str) -> Deployment {
        let pki = dir.join("pki.json");
        let pki_s = pki.display().to_string();
        let mut init = bcctl(&["pki", "init", "--trust-domain", TD, "--out", &pki_s]);
        init.env("BC_DEPLOYMENT_SECRET", SECRET);
        ok(init);
        for name in ["gateway-1", "gateway-2"] {
            let gw = dir.join(name);
            fs::create_dir_all(&gw).expect("mkdir");
            let mut issue = bcctl(&[
                "pki",
                "issue-internal",
                "--pki",
                &pki_s,
                "--name",
                name,
                "--serving-name",
                "localhost",
                "--serving-name",
                "127.0.0.1",
            ]);
            issue
                .arg("--cert-out")
                .arg(gw.join("internal.crt"))
                .arg("--key-out")
                .arg(gw.join("internal.key"))
                .env("BC_DEPLOYMENT_SECRET", SECRET);
            ok(issue);
        }
        let public = open_bundle(&fs::read(&pki).expect("pki"), None)
            .expect("the bundle's public half")
            .public;
        Deployment {
            dir: dir.to_owned(),
            db_url: db_url.to_owned(),
            pki,
            public,
            api_ports: [free_port(), free_port()],
            apis: [None, None],
            api_logs: [Vec::new(), Vec::new()],
            gateways: Vec::new(),
            gateway_addrs: Vec::new(),
        }
    }

    /// Spawns api replica `i` on its internal port (a new log file each start); waits for
    /// nothing.
    pub fn spawn_api(&mut self, i: usize) {
        let mut cmd = bcctl(&["serve", "--role", "api"]);
        cmd.env("BC_DEPLOYMENT_SECRET", SECRET)
            .env("DATABASE_URL", &self.db_url)
            .env("BC_PKI_BUNDLE", &self.pki)
            .env(
                "BC_API_INTERNAL_LISTEN",
                format!("127.0.0.1:{}", self.api_ports[i]),
            )
            .env("BC_API_HEALTH_LISTEN", "127.0.0.1:0");
        let start = self.api_logs[i].len() + 1;
        let log = self.dir.join(format!("api-{}-{start}.log", API_NAMES[i]));
        let name = format!("bcctl serve --role api ({}, start {start})", API_NAMES[i]);
        self.api_logs[i].push(log.clone());
        self.apis[i] = Some(Proc::spawn(&name, cmd, log));
    }

    /// The log of api replica `i`'s current (or last) start.
    pub fn api_log(&self, i: usize) -> String {
        self.api_logs[i]
            .last()
            .and_then(|p| fs::read_to_string(p).ok())
            .unwrap_or_default()
    }

    /// Whether replica `i` printed its internal endpoint in its current start's log.
    pub fn api_ready(&self, i: usize) -> bool {
        self.api_log(i).contains("internal endpoint on ")
    }

    /// Starts replica `i` and waits (blocking) until its internal endpoint listens.
    pub fn start_api(&mut self, i: usize) {
        self.spawn_api(i);
        let proc = self.apis[i].as_mut().expect("just spawned");
        proc.wait_line("internal endpoint on ", Duration::from_secs(60));
    }

    /// SIGKILLs replica `i` (and reaps it); its log stays.
    pub fn kill_api(&mut self, i: usize) {
        if let Some(mut proc) = self.apis[i].take() {
            proc.child.kill().expect("SIGKILL the api");
            let _ = proc.child.wait();
        }
    }

    /// Starts gateway `i`, relaying to api replica `i`, and waits until it listens.
    pub fn start_gateway(&mut self, i: usize) {
        self.start_gateway_with(i, &[]);
    }

    /// [`Deployment::start_gateway`] with more settings in its environment (`BC_*` pairs).
    pub fn start_gateway_with(&mut self, i: usize, settings: &[(&str, &str)]) {
        let gw = self.dir.join(format!("gateway-{}", i + 1));
        let mut cmd = bcctl(&["serve", "--role", "gateway"]);
        cmd.env("BC_DEPLOYMENT_SECRET", SECRET)
            .env("DATABASE_URL", &self.db_url)
            .env("BC_PKI_BUNDLE", &self.pki)
            .env("BC_LISTEN", "127.0.0.1:0")
            .env(
                "BC_API_INTERNAL_URL",
                format!("localhost:{}", self.api_ports[i]),
            )
            .env("BC_INTERNAL_CERT", gw.join("internal.crt"))
            .env("BC_INTERNAL_KEY", gw.join("internal.key"))
            .envs(settings.iter().copied());
        let name = format!("bcctl serve --role gateway (G{})", i + 1);
        let log = self.dir.join(format!("gateway-{}.log", i + 1));
        let mut proc = Proc::spawn(&name, cmd, log);
        proc.wait_line("listening on ", Duration::from_secs(60));
        let addr = after(&proc.log_text(), "listening on ").expect("the gateway's address");
        self.gateways.push(proc);
        self.gateway_addrs.push(addr);
    }

    /// The replica whose log says it leads the audit sequencer now, when exactly one does.
    pub fn sequencer_leader(&self) -> Option<usize> {
        let leaders: Vec<usize> = (0..2)
            .filter(|&i| self.apis[i].is_some() && leads_sequencer(&self.api_log(i)))
            .collect();
        match leaders.as_slice() {
            [one] => Some(*one),
            _ => None,
        }
    }

    /// Waits (blocking, polling) at most `within` for a replica to log that it leads the audit
    /// sequencer.
    pub fn wait_sequencer_leader(&self, within: Duration) -> Option<usize> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(i) = self.sequencer_leader() {
                return Some(i);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Every process's log, for a failure's context.
    pub fn logs(&self) -> String {
        let mut s = String::new();
        for (i, logs) in self.api_logs.iter().enumerate() {
            for log in logs {
                s.push_str(&format!(
                    "--- api {} ({}):\n{}\n",
                    API_NAMES[i],
                    log.display(),
                    fs::read_to_string(log).unwrap_or_default()
                ));
            }
        }
        for g in &self.gateways {
            s.push_str(&format!("--- {}:\n{}\n", g.name, g.log_text()));
        }
        s
    }
}
