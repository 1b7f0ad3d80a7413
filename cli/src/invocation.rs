//! Who runs a verb, against which deployment, and where its output goes.
//!
//! A verb runs in one of two ways. **Direct**: `bcctl` opened the store itself (bootstrap and
//! offline work, or whoever holds the database credentials); its actor is the local user
//! ([`local_actor`]), recorded with the role `admin`, since database write access is admin
//! access. **Through the admin API**: the server (`cli/src/admin/`) authenticated an operator
//! certificate over mTLS and runs the verb in-process inside [`Invocation::scope`]; then the
//! deployment is the server's own (whatever the command line said), the actor is the
//! certificate's SPIFFE ID and role, standard output and error are captured for the reply, and
//! files the verb writes are collected and returned to the caller instead of touching the
//! server's disk. The actor is never taken from a request field.
//!
//! Every verb prints through [`outln!`] / [`out!`] / [`errln!`] (never `println!`), writes files a
//! caller names through [`write_file`] and reads them through [`read_file`], so the same code
//! serves both ways.

// Foundation of issue 23: the admin server and client use the rest as they land.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use events::store::EventStore;
use events::Actor;

use crate::deployment::located::Located;

/// A file a verb wrote during an API call: returned to the caller, who writes it locally.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WrittenFile {
    /// The path as the caller named it on its command line.
    pub path: PathBuf,
    pub contents: Vec<u8>,
    /// The Unix mode the caller should give it (0600 for secrets and keys, 0644 otherwise).
    pub mode: u32,
}

/// One verb call through the admin API: the server's deployment, the authenticated actor, the
/// input files the caller sent, and what the verb printed and wrote.
pub struct Invocation {
    /// The server's deployment (the caller's deployment flags are refused before this runs).
    pub located: Located,
    /// The server's store, already acting as [`Invocation::actor`].
    pub store: EventStore,
    /// Who called: from the verified client certificate.
    pub actor: Actor,
    /// Files the caller sent, by the path its command line names them with.
    pub inputs: BTreeMap<PathBuf, Vec<u8>>,
    /// The caller's credential's expiry (its operator certificate's notAfter): what a verb
    /// issues for the caller never outlives it.
    pub credential_not_after: Option<time::OffsetDateTime>,
    stdout: Mutex<Vec<u8>>,
    stderr: Mutex<Vec<u8>>,
    written: Mutex<Vec<WrittenFile>>,
}

/// What a finished API call produced.
#[derive(Clone, Debug, Default)]
pub struct Captured {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub files: Vec<WrittenFile>,
}

tokio::task_local! {
    static CURRENT: Arc<Invocation>;
}

impl Invocation {
    pub fn new(
        located: Located,
        store: EventStore,
        actor: Actor,
        inputs: BTreeMap<PathBuf, Vec<u8>>,
        credential_not_after: Option<time::OffsetDateTime>,
    ) -> Arc<Self> {
        Arc::new(Invocation {
            located,
            store,
            actor,
            inputs,
            credential_not_after,
            stdout: Mutex::new(Vec::new()),
            stderr: Mutex::new(Vec::new()),
            written: Mutex::new(Vec::new()),
        })
    }

    /// Runs `fut` (a verb) as this invocation: output, files, deployment and actor are this
    /// invocation's for the whole of `fut` (not for tasks it spawns: verbs spawn none).
    pub async fn scope<F: std::future::Future>(self: &Arc<Self>, fut: F) -> F::Output {
        CURRENT.scope(self.clone(), fut).await
    }

