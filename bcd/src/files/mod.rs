//! The data directory: the files bcd keeps on the machine, and how every one is written.
//!
//! | module | holds |
//! | --- | --- |
//! | this file | [`DataDir`]: the directory, durable 0600 writes, PKCS#8 PEM node keys |
//! | [`identity`] | `identity.json` and `node.key`: loading in three steps, storing a join and a renewal |
//! | [`pem_files`] | the identity as PEM files other software reads (`[files]`), and `on_renew` |
//! | [`crl`] | `crl.pem`: the node CA's revocation list the gateway pushed, checked before it is written |
//! | [`revoked`] | `revoked.json`: the revocation `bcd node` saw, for status, doctor and join |
//!
//! The other files of the directory belong to what owns them: `journal.db` and the admission
//! state to [`crate::signed_commands`], `approver-set.json` to [`crate::trust::approver_set`].
//!
//! Nothing here ever writes a file in place or deletes an identity: every write is a temporary
//! file renamed over its target (below), every file is 0600 but the PEM files `[files]` gives
//! another mode, and only `bcd join --reset` moves an identity aside.
//!
//! | file | what |
//! | --- | --- |
//! | `identity.json` | the identity ([`crate::files::identity::StoredIdentity`]) |
//! | `node.key` | the node key: PKCS#8 PEM (`PRIVATE KEY`), or a TPM key's record (`BCD TPM NODE KEY`, see [`crate::node_key`]) |
//! | `node.key.next` | the key a renewal is certifying, until its certificate is stored |
//! | `journal.db` | the command journal (owned by `bcd node`; only moved here) |
//!
//! Every write is durable and atomic: a temporary file created 0600 in the same directory,
//! written, fsynced, renamed over the target, and the directory fsynced, so a crash leaves the
//! old file or the new one, never a torn one. Renames and removals fsync the directory too.

pub mod crl;
pub mod identity;
pub mod pem_files;
pub mod revoked;

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use domain::pki::{KeyError, KeyRole, PrivateKey};

/// `identity.json`.
pub const IDENTITY_FILE: &str = "identity.json";
/// `node.key`.
pub const NODE_KEY_FILE: &str = "node.key";
/// `node.key.next`.
pub const NEXT_KEY_FILE: &str = "node.key.next";
/// `journal.db`.
pub const JOURNAL_FILE: &str = "journal.db";
/// The mode of every file bcd writes.
pub const FILE_MODE: u32 = 0o600;
/// Largest key file read.
pub const MAX_KEY_FILE_LEN: u64 = 16 * 1024;
/// PEM label of a PKCS#8 private key.
pub const PKCS8_PEM_LABEL: &str = "PRIVATE KEY";

/// A file operation that failed, with the path it failed on.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// An IO error on `path`.
    #[error("{path}: {action}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What bcd was doing.
        action: &'static str,
        /// Cause.
        source: std::io::Error,
    },
    /// A file larger than bcd ever writes there.
    #[error("{path}: {len} bytes, larger than bcd ever writes there; is it the right file?")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size.
        len: u64,
    },
}

impl FileError {
    fn io<'p>(
        path: &'p Path,
        action: &'static str,
    ) -> impl FnOnce(std::io::Error) -> FileError + 'p {
        move |source| FileError::Io {
            path: path.to_owned(),
            action,
            source,
        }
    }

    /// Whether the cause is a missing file.
    pub fn is_not_found(&self) -> bool {
        matches!(self, FileError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }
}

/// The data directory and the paths of its files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataDir {
    root: PathBuf,
}

impl DataDir {
    /// The data directory at `root` (nothing is touched).
    pub fn new(root: impl Into<PathBuf>) -> DataDir {
        DataDir { root: root.into() }
    }

