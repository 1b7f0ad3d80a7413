//! Running a destructive kind's hook program (`[commands.hooks]` in `config.toml`).
//!
//! The hook gets the payload bytes on stdin and the environment `BC_COMMAND_ID`,
//! `BC_COMMAND_KIND`, `BC_NODE_ID`, `BC_BATCH_ID` (hex, or empty when unbatched) and
//! `BC_PAYLOAD_JSON` (the decoded payload). Its stdout and stderr go to one pipe; the last
//! [`OUTPUT_TAIL_BYTES`] are reported. It runs in a process group of its own; past the timeout
//! the whole group is killed and the command fails ("timed out after N s"). Exit status 0 is
//! success; any other status, or a signal, is a failure. Once the hook ended its group is
//! killed and its output read for at most [`OUTPUT_DRAIN`] more: a process that left the group
//! and kept the pipe cannot hold the result.

use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The most output a result carries: 4 KiB, the tail.
pub const OUTPUT_TAIL_BYTES: usize = 4096;

/// What a hook run ended with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookRun {
    /// Exit code, when it exited (not killed by a signal).
    pub exit_code: Option<i32>,
    /// Whether it succeeded (exit 0).
    pub success: bool,
    /// The failure's words ("exited with status 3", "timed out after 600 s", ...).
    pub detail: String,
    /// The last bytes of its merged output.
    pub output_tail: Vec<u8>,
}

/// The hook's inputs.
#[derive(Debug, Clone)]
pub struct HookInput<'a> {
    /// `BC_COMMAND_ID`.
    pub command_id: &'a str,
    /// `BC_COMMAND_KIND`.
    pub kind: &'a str,
    /// `BC_NODE_ID`.
    pub node_id: &'a str,
    /// `BC_BATCH_ID` (hex or empty).
    pub batch_id_hex: &'a str,
    /// `BC_PAYLOAD_JSON`.
    pub payload_json: &'a str,
    /// stdin.
    pub payload: &'a [u8],
}

/// How long, after the hook ended, its output is still read (a process that left the hook's
/// group may hold the pipe open for ever).
pub const OUTPUT_DRAIN: Duration = Duration::from_secs(2);

/// Keeps the last [`OUTPUT_TAIL_BYTES`] of everything read from `reader`.
pub fn read_tail(reader: impl Read) -> Vec<u8> {
    let tail = Arc::new(Mutex::new(Vec::new()));
    read_tail_into(reader, &tail);
    let bytes = tail.lock().map(|t| t.clone()).unwrap_or_default();
    bytes
}

/// [`read_tail`] into a shared buffer, so the tail read so far can be taken at any time.
fn read_tail_into(mut reader: impl Read, tail: &Mutex<Vec<u8>>) {
    let mut buf = [0u8; 8192];
    loop {
        match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let Ok(mut tail) = tail.lock() else { break };
                tail.extend_from_slice(&buf[..n]);
                if tail.len() > OUTPUT_TAIL_BYTES {
                    let excess = tail.len() - OUTPUT_TAIL_BYTES;
                    tail.drain(..excess);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
}

/// The output reader: its shared tail and a signal when it reached the end.
struct Output {
    tail: Arc<Mutex<Vec<u8>>>,
    done: std::sync::mpsc::Receiver<()>,
}

impl Output {
    fn start(reader: std::io::PipeReader) -> Output {
        let tail = Arc::new(Mutex::new(Vec::new()));
        let (tx, done) = std::sync::mpsc::channel();
        let shared = tail.clone();
        std::thread::spawn(move || {
            read_tail_into(reader, &shared);
            let _ = tx.send(());
        });
        Output { tail, done }
    }

    /// The tail, once the pipe closed or [`OUTPUT_DRAIN`] passed.
    fn finish(self) -> Vec<u8> {
        let _ = self.done.recv_timeout(OUTPUT_DRAIN);
        let bytes = self.tail.lock().map(|t| t.clone()).unwrap_or_default();
        bytes
    }
}

fn failed(detail: String) -> HookRun {
    HookRun {
        exit_code: None,
        success: false,
        detail,
        output_tail: Vec::new(),
    }
}

/// Runs `program` with `input`, killing it after `timeout`.
pub fn run_hook(program: &Path, input: &HookInput<'_>, timeout: Duration) -> HookRun {
    let (reader, writer) = match std::io::pipe() {
        Ok(pair) => pair,
        Err(e) => return failed(format!("cannot make the hook's output pipe: {e}")),
    };
    let writer_err = match writer.try_clone() {
        Ok(w) => w,
        Err(e) => return failed(format!("cannot make the hook's output pipe: {e}")),
    };
    let mut command = Command::new(program);
    command
        .env("BC_COMMAND_ID", input.command_id)
        .env("BC_COMMAND_KIND", input.kind)
        .env("BC_NODE_ID", input.node_id)
        .env("BC_BATCH_ID", input.batch_id_hex)
        .env("BC_PAYLOAD_JSON", input.payload_json)
        .stdin(Stdio::piped())
        .stdout(writer)
        .stderr(writer_err)
        .process_group(0);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            return failed(format!(
                "the hook {} could not be started: {e}; check [commands.hooks] in config.toml",
                program.display()
            ))
        }
    };
    // `command` holds the pipe's write ends; drop them so the reader sees EOF when the hook
    // (and anything it left holding the pipe) is done.
    drop(command);
    let output = Output::start(reader);
    if let Some(mut stdin) = child.stdin.take() {
        let payload = input.payload.to_vec();
        // A hook that does not read stdin must not block bcd: write from a thread.
        std::thread::spawn(move || {
            let _ = stdin.write_all(&payload);
        });
    }
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() >= deadline => break None,
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => {
                kill_group(child.id());
                let _ = child.wait();
                return failed(format!("waiting for the hook: {e}"));
            }
        }
    };
    let Some(status) = status else {
        kill_group(child.id());
        let _ = child.wait();
        let output_tail = output.finish();
        return HookRun {
            exit_code: None,
            success: false,
            detail: format!("timed out after {} s", timeout.as_secs()),
            output_tail,
        };
    };
    // Anything the hook left running in its group still holds the pipe: end it too.
    kill_group(child.id());
    let output_tail = output.finish();
    match (status.code(), status.signal()) {
        (Some(0), _) => HookRun {
            exit_code: Some(0),
            success: true,
            detail: String::new(),
            output_tail,
        },
        (Some(code), _) => HookRun {
            exit_code: Some(code),
            success: false,
            detail: format!("the hook exited with status {code}"),
            output_tail,
        },
        (None, signal) => HookRun {
            exit_code: None,
            success: false,
            detail: format!(
                "the hook was killed by signal {}",
                signal.map(|s| s.to_string()).unwrap_or_else(|| "?".into())
            ),
            output_tail,
        },
    }
}

fn kill_group(pid: u32) {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        // SAFETY: kill(2) with a negative pid signals the process group the hook leads; it
        // touches no memory of this process.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }
}