    /// Takes what the verb printed and wrote.
    pub fn take(&self) -> Captured {
        Captured {
            stdout: std::mem::take(&mut *lock(&self.stdout)),
            stderr: std::mem::take(&mut *lock(&self.stderr)),
            files: std::mem::take(&mut *lock(&self.written)),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The API call this task runs for, if any.
pub fn current() -> Option<Arc<Invocation>> {
    CURRENT.try_with(|i| i.clone()).ok()
}

/// Whether this verb runs for an API call (its files go back to the caller).
pub fn is_remote() -> bool {
    current().is_some()
}

/// The actor of this verb: the API caller's identity, or the local user in direct mode.
pub fn actor() -> Actor {
    match current() {
        Some(i) => i.actor.clone(),
        None => local_actor(),
    }
}

/// The expiry of the caller's credential: its operator certificate's notAfter during an API
/// call; `None` in direct mode (database credentials carry no expiry).
pub fn credential_not_after() -> Option<time::OffsetDateTime> {
    current().and_then(|i| i.credential_not_after)
}

/// The actor of a direct (database-credential) run: `local:<user>@<host>`, role `admin`.
pub fn local_actor() -> Actor {
    let user = std::env::var("USER")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "unknown".into());
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into());
    Actor::new(format!("local:{user}@{host}"), "admin")
        .unwrap_or_else(|_| Actor::new("local:unknown", "admin").expect("a valid fixed actor"))
}

/// Writes to standard output, or to the API call's captured output.
pub fn write_stdout(text: &str) {
    match current() {
        Some(i) => lock(&i.stdout).extend_from_slice(text.as_bytes()),
        None => {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(text.as_bytes());
            let _ = out.flush();
        }
    }
}

/// Writes raw bytes to standard output (or the captured output).
pub fn write_stdout_bytes(bytes: &[u8]) -> std::io::Result<()> {
    match current() {
        Some(i) => {
            lock(&i.stdout).extend_from_slice(bytes);
            Ok(())
        }
        None => {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            out.write_all(bytes)?;
            out.flush()
        }
    }
}

/// Writes to standard error, or to the API call's captured error output.
pub fn write_stderr(text: &str) {
    match current() {
        Some(i) => lock(&i.stderr).extend_from_slice(text.as_bytes()),
        None => eprint!("{text}"),
    }
}

/// Writes a file the caller named: on this machine in direct mode (mode `mode` on a new file),
/// into the reply during an API call. Never writes the server's disk for a caller's path.
pub fn write_file(path: &Path, contents: &[u8], mode: u32) -> std::io::Result<()> {
    match current() {
        Some(i) => {
            lock(&i.written).push(WrittenFile {
                path: path.to_path_buf(),
                contents: contents.to_vec(),
                mode,
            });
            Ok(())
        }
        None => {
            use std::io::Write;
            let mut options = std::fs::OpenOptions::new();
            options.write(true).create(true).truncate(true);
            #[cfg(unix)]
            {
                use std::os::unix::fs::OpenOptionsExt;
                options.mode(mode);
            }
            let mut file = options.open(path)?;
            file.write_all(contents)?;
            file.sync_all()
        }
    }
}

/// Reads a file the caller named: from this machine in direct mode, from the files the caller
/// sent during an API call (a path it did not send is `NotFound`, naming the path).
pub fn read_file(path: &Path) -> std::io::Result<Vec<u8>> {
    match current() {
        Some(i) => i.inputs.get(path).cloned().ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!(
                    "{} was not sent with the call (the admin API reads only the files the verb's table names)",
                    path.display()
                ),
            )
        }),
        None => std::fs::read(path),
    }
}

/// During an API call, a `Write` for a verb that streams its output to a caller-named `path`
/// (`-`: standard output): standard output goes to the captured output as it is written, a
/// file is collected and returned to the caller (with `mode`) when the writer is dropped.
/// `None` in direct mode: the verb opens the path itself.
pub fn remote_sink(path: &Path, mode: u32) -> Option<RemoteSink> {
    current()?;
    Some(RemoteSink {
        // `-` is standard output (the convention of crate::output).
        file: (path.as_os_str() != "-").then(|| path.to_path_buf()),
        mode,
        buf: Vec::new(),
    })
}

/// See [`remote_sink`].
pub struct RemoteSink {
    file: Option<PathBuf>,
    mode: u32,
    buf: Vec<u8>,
}

impl std::io::Write for RemoteSink {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        match self.file {
            Some(_) => self.buf.extend_from_slice(bytes),
            None => write_stdout_bytes(bytes)?,
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for RemoteSink {
    fn drop(&mut self) {
        if let Some(path) = self.file.take() {
            // During a call this only records the file for the reply; it cannot fail.
            let _ = write_file(&path, &std::mem::take(&mut self.buf), self.mode);
        }
    }
}

/// [`read_file`] as UTF-8 text.
pub fn read_file_to_string(path: &Path) -> std::io::Result<String> {
    let bytes = read_file(path)?;
    String::from_utf8(bytes).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{} is not UTF-8 text", path.display()),
        )
    })
}

/// `println!` for verbs: standard output, or the API call's captured output.
#[macro_export]
macro_rules! outln {
    () => { $crate::invocation::write_stdout("\n") };
    ($($arg:tt)*) => {{
        let mut line = ::std::format!($($arg)*);
        line.push('\n');
        $crate::invocation::write_stdout(&line)
    }};
}

/// `print!` for verbs.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => { $crate::invocation::write_stdout(&::std::format!($($arg)*)) };
}

/// `eprintln!` for verbs: standard error, or the API call's captured error output.
#[macro_export]
macro_rules! errln {
    () => { $crate::invocation::write_stderr("\n") };
    ($($arg:tt)*) => {{
        let mut line = ::std::format!($($arg)*);
        line.push('\n');
        $crate::invocation::write_stderr(&line)
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_mode_actor_is_the_local_user_as_admin() {
        let a = local_actor();
        assert!(a.id().starts_with("local:"), "{}", a.id());
        assert_eq!(a.role(), "admin");
        assert!(!is_remote());
    }
}