    /// The directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// A file in it.
    pub fn file(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    /// `identity.json`.
    pub fn identity(&self) -> PathBuf {
        self.file(IDENTITY_FILE)
    }

    /// `node.key`.
    pub fn node_key(&self) -> PathBuf {
        self.file(NODE_KEY_FILE)
    }

    /// `node.key.next`.
    pub fn next_key(&self) -> PathBuf {
        self.file(NEXT_KEY_FILE)
    }

    /// `journal.db`.
    pub fn journal(&self) -> PathBuf {
        self.file(JOURNAL_FILE)
    }

    /// Creates the directory (0700) when it does not exist.
    pub fn ensure_exists(&self) -> Result<(), FileError> {
        if self.root.is_dir() {
            return Ok(());
        }
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.root)
            .map_err(FileError::io(&self.root, "creating the data directory"))
    }

    /// Writes `name` atomically and durably, mode 0600.
    pub fn write(&self, name: &str, bytes: &[u8]) -> Result<(), FileError> {
        write_atomic(&self.root, name, bytes)
    }

    /// Renames `from` to `to` inside the directory, durably.
    pub fn rename(&self, from: &str, to: &str) -> Result<(), FileError> {
        let (from, to) = (self.file(from), self.file(to));
        fs::rename(&from, &to).map_err(FileError::io(&from, "renaming"))?;
        sync_dir(&self.root)
    }

    /// Removes `name` durably; a missing file is fine.
    pub fn remove(&self, name: &str) -> Result<(), FileError> {
        let path = self.file(name);
        match fs::remove_file(&path) {
            Ok(()) => sync_dir(&self.root),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(FileError::io(&path, "removing")(e)),
        }
    }

    /// Removes what a writer killed between its fsync and its rename left behind: the
    /// `.<name>.tmp-<pid>` files of `names` (see [`write_atomic`]), each a whole key or
    /// identity that never took effect. Only for a directory no other bcd is writing to (a
    /// join on a machine that has not joined). Returns how many were removed.
    pub fn remove_stale_temporaries(&self, names: &[&str]) -> Result<usize, FileError> {
        let entries = fs::read_dir(&self.root).map_err(FileError::io(&self.root, "listing"))?;
        let mut removed = 0;
        for entry in entries {
            let entry = entry.map_err(FileError::io(&self.root, "listing"))?;
            let file_name = entry.file_name();
            let Some(file_name) = file_name.to_str() else {
                continue;
            };
            let stale = names.iter().any(|name| {
                file_name
                    .strip_prefix(&format!(".{name}.tmp-"))
                    .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
            });
            if stale {
                let path = entry.path();
                fs::remove_file(&path).map_err(FileError::io(&path, "removing"))?;
                removed += 1;
            }
        }
        if removed > 0 {
            sync_dir(&self.root)?;
        }
        Ok(removed)
    }

    /// Whether `name` exists (as anything, a dangling symlink included).
    pub fn exists(&self, name: &str) -> bool {
        fs::symlink_metadata(self.file(name)).is_ok()
    }

    /// Reads `name` whole, refusing anything larger than `max` bytes.
    pub fn read(&self, name: &str, max: u64) -> Result<Vec<u8>, FileError> {
        let path = self.file(name);
        let len = fs::metadata(&path)
            .map_err(FileError::io(&path, "reading"))?
            .len();
        if len > max {
            return Err(FileError::TooLarge { path, len });
        }
        fs::read(&path).map_err(FileError::io(&path, "reading"))
    }

    /// The permission bits of `name`, when it exists.
    pub fn mode(&self, name: &str) -> Option<u32> {
        fs::symlink_metadata(self.file(name))
            .ok()
            .map(|m| m.permissions().mode() & 0o7777)
    }
}

/// Writes `dir/name` via a 0600 temporary file, fsync, rename and a directory fsync.
pub fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), FileError> {
    write_atomic_mode(dir, name, bytes, FILE_MODE)
}

