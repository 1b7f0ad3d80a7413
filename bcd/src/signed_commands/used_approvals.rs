//! The approvals destructive commands used, kept in bcd's data directory: the quorum check's
//! persisted state (issue 6, item 6).
//!
//! `domain::quorum::admit` is pure: it takes an [`AdmissionState`] and returns the next one. This
//! module keeps that state in two files of the data directory, as the spec names them:
//! `batch-leaves.json` (the used batch leaves, until their approval's not_after) and
//! `unbatched-destructive.json` (the unbatched runs of the rolling hour), so a restart neither
//! frees a used leaf nor resets the hourly count.
//!
//! - A missing file is an empty state (a new node). A file that cannot be parsed is an error,
//!   never an empty state: destructive commands stay refused until it is repaired or removed.
//! - Writes are atomic and durable: a temporary file created 0600 in the same directory, written,
//!   fsynced, renamed over the target, then the directory fsynced; a crash leaves the old file or
//!   the new one.
//! - Persist only after `admit` admitted a command ("nothing is used before admission").

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use domain::quorum::admission::{BATCH_LEAVES_FILE, UNBATCHED_FILE};
use domain::quorum::{AdmissionState, UnbatchedRuns, UsedLeaves};

/// The mode of both files.
pub const STATE_FILE_MODE: u32 = 0o600;
/// The largest state file read (50,000 used leaves fit in well under this).
pub const MAX_STATE_FILE_LEN: u64 = 64 * 1024 * 1024;

/// Why the admission state cannot be loaded or saved.
#[derive(Debug, thiserror::Error)]
pub enum AdmissionStoreError {
    /// An IO error on a path.
    #[error("{path}: {action}: {source}")]
    Io {
        path: PathBuf,
        action: &'static str,
        source: std::io::Error,
    },
    /// A state file that is not the expected JSON.
    #[error("{path} is not a valid admission state file ({why}); destructive commands stay refused until it is repaired or removed")]
    Corrupt { path: PathBuf, why: String },
    /// A state file far larger than bcd writes.
    #[error("{path} is {len} bytes, larger than bcd ever writes there; is it the right file?")]
    TooLarge { path: PathBuf, len: u64 },
}

/// The admission state files of one data directory.
#[derive(Debug, Clone)]
pub struct AdmissionStore {
    dir: PathBuf,
}

impl AdmissionStore {
    /// The store in `data_dir` (which must exist; bcd creates it 0700 at join).
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        AdmissionStore {
            dir: data_dir.into(),
        }
    }

    /// The used-leaves file.
    pub fn leaves_path(&self) -> PathBuf {
        self.dir.join(BATCH_LEAVES_FILE)
    }

    /// The unbatched-runs file.
    pub fn unbatched_path(&self) -> PathBuf {
        self.dir.join(UNBATCHED_FILE)
    }

    /// Loads both files; a missing file is empty.
    pub fn load(&self) -> Result<AdmissionState, AdmissionStoreError> {
        let leaves_path = self.leaves_path();
        let used_leaves = match read_optional(&leaves_path)? {
            None => UsedLeaves::default(),
            Some(bytes) => {
                UsedLeaves::from_json(&bytes).map_err(|e| AdmissionStoreError::Corrupt {
                    path: leaves_path.clone(),
                    why: e.to_string(),
                })?
            }
        };
        let unbatched_path = self.unbatched_path();
        let unbatched = match read_optional(&unbatched_path)? {
            None => UnbatchedRuns::default(),
            Some(bytes) => {
                UnbatchedRuns::from_json(&bytes).map_err(|e| AdmissionStoreError::Corrupt {
                    path: unbatched_path.clone(),
                    why: e.to_string(),
                })?
            }
        };
        Ok(AdmissionState {
            used_leaves,
            unbatched,
        })
    }

    /// Saves the state `admit` returned, each file atomically (only files whose content
    /// changed from `previous` are rewritten).
    pub fn save(
        &self,
        previous: &AdmissionState,
        next: &AdmissionState,
    ) -> Result<(), AdmissionStoreError> {
        if previous.used_leaves != next.used_leaves {
            let path = self.leaves_path();
            let bytes = next
                .used_leaves
                .to_json()
                .map_err(|e| AdmissionStoreError::Corrupt {
                    path: path.clone(),
                    why: e.to_string(),
                })?;
            write_atomic(&path, &bytes)?;
        }
        if previous.unbatched != next.unbatched {
            let path = self.unbatched_path();
            let bytes = next
                .unbatched
                .to_json()
                .map_err(|e| AdmissionStoreError::Corrupt {
                    path: path.clone(),
                    why: e.to_string(),
                })?;
            write_atomic(&path, &bytes)?;
        }
        Ok(())
    }
}

