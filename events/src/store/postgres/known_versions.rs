//! Stream versions this store has seen committed, so that an append need not look for them.
//!
//! An append that expects version `v` of a stream must refuse when the stream is behind `v`:
//! the statement checks that `(stream, v)` exists, an index probe that was about an eighth of
//! the server's time per one-event append (pgbench, DECISIONS.md). But the database refuses
//! every UPDATE, DELETE and TRUNCATE of the log, so once version `v` has been committed it
//! exists for good: a store that has seen it committed (its own transaction committed it, or it
//! read it outside any transaction) can skip the probe. A stream that moved on since is still
//! caught, by the unique `(stream_id, stream_version)` key, as before.
//!
//! What it must never hold is a version that was not committed: a transaction's appends are
//! recorded only once its COMMIT succeeded. The map is bounded; when it is full it is emptied,
//! which only costs the probes again. It lives as long as the store: a database restored to an
//! earlier point under a running process would leave it ahead of the log, so processes must be
//! restarted after such a restore.

use std::collections::HashMap;
use std::sync::Mutex;

/// At most this many streams are remembered (about 6 MB with 64-byte stream names).
const CAPACITY: usize = 65_536;

/// Stream → the highest version seen committed.
#[derive(Debug, Default)]
pub(super) struct KnownVersions {
    streams: Mutex<HashMap<Box<str>, u64>>,
}

impl KnownVersions {
    /// True when `version` of `stream` is known to be committed (0, no stream, always is).
    pub(super) fn covers(&self, stream: &str, version: u64) -> bool {
        if version == 0 {
            return true;
        }
        // A poisoned lock only means a panic elsewhere while recording: treat as unknown.
        self.streams
            .lock()
            .ok()
            .and_then(|m| m.get(stream).copied())
            .is_some_and(|known| known >= version)
    }

    /// Records that `version` of `stream` is committed.
    pub(super) fn record(&self, stream: &str, version: u64) {
        if version == 0 {
            return;
        }
        let Ok(mut streams) = self.streams.lock() else {
            return;
        };
        if let Some(known) = streams.get_mut(stream) {
            *known = (*known).max(version);
            return;
        }
        if streams.len() >= CAPACITY {
            streams.clear();
        }
        streams.insert(stream.into(), version);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn covers_only_what_was_recorded() {
        let known = KnownVersions::default();
        assert!(known.covers("s", 0));
        assert!(!known.covers("s", 1));
        known.record("s", 3);
        assert!(known.covers("s", 1));
        assert!(known.covers("s", 3));
        assert!(!known.covers("s", 4));
        // A lower version seen later never lowers what is known.
        known.record("s", 2);
        assert!(known.covers("s", 3));
        assert!(!known.covers("t", 1));
    }

    #[test]
    fn a_full_map_starts_over() {
        let known = KnownVersions::default();
        for i in 0..CAPACITY {
            known.record(&format!("s{i}"), 1);
        }
        assert!(known.covers("s0", 1));
        known.record("one-more", 1);
        assert!(!known.covers("s0", 1));
        assert!(known.covers("one-more", 1));
    }
}
