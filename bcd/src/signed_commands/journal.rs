//! `journal.db`: the commands this node ran, so each runs at most once across redeliveries and
//! restarts (spec 003 "On the machine").
//!
//! A SQLite file in the data directory (mode 0600, `synchronous = FULL`), for one node only: the
//! node id is written on first open and a journal of another node is refused
//! ([`JournalError::OtherNode`]). A command is recorded `started` (durably) before anything of it
//! runs and `finished` with its encoded `CommandResult` after. A redelivery of a finished command
//! re-sends the stored result; a command found `started` when the journal is opened at start-up
//! ([`Journal::sweep_interrupted`]) is marked finished as failed ("interrupted: bcd stopped
//! while it ran") and never run again. Rejections run nothing and are not journalled.
//!
//! The journal also keeps the highest signed time the node has seen from its commands (the issue
//! time of each command that verified; `meta` key `signed_time_ms`), the high-water mark the
//! command runner judges at ([`crate::clock::TrustedClock`]) so a restart does not reset it;
//! each Welcome mirrors it into `identity.json`'s `serverTime`, so a lost journal does not either.
//!
//! Each journal has a random `journal_id` (in its `meta` table). A journal SQLite finds corrupt
//! or not a database "starts over with a new journal id" (spec 002): the file is moved aside as
//! `journal.db.corrupt-<unix time>` and a new one is made; the identity is untouched.

use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The journal's schema, kept with the project's other schemas (`migrations/bcd/`).
const JOURNAL_SCHEMA: &str = include_str!("../../../migrations/bcd/0001_journal.sql");

use prost::Message as _;
use rusqlite::{params, Connection, OptionalExtension};

/// The mode of `journal.db`.
pub const JOURNAL_MODE: u32 = 0o600;
/// The detail of a command that was running when bcd stopped.
pub const INTERRUPTED_DETAIL: &str = "interrupted: bcd stopped while it ran";

/// Why the journal cannot be used. Commands are refused while it is unusable.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// SQLite failed.
    #[error("{path}: {action}: {source}; commands are not run until journal.db can be used")]
    Sqlite {
        /// The journal's path.
        path: PathBuf,
        /// What was being done.
        action: &'static str,
        /// Cause.
        source: rusqlite::Error,
    },
    /// The file could not be created with mode 0600.
    #[error("{path}: cannot create the journal: {source}")]
    Create {
        /// The journal's path.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// The journal belongs to another node.
    #[error("{path} is the journal of node {found}, this node is {expected}; move it away (it belongs to an earlier identity) and restart bcd")]
    OtherNode {
        /// The journal's path.
        path: PathBuf,
        /// The node it names.
        found: String,
        /// This node.
        expected: String,
    },
    /// A stored result does not decode.
    #[error("{path}: the stored result of {command_id} does not decode: {why}")]
    Corrupt {
        /// The journal's path.
        path: PathBuf,
        /// The command.
        command_id: String,
        /// The decoder's message.
        why: String,
    },
}

/// Where a journalled command stands.
#[derive(Debug, Clone, PartialEq)]
pub enum Entry {
    /// Recorded before running; no result yet.
    Started,
    /// Ran (or was interrupted); its result.
    Finished(proto::CommandResult),
}

/// An open `journal.db`.
pub struct Journal {
    conn: Connection,
    path: PathBuf,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// What [`Journal::open_or_restart`] did with a corrupt journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restarted {
    /// Where the corrupt file was moved.
    pub moved_to: PathBuf,
    /// Why SQLite refused it.
    pub why: String,
}

fn is_corrupt(error: &JournalError) -> bool {
    matches!(
        error,
        JournalError::Sqlite {
            source: rusqlite::Error::SqliteFailure(e, _),
            ..
        } if matches!(e.code, rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase)
    )
}

impl Journal {
    /// [`Journal::open`]; a journal SQLite finds corrupt is moved aside and started over.
    pub fn open_or_restart(
        path: &Path,
        node_id: &str,
        now_unix: i64,
    ) -> Result<(Journal, Option<Restarted>), JournalError> {
        match Journal::open(path, node_id) {
            Ok(journal) => Ok((journal, None)),
            Err(e) if is_corrupt(&e) => {
                let moved_to = PathBuf::from(format!("{}.corrupt-{now_unix}", path.display()));
                std::fs::rename(path, &moved_to).map_err(|source| JournalError::Create {
                    path: path.to_owned(),
                    source,
                })?;
                let journal = Journal::open(path, node_id)?;
                Ok((
                    journal,
                    Some(Restarted {
                        moved_to,
                        why: e.to_string(),
                    }),
                ))
            }
            Err(e) => Err(e),
        }
    }

    /// This journal's id.
    pub fn journal_id(&self) -> Result<String, JournalError> {
        self.conn
            .query_row(
                "SELECT value FROM meta WHERE key = 'journal_id'",
                [],
                |row| row.get(0),
            )
            .map_err(self.sql("read its journal id"))
    }

