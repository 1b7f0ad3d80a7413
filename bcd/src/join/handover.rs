//! The hand-over (spec 002 "What the join does", step 7): under `[helper]`, `bcd join` runs as
//! root and, once the identity is stored, gives the data directory and the files `bcd node`
//! rewrites to the `[helper] user`, so the unprivileged `bcd node` can read and replace them.
//!
//! Each is `lchown`ed (never followed): a name swapped for a symlink changes only the link, not
//! the file it points at. What is handed over, whichever exist: the data directory itself,
//! `identity.json`, `node.key`, `node.key.next`, `journal.db` (and SQLite's `-wal`, `-shm`,
//! `-journal` beside it), `revoked.json`, `approver-set.json`, and the `[files]` PEMs. Files
//! `--reset` moved aside (`*.reset-<time>`) stay root's.

use std::os::unix::fs::lchown;
use std::path::{Path, PathBuf};

use crate::files::pem_files::FileSettings;
use crate::files::revoked::REVOKED_FILE;
use crate::files::{DataDir, IDENTITY_FILE, JOURNAL_FILE, NEXT_KEY_FILE, NODE_KEY_FILE};
use crate::helper::privilege::SystemUser;
use crate::trust::approver_set::APPROVER_SET_FILE;

/// The data directory's files handed over, when they exist.
pub const HANDED_OVER: [&str; 9] = [
    IDENTITY_FILE,
    NODE_KEY_FILE,
    NEXT_KEY_FILE,
    JOURNAL_FILE,
    "journal.db-wal",
    "journal.db-shm",
    "journal.db-journal",
    REVOKED_FILE,
    APPROVER_SET_FILE,
];

/// A hand-over that failed.
#[derive(Debug, thiserror::Error)]
#[error("{}: cannot give it to {user} (uid {uid}): {source}", path.display())]
pub struct HandOverError {
    /// The file or directory.
    pub path: PathBuf,
    /// The user's name.
    pub user: String,
    /// Its uid.
    pub uid: u32,
    /// Cause.
    pub source: std::io::Error,
}

/// Gives the data directory and what `bcd node` rewrites in it (and the `[files]` PEMs) to
/// `user` and its primary group, without following symlinks. Returns what it changed, in order.
pub fn hand_over(
    dir: &DataDir,
    files: &FileSettings,
    user: &SystemUser,
) -> Result<Vec<PathBuf>, HandOverError> {
    let mut paths = vec![dir.root().to_path_buf()];
    paths.extend(
        HANDED_OVER
            .iter()
            .filter(|name| dir.exists(name))
            .map(|name| dir.file(name)),
    );
    for pem in [&files.cert, &files.key, &files.bundle] {
        if std::fs::symlink_metadata(pem).is_ok() && !paths.contains(pem) {
            paths.push(pem.clone());
        }
    }
    for path in &paths {
        give(path, user)?;
    }
    Ok(paths)
}

fn give(path: &Path, user: &SystemUser) -> Result<(), HandOverError> {
    lchown(path, Some(user.uid), Some(user.gid)).map_err(|source| HandOverError {
        path: path.to_owned(),
        user: user.name.clone(),
        uid: user.uid,
        source,
    })
}

/// Who `bcd join` hands the identity to: `None` without `[helper]`; under it the `[helper] user`
/// when this process is root. Refused (before a token is read) when a non-root process would
/// store an identity it cannot hand over, or when the user does not exist.
pub fn join_hand_over_to(
    helper: Option<&crate::helper::settings::HelperSettings>,
    root: bool,
) -> Result<Option<SystemUser>, String> {
    let Some(helper) = helper else {
        return Ok(None);
    };
    if !root {
        let uid = crate::helper::privilege::euid();
        return Err(format!(
            "bcd join: [helper] user is {user}: the join stores the identity and hands it over \
             to {user}, and only root can do that; this process runs as {name} (uid {uid}): run \
             bcd join as root; nothing was read or sent",
            user = helper.user,
            name = crate::helper::privilege::user_name(uid),
        ));
    }
    SystemUser::by_name(&helper.user)
        .map(Some)
        .map_err(|e| format!("bcd join: [helper] user: {e}; nothing was read or sent"))
}
