//! The snapshot an exact tail step compares with, taken on a hot standby.
//!
//! On a standby, `pg_current_snapshot()` gets `xmin` and `xmax` right but leaves the list of
//! transactions in progress empty: in recovery Postgres keeps them in the snapshot's `subxip`
//! array, which `pg_current_snapshot()` does not copy (PostgreSQL 15, `xid8funcs.c`). A tailer
//! comparing such snapshots takes a transaction still open on the primary for a finished one,
//! and skips its events for good once it commits (seen in `cli/tests/replica_e2e.rs`: a
//! revocation never reached the gateway).
//!
//! So on a standby the snapshot is rebuilt in one statement, from the server's own visibility:
//! `xmin` and `xmax` as reported, and as in progress every transaction id in `[xmin, xmax)`
//! whose events that same statement does not see. A transaction that wrote no event, or rolled
//! back, is then listed as in progress too, which costs nothing: it never has rows to deliver.

use std::collections::BTreeSet;

use super::super::{Result, StoreError};

/// Transaction ids in `[xmin, xmax)` past which the rebuilt snapshot is refused: a transaction
/// held open on the primary for that long holds the standby's `xmin` back.
pub const MAX_WINDOW: u64 = 100_000;

/// `xmin`, `xmax` and the transaction ids of the events visible between them, in one statement
/// (one snapshot) on the standby.
pub(super) const SNAPSHOT_SQL: &str =
    "SELECT pg_snapshot_xmin(s)::text, pg_snapshot_xmax(s)::text, \
     ARRAY(SELECT DISTINCT tx_id::text FROM events \
           WHERE tx_id >= pg_snapshot_xmin(s) AND tx_id < pg_snapshot_xmax(s)) \
     FROM pg_current_snapshot() AS s";

/// The `pg_snapshot` text `xmin:xmax:xip,...` with every id of `[xmin, xmax)` not in `visible`
/// in progress.
pub fn rebuild(xmin: &str, xmax: &str, visible: &[String]) -> Result<String> {
    let id = |v: &str| {
        v.parse::<u64>()
            .map_err(|_| StoreError::BadSnapshot(format!("{xmin}:{xmax} ({v:?})")))
    };
    let (lo, hi) = (id(xmin)?, id(xmax)?);
    if hi < lo {
        return Err(StoreError::BadSnapshot(format!("{xmin}:{xmax}")));
    }
    if hi - lo > MAX_WINDOW {
        return Err(StoreError::ReplicaWindowTooWide { xmin: lo, xmax: hi });
    }
    let seen = visible
        .iter()
        .map(|v| id(v))
        .collect::<Result<BTreeSet<u64>>>()?;
    let open: Vec<String> = (lo..hi)
        .filter(|x| !seen.contains(x))
        .map(|x| x.to_string())
        .collect();
    Ok(format!("{lo}:{hi}:{}", open.join(",")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn ids_without_visible_events_are_in_progress() {
        assert_eq!(
            rebuild("10", "15", &ids(&["11", "13"])).unwrap(),
            "10:15:10,12,14"
        );
        assert_eq!(rebuild("10", "12", &ids(&["10", "11"])).unwrap(), "10:12:");
        assert_eq!(rebuild("7", "7", &[]).unwrap(), "7:7:");
    }

    #[test]
    fn refuses_what_is_not_a_snapshot() {
        assert!(matches!(
            rebuild("x", "7", &[]),
            Err(StoreError::BadSnapshot(_))
        ));
        assert!(matches!(
            rebuild("9", "7", &[]),
            Err(StoreError::BadSnapshot(_))
        ));
        assert!(matches!(
            rebuild("1", "7", &ids(&["q"])),
            Err(StoreError::BadSnapshot(_))
        ));
    }

    #[test]
    fn refuses_a_window_wider_than_the_bound() {
        assert!(matches!(
            rebuild("1", &(2 + MAX_WINDOW).to_string(), &[]),
            Err(StoreError::ReplicaWindowTooWide { xmin: 1, xmax }) if xmax == 2 + MAX_WINDOW
        ));
    }
}