    /// Opens (creating, 0600) the journal at `path` for `node_id`.
    pub fn open(path: &Path, node_id: &str) -> Result<Journal, JournalError> {
        if !path.exists() {
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .mode(JOURNAL_MODE)
                .open(path)
                .map_err(|source| JournalError::Create {
                    path: path.to_owned(),
                    source,
                })?;
        }
        // A journal copied in with looser permissions is tightened.
        let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(JOURNAL_MODE));
        let sql = |action: &'static str| {
            let path = path.to_owned();
            move |source| JournalError::Sqlite {
                path,
                action,
                source,
            }
        };
        let conn = Connection::open(path).map_err(sql("open"))?;
        conn.execute_batch(JOURNAL_SCHEMA)
            .map_err(sql("create its tables"))?;
        let found: Option<String> = conn
            .query_row("SELECT value FROM meta WHERE key = 'node_id'", [], |row| {
                row.get(0)
            })
            .optional()
            .map_err(sql("read its node id"))?;
        match found {
            Some(found) if found != node_id => {
                return Err(JournalError::OtherNode {
                    path: path.to_owned(),
                    found,
                    expected: node_id.to_owned(),
                })
            }
            Some(_) => {}
            None => {
                let journal_id = domain::pki::Serial::generate()
                    .map(|s| s.to_hex())
                    .unwrap_or_else(|_| format!("{:x}", std::process::id()));
                conn.execute(
                    "INSERT INTO meta (key, value) VALUES ('node_id', ?1), ('journal_id', ?2)",
                    params![node_id, journal_id],
                )
                .map_err(sql("record its node id"))?;
            }
        }
        Ok(Journal {
            conn,
            path: path.to_owned(),
        })
    }

    fn sql(&self, action: &'static str) -> impl FnOnce(rusqlite::Error) -> JournalError {
        let path = self.path.clone();
        move |source| JournalError::Sqlite {
            path,
            action,
            source,
        }
    }

    /// Marks every `started` command finished as failed ([`INTERRUPTED_DETAIL`]); returns their
    /// results. Called once when bcd starts, before any command runs.
    pub fn sweep_interrupted(
        &mut self,
        now_ms: i64,
    ) -> Result<Vec<proto::CommandResult>, JournalError> {
        let started: Vec<(String, i64)> = {
            let mut stmt = self
                .conn
                .prepare("SELECT command_id, started_at_ms FROM commands WHERE state = 'started'")
                .map_err(self.sql("read started commands"))?;
            let rows = stmt
                .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
                .map_err(self.sql("read started commands"))?;
            rows.collect::<Result<_, _>>()
                .map_err(self.sql("read started commands"))?
        };
        let mut results = Vec::with_capacity(started.len());
        for (command_id, started_at_ms) in started {
            let result = proto::CommandResult {
                command_id: command_id.clone(),
                outcome: proto::CommandOutcome::Failed as i32,
                detail: INTERRUPTED_DETAIL.to_owned(),
                started_at_ms,
                finished_at_ms: now_ms,
                ..Default::default()
            };
            self.finish(&result)?;
            results.push(result);
        }
        Ok(results)
    }

    /// The entry of `command_id`, if journalled.
    pub fn entry(&self, command_id: &str) -> Result<Option<Entry>, JournalError> {
        let row: Option<(String, Option<Vec<u8>>)> = self
            .conn
            .query_row(
                "SELECT state, result FROM commands WHERE command_id = ?1",
                params![command_id],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .optional()
            .map_err(self.sql("read a command"))?;
        match row {
            None => Ok(None),
            Some((state, _)) if state == "started" => Ok(Some(Entry::Started)),
            Some((_, bytes)) => {
                let bytes = bytes.unwrap_or_default();
                proto::CommandResult::decode(bytes.as_slice())
                    .map(|r| Some(Entry::Finished(r)))
                    .map_err(|e| JournalError::Corrupt {
                        path: self.path.clone(),
                        command_id: command_id.to_owned(),
                        why: e.to_string(),
                    })
            }
        }
    }

    /// Records `command_id` started (durably, before it runs).
    pub fn start(&self, command_id: &str, kind: &str, now_ms: i64) -> Result<(), JournalError> {
        self.conn
            .execute(
                "INSERT INTO commands (command_id, kind, state, started_at_ms) \
                 VALUES (?1, ?2, 'started', ?3)",
                params![command_id, kind, now_ms],
            )
            .map_err(self.sql("record a command started"))?;
        Ok(())
    }

    /// Records a command's result.
    pub fn finish(&self, result: &proto::CommandResult) -> Result<(), JournalError> {
        self.conn
            .execute(
                "UPDATE commands SET state = 'finished', result = ?2 WHERE command_id = ?1",
                params![result.command_id, result.encode_to_vec()],
            )
            .map_err(self.sql("record a command's result"))?;
        Ok(())
    }

    /// The highest signed time recorded ([`Journal::raise_signed_time`]), Unix ms.
    pub fn signed_time_ms(&self) -> Result<Option<i64>, JournalError> {
        let value: Option<String> = self
            .conn
            .query_row(
                "SELECT value FROM meta WHERE key = 'signed_time_ms'",
                [],
                |row| row.get(0),
            )
            .optional()
            .map_err(self.sql("read its signed time"))?;
        // A value that does not parse counts as none: the mark only ever adds a lower bound.
        Ok(value.and_then(|v| v.parse().ok()))
    }

    /// Raises the signed-time high-water mark to `ms` (never lowers it); durable before it
    /// returns.
    pub fn raise_signed_time(&self, ms: i64) -> Result<(), JournalError> {
        if self.signed_time_ms()?.is_some_and(|held| held >= ms) {
            return Ok(());
        }
        self.conn
            .execute(
                "INSERT INTO meta (key, value) VALUES ('signed_time_ms', ?1) \
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                params![ms.to_string()],
            )
            .map_err(self.sql("record its signed time"))?;
        Ok(())
    }

    /// How many commands are journalled (`started`, `finished`).
    pub fn counts(&self) -> Result<(u64, u64), JournalError> {
        let count = |state: &str| -> Result<u64, JournalError> {
            self.conn
                .query_row(
                    "SELECT COUNT(*) FROM commands WHERE state = ?1",
                    params![state],
                    |row| row.get::<_, i64>(0),
                )
                .map(|n| u64::try_from(n).unwrap_or(0))
                .map_err(self.sql("count commands"))
        };
        Ok((count("started")?, count("finished")?))
    }
}
