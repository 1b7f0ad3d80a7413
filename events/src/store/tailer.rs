//! The exact tailer: every committed event exactly once, in commit-visibility order.
//!
//! Positions are assigned at insert and become visible at commit, so on Postgres a transaction
//! can commit a lower position after a higher one was read; "position > last seen" would skip it.
//! The Postgres cursor is therefore a pair of snapshots instead of a position:
//!
//! - `floor`: a `pg_snapshot` whose visible transactions are all delivered;
//! - `ceiling`: a later snapshot being delivered now, with `after` = the last (tx id, position)
//!   handed out from the difference.
//!
//! One step reads the rows whose writing transaction is invisible in `floor` and visible in
//! `ceiling` (exactly those that committed between the two), in (tx id, position) order, a page
//! at a time; when the difference is exhausted the ceiling becomes the floor. A rolled-back
//! transaction is never visible, so it is never delivered and never waited for; a transaction
//! still open at `ceiling` stays in the next floor's in-progress list and is delivered by the
//! step after it commits. On SQLite the single writer makes the position itself exact.
//!
//! The cursor is plain text ([`TailCursor`]'s `Display` / `FromStr`), so a consumer can store it
//! next to what it built and resume after a restart.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use super::{LogStore, Result, StoreError};
use crate::envelope::RecordedEvent;

/// Where a tailer is. Resumable: store `to_string()` and parse it back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TailCursor {
    Postgres {
        /// Every transaction visible in this snapshot is delivered.
        floor: String,
        /// The snapshot being delivered, when a step stopped in the middle of it.
        ceiling: Option<String>,
        /// The last (tx id, position) delivered from the floor..ceiling difference.
        after: (u64, i64),
    },
    Sqlite {
        /// Every position up to this one is delivered.
        after: i64,
    },
}

impl TailCursor {
    pub(crate) fn backend_name(&self) -> &'static str {
        match self {
            TailCursor::Postgres { .. } => "postgres",
            TailCursor::Sqlite { .. } => "sqlite",
        }
    }
}

impl fmt::Display for TailCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TailCursor::Postgres {
                floor,
                ceiling,
                after,
            } => write!(
                f,
                "pg1;{floor};{};{};{}",
                ceiling.as_deref().unwrap_or("-"),
                after.0,
                after.1
            ),
            TailCursor::Sqlite { after } => write!(f, "sqlite1;{after}"),
        }
    }
}

impl FromStr for TailCursor {
    type Err = StoreError;

    fn from_str(s: &str) -> Result<Self> {
        let bad = |why| StoreError::BadCursor {
            cursor: s.to_string(),
            why,
        };
        let parts: Vec<&str> = s.split(';').collect();
        match parts.as_slice() {
            ["sqlite1", after] => Ok(TailCursor::Sqlite {
                after: after.parse().map_err(|_| bad("position is not a number"))?,
            }),
            ["pg1", floor, ceiling, tx, position] => {
                let snapshot_ok = |v: &str| {
                    let f: Vec<&str> = v.split(':').collect();
                    f.len() == 3
                        && f[0].parse::<u64>().is_ok()
                        && f[1].parse::<u64>().is_ok()
                        && (f[2].is_empty() || f[2].split(',').all(|x| x.parse::<u64>().is_ok()))
                };
                if !snapshot_ok(floor) {
                    return Err(bad("floor is not a pg_snapshot (xmin:xmax:xip,...)"));
                }
                let ceiling = match *ceiling {
                    "-" => None,
                    c if snapshot_ok(c) => Some(c.to_string()),
                    _ => return Err(bad("ceiling is not a pg_snapshot")),
                };
                Ok(TailCursor::Postgres {
                    floor: floor.to_string(),
                    ceiling,
                    after: (
                        tx.parse().map_err(|_| bad("tx id is not a number"))?,
                        position
                            .parse()
                            .map_err(|_| bad("position is not a number"))?,
                    ),
                })
            }
            _ => Err(bad(
                "expected pg1;FLOOR;CEILING;TX;POSITION or sqlite1;POSITION",
            )),
        }
    }
}

/// How a tailer pages and waits.
#[derive(Clone, Copy, Debug)]
pub struct TailerOptions {
    /// Most events per step.
    pub batch: u32,
    /// How often to look for commits of other processes when nothing woke the tailer.
    pub poll_interval: Duration,
}

impl Default for TailerOptions {
    fn default() -> Self {
        TailerOptions {
            batch: 1000,
            poll_interval: Duration::from_millis(20),
        }
    }
}

/// Follows a log store from a cursor.
pub struct Tailer<S: LogStore> {
    store: S,
    cursor: TailCursor,
    options: TailerOptions,
    wake: tokio::sync::watch::Receiver<u64>,
}

impl<S: LogStore> Tailer<S> {
    pub fn new(store: S, cursor: TailCursor, options: TailerOptions) -> Self {
        let wake = store.commit_signal();
        Tailer {
            store,
            cursor,
            options,
            wake,
        }
    }

    /// The cursor after everything handed out so far.
    pub fn cursor(&self) -> &TailCursor {
        &self.cursor
    }

    /// One step without waiting: the events that became visible (possibly none).
    pub async fn poll(&mut self) -> Result<Vec<RecordedEvent>> {
        let (events, next) = self
            .store
            .tail_step(&self.cursor, self.options.batch)
            .await?;
        self.cursor = next;
        Ok(events)
    }

    /// Waits until at least one event is visible past the cursor and returns a batch of them.
    /// Wakes on a commit in this process at once, and polls for other processes' commits.
    pub async fn next_batch(&mut self) -> Result<Vec<RecordedEvent>> {
        loop {
            // Mark the signal seen before reading, so a commit during the read wakes us again.
            self.wake.borrow_and_update();
            let events = self.poll().await?;
            if !events.is_empty() {
                return Ok(events);
            }
            if matches!(
                self.cursor,
                TailCursor::Postgres {
                    ceiling: Some(_),
                    ..
                }
            ) {
                continue;
            }
            tokio::select! {
                _ = self.wake.changed() => {}
                _ = tokio::time::sleep(self.options.poll_interval) => {}
            }
        }
    }
}
