//! `bcd join --reset [--yes]`: moves an identity aside so the machine can join again.
//!
//! `identity.json`, `node.key`, `node.key.next`, `journal.db` and `join.pending`, whichever
//! exist, are each renamed `<name>.reset-<UTC time>` (`YYYYMMDDTHHMMSSZ`, for example
//! `node.key.reset-20260926T114200Z`). Nothing is deleted. [`plan`] says what would move;
//! [`ResetPlan::execute`] moves it (each rename followed by a directory fsync), `identity.json`
//! last (see [`RESET_FILES`]), so a reset killed half-way leaves the old identity or nothing of
//! it, never its key or journal beside the next identity. A plan whose targets already exist
//! (two resets in the same second) is refused before anything moves.

use std::fmt::Write as _;

use time::macros::format_description;
use time::OffsetDateTime;

use crate::files::{DataDir, FileError, IDENTITY_FILE, JOURNAL_FILE, NEXT_KEY_FILE, NODE_KEY_FILE};
use crate::join::pending::JOIN_PENDING_FILE;

/// The files a reset moves, in the order it moves them: `identity.json` last. Until it moves,
/// the old identity is still there (whole, or without its key, and then `bcd join` says to
/// reset again); once it moved, nothing of the old identity is left under its own name. Moved
/// first, a reset killed half-way would leave the old key and journal behind for the next join
/// to overwrite the one and adopt the other. A request kept unanswered (`join.pending`) moves
/// first: the next join makes a new key.
pub const RESET_FILES: [&str; 5] = [
    JOIN_PENDING_FILE,
    JOURNAL_FILE,
    NEXT_KEY_FILE,
    NODE_KEY_FILE,
    IDENTITY_FILE,
];

/// The refusal of a non-root `bcd join --reset` (spec 002 "Joining again with --reset").
pub const RESET_NOT_ROOT: &str = "bcd join --reset: run it as root";

/// The exit code of `bcd join --reset` without `--yes`.
pub const DRY_RUN_EXIT: i32 = 2;

/// Why a reset could not move the files.
#[derive(Debug, thiserror::Error)]
pub enum ResetError {
    /// A target name is taken.
    #[error("{0} already exists (a reset in the same second?); nothing was moved, run it again")]
    TargetExists(String),
    /// A rename failed; the files listed before it were moved.
    #[error("{source} (already moved: {moved})")]
    Move {
        /// Cause.
        source: FileError,
        /// What had moved before the failure.
        moved: String,
    },
}

/// One rename.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    /// The file's name.
    pub from: String,
    /// Its name after the reset.
    pub to: String,
}

/// What a reset moves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResetPlan {
    dir: DataDir,
    /// The renames, in order.
    pub moves: Vec<Move>,
}

/// `YYYYMMDDTHHMMSSZ` of `now` in UTC.
pub fn reset_suffix(now: OffsetDateTime) -> String {
    let utc = now.to_offset(time::UtcOffset::UTC);
    let format = format_description!("[year][month][day]T[hour][minute][second]Z");
    // The format has only numeric components of a valid date: it cannot fail for years 0..=9999.
    utc.format(&format)
        .unwrap_or_else(|_| utc.unix_timestamp().to_string())
}

/// What a reset at `now` would move in `dir`.
pub fn plan(dir: &DataDir, now: OffsetDateTime) -> ResetPlan {
    let suffix = reset_suffix(now);
    let moves = RESET_FILES
        .iter()
        .filter(|name| dir.exists(name))
        .map(|name| Move {
            from: (*name).to_owned(),
            to: format!("{name}.reset-{suffix}"),
        })
        .collect();
    ResetPlan {
        dir: dir.clone(),
        moves,
    }
}

impl ResetPlan {
    /// Whether there is nothing to move.
    pub fn is_empty(&self) -> bool {
        self.moves.is_empty()
    }

    /// The dry run's text (without `--yes`).
    pub fn describe_dry_run(&self) -> String {
        let mut out = String::new();
        if self.moves.is_empty() {
            let _ = writeln!(
                out,
                "bcd join --reset: {} holds no identity; nothing would move",
                self.dir.root().display()
            );
        } else {
            let _ = writeln!(
                out,
                "bcd join --reset would move, in {}:",
                self.dir.root().display()
            );
            for m in &self.moves {
                let _ = writeln!(out, "  {} -> {}", m.from, m.to);
            }
        }
        let _ = writeln!(
            out,
            "The following join makes a new key and joins again: a new node, unless the \
             attestor proves this machine and reclaims it. Nothing is deleted."
        );
        let _ = writeln!(out, "Run it again with --yes to move the files and join.");
        out
    }

    /// Moves the files. Refuses before moving anything when a target exists.
    pub fn execute(&self) -> Result<Vec<Move>, ResetError> {
        if let Some(taken) = self.moves.iter().find(|m| self.dir.exists(&m.to)) {
            return Err(ResetError::TargetExists(
                self.dir.file(&taken.to).display().to_string(),
            ));
        }
        let mut done = Vec::new();
        for m in &self.moves {
            self.dir
                .rename(&m.from, &m.to)
                .map_err(|source| ResetError::Move {
                    source,
                    moved: if done.is_empty() {
                        "nothing".to_owned()
                    } else {
                        done.iter()
                            .map(|d: &Move| d.from.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    },
                })?;
            #[cfg(debug_assertions)]
            crate::fault::point(&format!("reset:moved:{}", m.from));
            done.push(m.clone());
        }
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    #[test]
    fn suffix_format() {
        assert_eq!(
            reset_suffix(datetime!(2026-09-26 11:42:00 UTC)),
            "20260926T114200Z"
        );
        assert_eq!(
            reset_suffix(datetime!(2026-09-26 13:42:00 +02:00)),
            "20260926T114200Z"
        );
    }

    #[test]
    fn plan_only_existing_and_refuse_taken_targets() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = DataDir::new(tmp.path());
        dir.write(NODE_KEY_FILE, b"k").unwrap();
        dir.write(JOURNAL_FILE, b"j").unwrap();
        let now = datetime!(2026-09-26 11:42:00 UTC);
        let p = plan(&dir, now);
        assert_eq!(p.moves.len(), 2);
        dir.write("journal.db.reset-20260926T114200Z", b"x")
            .unwrap();
        assert!(matches!(p.execute(), Err(ResetError::TargetExists(_))));
        assert!(dir.exists(NODE_KEY_FILE));
    }
}
