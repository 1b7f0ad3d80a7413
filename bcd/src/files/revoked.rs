//! `revoked.json`: what `bcd node` saw when the control plane revoked this node's certificate,
//! kept in the data directory so `bcd status`, `bcd doctor` and `bcd join` can say so.
//!
//! `bcd node` writes it (atomically, 0600) when a session ends with a `RevocationNotice` or the
//! gateway refuses the certificate at the handshake as revoked, then exits 1. It names the serial
//! it is about: a record for another serial (the node joined again since) is ignored, so nothing
//! has to remove it. Nothing on the node deletes or renames the identity (spec 002).

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::files::{DataDir, FileError};

/// `revoked.json`.
pub const REVOKED_FILE: &str = "revoked.json";
/// Largest `revoked.json` read.
const MAX_RECORD_LEN: u64 = 64 * 1024;

/// The way back from a revoked certificate (spec 002, "Revocation"): fresh evidence only.
pub const REVOKED_WAY_BACK: &str = "the revoked certificate cannot renew or open a session again; \
join again with fresh evidence: bcd join --reset --yes, then bcd join with a new token (bcctl \
token create on the control plane) or --attestor tpm";

/// The record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RevocationRecord {
    /// The revoked certificate's serial, hex.
    pub serial: String,
    /// The reason the gateway gave.
    pub reason: String,
    /// When bcd saw it, RFC 3339.
    pub seen_at: String,
}

/// Writes `revoked.json` for `serial`.
pub fn record(
    dir: &DataDir,
    serial: &str,
    reason: &str,
    now: OffsetDateTime,
) -> Result<(), FileError> {
    let record = RevocationRecord {
        serial: serial.to_owned(),
        reason: reason.to_owned(),
        seen_at: crate::node::rfc3339(now),
    };
    let mut bytes = serde_json::to_vec_pretty(&record).unwrap_or_default();
    bytes.push(b'\n');
    dir.write(REVOKED_FILE, &bytes)
}

/// The record for the certificate with `serial`, if `bcd node` saw it revoked. A missing,
/// unreadable or foreign record is none.
pub fn revoked(dir: &DataDir, serial: &str) -> Option<RevocationRecord> {
    let bytes = dir.read(REVOKED_FILE, MAX_RECORD_LEN).ok()?;
    let record: RevocationRecord = serde_json::from_slice(&bytes).ok()?;
    record.serial.eq_ignore_ascii_case(serial).then_some(record)
}

impl RevocationRecord {
    /// `the certificate (serial S) was revoked: REASON (seen at T)`.
    pub fn describe(&self) -> String {
        format!(
            "the certificate (serial {}) was revoked: {} (seen by bcd node at {})",
            self.serial, self.reason, self.seen_at
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    #[test]
    fn a_record_counts_only_for_its_serial() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = DataDir::new(tmp.path());
        assert_eq!(revoked(&dir, "0a"), None);
        record(
            &dir,
            "0a",
            "revoked by an operator",
            datetime!(2026-01-02 03:04:05 UTC),
        )
        .unwrap();
        let r = revoked(&dir, "0A").unwrap();
        assert_eq!(r.seen_at, "2026-01-02T03:04:05Z");
        assert_eq!(
            r.describe(),
            "the certificate (serial 0a) was revoked: revoked by an operator (seen by bcd node at \
             2026-01-02T03:04:05Z)"
        );
        assert_eq!(revoked(&dir, "0b"), None);
        assert_eq!(dir.mode(REVOKED_FILE), Some(0o600));
    }
}
