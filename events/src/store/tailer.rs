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

use std::time::Duration;

use super::{LogStore, Result, TailCursor};
use crate::envelope::RecordedEvent;

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
