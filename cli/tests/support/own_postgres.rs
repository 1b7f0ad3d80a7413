//! A Postgres cluster of a test's own, on a free port, run as the `postgres` OS user
//! (`runuser`) from `/usr/lib/postgresql/15/bin`, so the shared server on 5432 is never
//! touched: `initdb` into a temporary directory ([`OwnPostgres::init`]), or a hot standby of
//! one made with `pg_basebackup` and streaming from it ([`OwnPostgres::standby_of`]).
//! Stopped (immediately) when dropped.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

/// A running cluster and the directory that holds it.
pub struct OwnPostgres {
    data: PathBuf,
    log: PathBuf,
    port: u16,
    _dir: tempfile::TempDir,
}

fn as_postgres(program: &str) -> Command {
    let mut cmd = Command::new("runuser");
    cmd.args(["-u", "postgres", "--"])
        .arg(Path::new(PG_BIN).join(program));
    cmd
}

fn must(mut cmd: Command, what: &str) {
    let out = cmd.stdin(Stdio::null()).output().expect(what);
    assert!(
        out.status.success(),
        "{what}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A temporary directory the `postgres` user owns.
fn postgres_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
    let mut chown = Command::new("chown");
    chown.arg("postgres:postgres").arg(dir.path());
    must(chown, "chown the cluster directory to postgres");
    dir
}

impl OwnPostgres {
    /// `initdb` (trust authentication, which initdb's `pg_hba.conf` also grants to replication
    /// connections from 127.0.0.1) and start.
    pub fn init() -> OwnPostgres {
        let dir = postgres_dir();
        let data = dir.path().join("data");
        let mut initdb = as_postgres("initdb");
        initdb
            .args(["-A", "trust", "-U", "postgres", "--no-sync", "-D"])
            .arg(&data);
        must(initdb, "initdb");
        OwnPostgres::started(dir, data)
    }

    /// A hot standby of `primary`: `pg_basebackup -R -X stream` (which writes `standby.signal`
    /// and the `primary_conninfo` to stream from it), started on a port of its own.
    pub fn standby_of(primary: &OwnPostgres) -> OwnPostgres {
        let dir = postgres_dir();
        let data = dir.path().join("data");
        let mut backup = as_postgres("pg_basebackup");
        backup
            .args(["-h", "127.0.0.1", "-U", "postgres", "-R", "-X", "stream"])
            .args(["-c", "fast", "--no-sync", "-p"])
            .arg(primary.port.to_string())
            .arg("-D")
            .arg(&data);
        must(backup, "pg_basebackup of the primary");
        OwnPostgres::started(dir, data)
    }

    /// The cluster in `data` (inside `dir`), started on a free port.
    fn started(dir: tempfile::TempDir, data: PathBuf) -> OwnPostgres {
        let pg = OwnPostgres {
            log: dir.path().join("postgres.log"),
            data,
            port: free_port(),
            _dir: dir,
        };
        pg.start();
        pg
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The server's own log (for a failure's context).
    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn start(&self) {
        let mut cmd = as_postgres("pg_ctl");
        cmd.arg("-D")
            .arg(&self.data)
            .arg("-l")
            .arg(&self.log)
            .arg("-o")
            .arg(format!(
                "-p {} -c listen_addresses=127.0.0.1 -k {} -c fsync=off -c hot_standby=on",
                self.port,
                self.data.display()
            ))
            .args(["-w", "-t", "60", "start"]);
        must(cmd, "pg_ctl start");
    }

    /// Stops it the way a restart does: every connection is terminated.
    pub fn stop(&self) {
        let mut cmd = as_postgres("pg_ctl");
        cmd.arg("-D")
            .arg(&self.data)
            .args(["-m", "fast", "-w", "-t", "60", "stop"]);
        must(cmd, "pg_ctl stop");
    }
}

impl Drop for OwnPostgres {
    fn drop(&mut self) {
        let _ = as_postgres("pg_ctl")
            .arg("-D")
            .arg(&self.data)
            .args(["-m", "immediate", "-w", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}
