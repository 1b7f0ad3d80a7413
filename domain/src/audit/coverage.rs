//! Coverage: whether a verified trail is *entirely* covered by signatures, the one-bit answer an
//! auditor acts on.
//!
//! [`super::trail::verify_trail_against`] proves that what the checkpoints sign matches the
//! leaves. That is not yet "every leaf is covered": leaves after the last checkpoint are signed by
//! nothing (a database writer can rewrite or extend them at will, and so can whoever edits an
//! export), a trail without any checkpoint is signed by nothing at all, and a trail cut back to an
//! earlier checkpoint is, on its own, a perfectly valid shorter trail. [`coverage`] decides from
//! the summary and what the auditor expects ([`Expectations`]: a checkpoint seen before, a
//! minimum size, whether an unsealed tail is accepted), in this order:
//!
//! 1. [`CoverageFault::Truncated`]: the trail's last checkpoint is smaller than a size the
//!    auditor saw signed before (a known checkpoint, or `at_least_size`);
//! 2. [`CoverageFault::NoCheckpoint`]: nothing is signed;
//! 3. [`CoverageFault::Unsealed`]: leaves after the last checkpoint (unless accepted).
//!
//! It also reads, from an event, which checkpoint an `audit.checkpoint.sealed` leaf recorded
//! ([`sealed_leaf`]), the evidence the trail verifier uses to catch removed checkpoints.

use events::schema::AuditCheckpointSealed;
use events::{EventPayload, RecordedEvent};

use super::seal::TreeHead;
use sha2::{Digest, Sha256};

use super::trail::{SealedLeaf, TrailSummary};

/// What the auditor expects of a trail besides its own consistency.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Expectations {
    /// A checkpoint the auditor saw before (signature already checked): the trail must extend it
    /// and be at least as large.
    pub known: Option<TreeHead>,
    /// The trail's last checkpoint must cover at least this many leaves.
    pub at_least_size: Option<u64>,
    /// Accept leaves after the last checkpoint (they are reported, and covered by nothing).
    pub allow_unsealed: bool,
}

/// Why a verified trail is not entirely covered by signatures.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CoverageFault {
    #[error("truncated: the trail's last checkpoint covers {signed_size} leaves, fewer than the {expected} of {against}; the trail was cut back or rolled back")]
    Truncated {
        signed_size: u64,
        expected: u64,
        /// What the expected size comes from ([`FROM_KNOWN`], [`FROM_MINIMUM`]).
        against: &'static str,
    },
    #[error("no checkpoint: none of the trail's {leaves} leaves is covered by a signature")]
    NoCheckpoint { leaves: u64 },
    #[error("{count} unsealed leaves: from index {from_index}{} on, no checkpoint signature covers them (the last checkpoint covers {signed_size})", from_position.map(|p| format!(" (position {p})")).unwrap_or_default())]
    Unsealed {
        count: u64,
        from_index: u64,
        from_position: Option<i64>,
        signed_size: u64,
    },
}

/// Where the expected size of [`CoverageFault::Truncated`] came from.
pub const FROM_KNOWN: &str = "the checkpoint you gave";
/// ... or from an explicit minimum.
pub const FROM_MINIMUM: &str = "--at-least-size";

/// Decides whether a verified trail is entirely covered (see the module doc).
pub fn coverage(summary: &TrailSummary, expect: &Expectations) -> Result<(), CoverageFault> {
    let minimums = [
        expect.known.map(|k| (k.size, FROM_KNOWN)),
        expect.at_least_size.map(|n| (n, FROM_MINIMUM)),
    ];
    for (expected, against) in minimums.into_iter().flatten() {
        if summary.signed_size < expected {
            return Err(CoverageFault::Truncated {
                signed_size: summary.signed_size,
                expected,
                against,
            });
        }
    }
    if summary.checkpoints == 0 {
        return Err(CoverageFault::NoCheckpoint {
            leaves: summary.leaves,
        });
    }
    if summary.unsealed_leaves > 0 && !expect.allow_unsealed {
        return Err(CoverageFault::Unsealed {
            count: summary.unsealed_leaves,
            from_index: summary.signed_size,
            from_position: summary.first_unsealed_position,
            signed_size: summary.signed_size,
        });
    }
    Ok(())
}

/// The checkpoint `event` recorded, when it is one of `tenant`'s own `audit.checkpoint.sealed`
/// events (in its `audit/<tenant>` stream); `None` for every other event. An event of that type
/// and stream whose payload does not decode is an error: the trail must not be read as if it
/// carried no such evidence.
pub fn sealed_leaf(
    event: &RecordedEvent,
    tenant: &str,
) -> Result<Option<SealedLeaf>, events::envelope::DecodeError> {
    if event.event_type != AuditCheckpointSealed::EVENT_TYPE
        || event.stream_id.strip_prefix("audit/") != Some(tenant)
    {
        return Ok(None);
    }
    let sealed: AuditCheckpointSealed = event.decode()?;
    Ok(Some(SealedLeaf {
        seq: u64::try_from(event.stream_version).unwrap_or(0),
        // The bytes exactly as carried, as `note_sha256` hashes a note's text.
        note_sha256: Sha256::digest(&sealed.signed_note).into(),
    }))
}