/// [`write_atomic`] with the file's mode `mode` (the PEM files other software reads).
pub fn write_atomic_mode(dir: &Path, name: &str, bytes: &[u8], mode: u32) -> Result<(), FileError> {
    let target = dir.join(name);
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    // A leftover from a crashed writer with the same pid: ours to replace.
    let _ = fs::remove_file(&tmp);
    let result = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(FILE_MODE)
            .open(&tmp)
            .map_err(FileError::io(&tmp, "creating"))?;
        // The mode given at creation is filtered by the umask; set it exactly.
        file.set_permissions(fs::Permissions::from_mode(mode))
            .map_err(FileError::io(&tmp, "setting the mode of"))?;
        file.write_all(bytes)
            .map_err(FileError::io(&tmp, "writing"))?;
        file.sync_all().map_err(FileError::io(&tmp, "syncing"))?;
        drop(file);
        #[cfg(debug_assertions)]
        crate::fault::point(&format!("write:{name}:tmp-synced"));
        fs::rename(&tmp, &target).map_err(FileError::io(&target, "replacing"))?;
        #[cfg(debug_assertions)]
        crate::fault::point(&format!("write:{name}:renamed"));
        sync_dir(dir)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// fsyncs a directory so a rename or removal in it survives a crash.
pub fn sync_dir(dir: &Path) -> Result<(), FileError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(FileError::io(dir, "syncing the directory"))
}

/// Why a key file does not hold a node key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyFileError {
    /// No `-----BEGIN PRIVATE KEY-----` (or `BCD TPM NODE KEY`) block.
    #[error(
        "not a node key file (expected a -----BEGIN PRIVATE KEY----- or -----BEGIN BCD TPM NODE \
         KEY----- block)"
    )]
    NotPem,
    /// The block's body is not base64.
    #[error("the PEM body is not base64")]
    BadBase64,
    /// A TPM key record that is not 32 bytes.
    #[error("the BCD TPM NODE KEY record is {0} bytes, not 32")]
    TpmRecordLength(usize),
    /// The key is not a P-256 PKCS#8 key.
    #[error(transparent)]
    Key(#[from] KeyError),
}

/// PEM of `bytes` under `label`, lines of 64 characters.
pub fn pem_encode(label: &str, bytes: &[u8]) -> String {
    let body = STANDARD.encode(bytes);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in body.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(chunk));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// The bytes of the first PEM block labelled `label` in `text`: `None` when there is none.
pub fn pem_block(text: &str, label: &str) -> Option<Result<Vec<u8>, KeyFileError>> {
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let start = text.find(&begin)? + begin.len();
    let Some(stop) = text[start..].find(&end).map(|i| i + start) else {
        return Some(Err(KeyFileError::NotPem));
    };
    let body: String = text[start..stop]
        .chars()
        .filter(|c| !c.is_ascii_whitespace())
        .collect();
    Some(STANDARD.decode(body).map_err(|_| KeyFileError::BadBase64))
}

/// PEM (`PRIVATE KEY`) of a node key's PKCS#8 DER, lines of 64 characters.
pub fn key_to_pem(key: &PrivateKey) -> String {
    pem_encode(PKCS8_PEM_LABEL, key.pkcs8_der())
}

/// Reads a file node key (role [`KeyRole::Node`]) from PKCS#8 PEM.
pub fn key_from_pem(text: &[u8]) -> Result<PrivateKey, KeyFileError> {
    let text = std::str::from_utf8(text).map_err(|_| KeyFileError::NotPem)?;
    let der = pem_block(text, PKCS8_PEM_LABEL).ok_or(KeyFileError::NotPem)??;
    Ok(PrivateKey::from_pkcs8_der(KeyRole::Node, &der)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_is_0600_and_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let data = DataDir::new(dir.path());
        data.write("a", b"one").unwrap();
        data.write("a", b"two").unwrap();
        assert_eq!(fs::read(data.file("a")).unwrap(), b"two");
        assert_eq!(data.mode("a"), Some(0o600));
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn pem_round_trip() {
        let key = PrivateKey::generate(KeyRole::Node).unwrap();
        let pem = key_to_pem(&key);
        assert!(pem.starts_with("-----BEGIN PRIVATE KEY-----\n"));
        let back = key_from_pem(pem.as_bytes()).unwrap();
        assert_eq!(back.public_key(), key.public_key());
        assert_eq!(key_from_pem(b"junk").unwrap_err(), KeyFileError::NotPem);
    }
}