fn io(path: &Path, action: &'static str) -> impl FnOnce(std::io::Error) -> AdmissionStoreError {
    let path = path.to_path_buf();
    move |source| AdmissionStoreError::Io {
        path,
        action,
        source,
    }
}

fn read_optional(path: &Path) -> Result<Option<Vec<u8>>, AdmissionStoreError> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(path, "open")(e)),
    };
    let len = file.metadata().map_err(io(path, "stat"))?.len();
    if len > MAX_STATE_FILE_LEN {
        return Err(AdmissionStoreError::TooLarge {
            path: path.to_path_buf(),
            len,
        });
    }
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(MAX_STATE_FILE_LEN + 1)
        .read_to_end(&mut bytes)
        .map_err(io(path, "read"))?;
    Ok(Some(bytes))
}

/// Temp file (0600, same directory) → write → fsync → rename → fsync the directory.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), AdmissionStoreError> {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "state".to_string());
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let result = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(STATE_FILE_MODE)
            .open(&tmp)
            .map_err(io(&tmp, "create"))?;
        file.write_all(bytes).map_err(io(&tmp, "write"))?;
        file.sync_all().map_err(io(&tmp, "fsync"))?;
        fs::rename(&tmp, path).map_err(io(path, "rename into place"))?;
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io(dir, "fsync directory"))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::quorum::admission::{UnbatchedRun, UsedLeaf};
    use domain::quorum::ScopeHash;
    use std::os::unix::fs::PermissionsExt;

    fn state() -> AdmissionState {
        let mut s = AdmissionState::default();
        s.used_leaves.leaves.insert(
            ScopeHash([7; 32]),
            UsedLeaf {
                command_id: "cmd-1".into(),
                not_after_us: 42,
            },
        );
        s.unbatched.runs.push(UnbatchedRun {
            command_id: "cmd-2".into(),
            at_us: 7,
        });
        s
    }

    #[test]
    fn missing_files_are_an_empty_state() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = AdmissionStore::new(dir.path());
        assert_eq!(store.load().expect("load"), AdmissionState::default());
    }

    #[test]
    fn saved_state_loads_back_with_mode_0600() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = AdmissionStore::new(dir.path());
        let next = state();
        store.save(&AdmissionState::default(), &next).expect("save");
        assert_eq!(store.load().expect("load"), next);
        for path in [store.leaves_path(), store.unbatched_path()] {
            let mode = fs::metadata(&path).expect("stat").permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", path.display());
        }
        // No temporary files are left behind.
        let names: Vec<_> = fs::read_dir(dir.path())
            .expect("readdir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
    }

    #[test]
    fn unchanged_parts_are_not_rewritten_and_changes_replace_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = AdmissionStore::new(dir.path());
        let first = AdmissionState {
            unbatched: state().unbatched,
            ..AdmissionState::default()
        };
        store
            .save(&AdmissionState::default(), &first)
            .expect("save");
        assert!(!store.leaves_path().exists());
        let second = state();
        store.save(&first, &second).expect("save");
        assert_eq!(store.load().expect("load"), second);
    }

    #[test]
    fn a_corrupt_file_is_an_error_not_an_empty_state() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = AdmissionStore::new(dir.path());
        fs::write(store.leaves_path(), b"{ not json").expect("write");
        match store.load() {
            Err(AdmissionStoreError::Corrupt { path, .. }) => assert_eq!(path, store.leaves_path()),
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }

    #[test]
    fn a_missing_directory_is_a_typed_io_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = AdmissionStore::new(dir.path().join("absent"));
        match store.save(&AdmissionState::default(), &state()) {
            Err(AdmissionStoreError::Io { action, .. }) => assert_eq!(action, "create"),
            other => panic!("expected Io, got {other:?}"),
        }
    }
}
