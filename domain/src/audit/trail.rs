//! The offline trail verifier: checks a tenant's whole audit trail against the pinned key.
//!
//! Input, as an auditor's tool reads it from an export (nothing is taken on the server's word):
//!
//! - the tenant's leaves in index order ([`TrailLeaf`]): each leaf hash *recomputed* from its
//!   event ([`super::leaf::AuditLeaf::from_event_recomputed`]), with the event's index and
//!   position, and optionally the leaf hash the sequencer recorded for that index;
//! - the tenant's signed checkpoints in order ([`TrailCheckpoint`]), each with the SHA-256 of the
//!   previous signed note (the hash chain) and optionally the consistency proof from the previous
//!   checkpoint.
//!
//! [`verify_trail`] checks, in one pass over the leaves (O(n) hashing, O(log n) memory):
//!
//! 1. the leaf indexes are dense from 0 (a gap is a missing leaf, a repeat an extra one);
//! 2. each recomputed leaf hash equals the recorded one, when given (naming the exact leaf whose
//!    event was changed);
//! 3. for each checkpoint, in order: its signature by the pinned key under the tenant's origin
//!    ([`super::checkpoint::Checkpoint::open`]), the hash chain, that it neither shrinks the tree
//!    nor forks it (same size, other root), its consistency proof from the previous checkpoint
//!    (RFC 9162 §2.1.4.2, when given), and finally that the RFC 9162 §2.1.1 root of the leaves up
//!    to its size is the signed root.
//!
//! Since every checkpoint's root is recomputed from one and the same leaf sequence, consecutive
//! checkpoints that pass are consistent with each other (each tree is a prefix of the next).
//!
//! Two more checks ride on the same walk. A leaf that is one of the tenant's own
//! `audit.checkpoint.sealed` events ([`SealedLeaf`]) names the checkpoint it recorded; that
//! checkpoint must be among the trail's, with the same note (removing checkpoints from a trail
//! leaves this evidence behind in its leaves). And a checkpoint the auditor saw before
//! ([`verify_trail_against`]'s `known`) must have the root of the trail's first `known.size`
//! leaves: the trail extends it (RFC 9162 consistency, checked on the leaves themselves).
//!
//! Whether every leaf is *covered* by a signature (no unsealed tail, at least one checkpoint, at
//! least as large as what the auditor saw) is decided afterwards from the summary, by
//! [`super::coverage::coverage`].
//!
//! It stops at the first problem, in the order above, and names it ([`TrailFault`]), with the
//! first bad index and position where they are known. A root mismatch without recorded leaf
//! hashes can only be narrowed to the leaves between the previous checkpoint and this one; the
//! fault names the first of them.

use sha2::{Digest, Sha256};

use super::checkpoint::{Checkpoint, CheckpointError};
use super::key::AuditPublicKey;
use super::note::NoteError;
use super::seal::TreeHead;
use super::tree::Frontier;
use crate::merkle::{verify_consistency, Hash, ProofError, EMPTY_ROOT};

/// How often (in leaves) progress is reported.
pub const PROGRESS_EVERY: u64 = 4096;

/// One leaf of the trail, as recomputed from its event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrailLeaf {
    /// The per-tenant index the event carries.
    pub index: u64,
    /// The event's global position (for naming it in a fault).
    pub position: i64,
    /// The leaf hash recomputed from the event.
    pub leaf_hash: Hash,
    /// The leaf hash the sequencer recorded for this index, if the export carries it.
    pub recorded_leaf_hash: Option<Hash>,
    /// When the leaf is one of the tenant's own `audit.checkpoint.sealed` events: the checkpoint
    /// it recorded ([`super::coverage::sealed_leaf`] reads it from the event).
    pub sealed: Option<SealedLeaf>,
}

/// The checkpoint an `audit.checkpoint.sealed` leaf recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SealedLeaf {
    /// The checkpoint's number: the event's version in its `audit/<tenant>` stream (1 = first).
    pub seq: u64,
    /// SHA-256 of the signed note the event carries.
    pub note_sha256: Hash,
}

/// One signed checkpoint of the trail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrailCheckpoint {
    /// The signed note, exactly as signed.
    pub signed_note: String,
    /// SHA-256 of the previous checkpoint's signed note; `None` for the first checkpoint.
    pub previous_note_sha256: Option<Hash>,
    /// The consistency proof from the previous checkpoint's size (or from the empty tree for the
    /// first checkpoint) to this one's, if recorded.
    pub consistency_proof: Option<Vec<Hash>>,
}

/// The hash-chain link of a signed note: SHA-256 of its bytes, exactly as signed.
pub fn note_sha256(signed_note: &str) -> Hash {
    Sha256::digest(signed_note.as_bytes()).into()
}

/// Progress of [`verify_trail`], for a progress bar.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    pub leaves_checked: u64,
    /// The number of leaves, when the leaf iterator knows it.
    pub leaves_total: Option<u64>,
    pub checkpoints_checked: usize,
    pub checkpoints_total: usize,
}

/// What a verified trail holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrailSummary {
    pub leaves: u64,
    pub checkpoints: usize,
    /// The size and root of the last checkpoint (0 and the empty root without checkpoints).
    pub signed_size: u64,
    pub signed_root: Hash,
    /// Leaves after the last checkpoint (checked for order and recorded hashes, not yet signed).
    pub unsealed_leaves: u64,
    /// The global position of the first of those leaves.
    pub first_unsealed_position: Option<i64>,
    /// The chain link the next checkpoint must carry.
    pub last_note_sha256: Option<Hash>,
}

/// The first problem found in a trail.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TrailFault {
    #[error("leaf {index} (position {position}) was tampered with: its event does not hash to the leaf the log recorded")]
    TamperedLeaf { index: u64, position: i64 },
    #[error("leaf {index} is missing{}", after_position.map(|p| format!(" (after position {p})")).unwrap_or_default())]
    MissingLeaf {
        index: u64,
        after_position: Option<i64>,
    },
    #[error("extra leaf: an event at position {position} claims index {index}, which is already taken (expected index {expected})")]
    ExtraLeaf {
        index: u64,
        position: i64,
        expected: u64,
    },
    #[error("checkpoint {checkpoint} (size {size}) does not match the events: a leaf from index {from_index}{} to {} was changed, inserted, removed or reordered", from_position.map(|p| format!(" (position {p})")).unwrap_or_default(), size.saturating_sub(1))]
    RootMismatch {
        checkpoint: usize,
        size: u64,
        from_index: u64,
        from_position: Option<i64>,
    },
    #[error("checkpoint {checkpoint} has a bad signature: {source}")]
    BadSignature {
        checkpoint: usize,
        from_index: u64,
        source: NoteError,
    },
    #[error("checkpoint {checkpoint} is not signed by the pinned audit key: {source}")]
    WrongKey {
        checkpoint: usize,
        from_index: u64,
        source: NoteError,
    },
    #[error("checkpoint {checkpoint} is malformed: {source}")]
    MalformedCheckpoint {
        checkpoint: usize,
        from_index: u64,
        source: CheckpointError,
    },
    #[error(
        "checkpoint {checkpoint} forks the log: size {size} was already signed with another root"
    )]
    Fork {
        checkpoint: usize,
        size: u64,
        from_index: u64,
    },
    #[error("checkpoint {checkpoint} (size {size}) does not extend the previous one (size {previous_size}){}", source.as_ref().map(|e| format!(": {e}")).unwrap_or_default())]
    NotExtension {
        checkpoint: usize,
        previous_size: u64,
        size: u64,
        source: Option<ProofError>,
    },
    #[error("checkpoint {checkpoint} breaks the hash chain: it names previous note {found}, expected {expected}")]
    BrokenChain {
        checkpoint: usize,
        from_index: u64,
        expected: String,
        found: String,
    },
    #[error("checkpoints were removed: leaf {index} (position {position}) records checkpoint {seq}, but the trail carries only {carried}")]
    CheckpointRemoved {
        index: u64,
        position: i64,
        seq: u64,
        carried: usize,
    },
    #[error("leaf {index} (position {position}) records a checkpoint {seq} other than the trail's checkpoint {seq}")]
    CheckpointMismatch { index: u64, position: i64, seq: u64 },
    #[error("the trail does not extend the checkpoint you gave (size {size}): its first {size} leaves have another root, so a leaf before index {size} was changed, inserted, removed or reordered, or the log forked")]
    InconsistentWithKnown { size: u64 },
}

impl TrailFault {
    /// The first leaf index the fault concerns.
    pub fn index(&self) -> u64 {
        match self {
            TrailFault::TamperedLeaf { index, .. }
            | TrailFault::MissingLeaf { index, .. }
            | TrailFault::ExtraLeaf { index, .. } => *index,
            TrailFault::RootMismatch { from_index, .. }
            | TrailFault::BadSignature { from_index, .. }
            | TrailFault::WrongKey { from_index, .. }
            | TrailFault::MalformedCheckpoint { from_index, .. }
            | TrailFault::Fork { from_index, .. }
            | TrailFault::BrokenChain { from_index, .. } => *from_index,
            TrailFault::NotExtension { previous_size, .. } => *previous_size,
            TrailFault::CheckpointRemoved { index, .. }
            | TrailFault::CheckpointMismatch { index, .. } => *index,
            TrailFault::InconsistentWithKnown { .. } => 0,
        }
    }

    /// The global position of the first bad event, when known.
    pub fn position(&self) -> Option<i64> {
        match self {
            TrailFault::TamperedLeaf { position, .. }
            | TrailFault::ExtraLeaf { position, .. }
            | TrailFault::CheckpointRemoved { position, .. }
            | TrailFault::CheckpointMismatch { position, .. } => Some(*position),
            TrailFault::RootMismatch { from_position, .. } => *from_position,
            _ => None,
        }
    }

    /// The checkpoint (0-based, in trail order) the fault concerns, if any.
    pub fn checkpoint(&self) -> Option<usize> {
        match self {
            TrailFault::RootMismatch { checkpoint, .. }
            | TrailFault::BadSignature { checkpoint, .. }
            | TrailFault::WrongKey { checkpoint, .. }
            | TrailFault::MalformedCheckpoint { checkpoint, .. }
            | TrailFault::Fork { checkpoint, .. }
            | TrailFault::NotExtension { checkpoint, .. }
            | TrailFault::BrokenChain { checkpoint, .. } => Some(*checkpoint),
            _ => None,
        }
    }
}

/// Walks the leaves: index order, recorded hashes, the recomputed tree.
struct LeafWalk<I> {
    leaves: I,
    tree: Frontier,
    last_position: Option<i64>,
    total: Option<u64>,
    /// SHA-256 of each checkpoint's note, in trail order (what sealed leaves must name).
    notes: Vec<Hash>,
    /// The checkpoint the auditor saw before, whose root the walk checks at its size.
    known: Option<TreeHead>,
}

impl<I: Iterator<Item = TrailLeaf>> LeafWalk<I> {
    fn check(&mut self, leaf: &TrailLeaf) -> Result<(), TrailFault> {
        let expected = self.tree.size();
        if leaf.index > expected {
            return Err(TrailFault::MissingLeaf {
                index: expected,
                after_position: self.last_position,
            });
        }
        if leaf.index < expected {
            return Err(TrailFault::ExtraLeaf {
                index: leaf.index,
                position: leaf.position,
                expected,
            });
        }
        if leaf.recorded_leaf_hash.is_some_and(|r| r != leaf.leaf_hash) {
            return Err(TrailFault::TamperedLeaf {
                index: leaf.index,
                position: leaf.position,
            });
        }
        if let Some(sealed) = leaf.sealed {
            let carried = usize::try_from(sealed.seq)
                .ok()
                .and_then(|seq| seq.checked_sub(1))
                .and_then(|k| self.notes.get(k));
            match carried {
                Some(note) if *note == sealed.note_sha256 => {}
                Some(_) => {
                    return Err(TrailFault::CheckpointMismatch {
                        index: leaf.index,
                        position: leaf.position,
                        seq: sealed.seq,
                    })
                }
                None if sealed.seq == 0 => {
                    return Err(TrailFault::CheckpointMismatch {
                        index: leaf.index,
                        position: leaf.position,
                        seq: 0,
                    })
                }
                None => {
                    return Err(TrailFault::CheckpointRemoved {
                        index: leaf.index,
                        position: leaf.position,
                        seq: sealed.seq,
                        carried: self.notes.len(),
                    })
                }
            }
        }
        Ok(())
    }

    /// The root of the leaves so far must be the known checkpoint's, at its size.
    fn check_known(&self) -> Result<(), TrailFault> {
        match self.known {
            Some(k) if k.size == self.tree.size() && k.root != self.tree.root() => {
                Err(TrailFault::InconsistentWithKnown { size: k.size })
            }
            _ => Ok(()),
        }
    }

    /// Takes the next leaf, checks it and adds it to the tree. `None` when the leaves ran out.
    fn step(&mut self) -> Option<Result<TrailLeaf, TrailFault>> {
        let leaf = self.leaves.next()?;
        if let Err(e) = self.check(&leaf) {
            return Some(Err(e));
        }
        self.tree.push(leaf.leaf_hash, |_, _| {});
        self.last_position = Some(leaf.position);
        if let Err(e) = self.check_known() {
            return Some(Err(e));
        }
        Some(Ok(leaf))
    }
}

/// Checkpoint `k` of the trail, opened against the log's origin and key; `from_index` is the
/// first leaf it covers that the one before did not.
fn open_checkpoint(
    cp: &TrailCheckpoint,
    k: usize,
    from_index: u64,
    origin: &str,
    key: &AuditPublicKey,
) -> Result<Checkpoint, TrailFault> {
    Checkpoint::open(&cp.signed_note, origin, key).map_err(|e| match e {
        CheckpointError::Note(
            source @ (NoteError::UnknownKeyId { .. } | NoteError::NotSignedByKey { .. }),
        ) => TrailFault::WrongKey {
            checkpoint: k,
            from_index,
            source,
        },
        CheckpointError::Note(source @ NoteError::BadSignature { .. }) => {
            TrailFault::BadSignature {
                checkpoint: k,
                from_index,
                source,
            }
        }
        source => TrailFault::MalformedCheckpoint {
            checkpoint: k,
            from_index,
            source,
        },
    })
}

/// Checkpoint `k` (opened: `head`) chains to the one before (`last_note`) and extends its tree
/// (`signed_size` leaves, root `signed_root`): never smaller, no other root at the same size,
/// and its consistency proof, when it has one, holds.
fn check_extension(
    cp: &TrailCheckpoint,
    k: usize,
    head: &Checkpoint,
    signed_size: u64,
    signed_root: &Hash,
    last_note: Option<Hash>,
) -> Result<(), TrailFault> {
    let from_index = signed_size;
    if cp.previous_note_sha256 != last_note {
        let show = |h: Option<Hash>| h.map_or_else(|| "none".to_string(), hex::encode);
        return Err(TrailFault::BrokenChain {
            checkpoint: k,
            from_index,
            expected: show(last_note),
            found: show(cp.previous_note_sha256),
        });
    }

    if head.size < signed_size {
        return Err(TrailFault::NotExtension {
            checkpoint: k,
            previous_size: signed_size,
            size: head.size,
            source: None,
        });
    }
    if k > 0 && head.size == signed_size && head.root != *signed_root {
        return Err(TrailFault::Fork {
            checkpoint: k,
            size: head.size,
            from_index,
        });
    }
    if let Some(proof) = &cp.consistency_proof {
        verify_consistency(signed_size, head.size, signed_root, &head.root, proof).map_err(
            |e| TrailFault::NotExtension {
                checkpoint: k,
                previous_size: signed_size,
                size: head.size,
                source: Some(e),
            },
        )?;
    }
    Ok(())
}

/// Verifies a tenant's trail (see the module doc). `origin` is the tenant's log origin
/// (`<trust-domain>/audit/<tenant>`), `key` the audit key, already checked against the pin.
/// `progress` is called every [`PROGRESS_EVERY`] leaves, after each checkpoint and at the end.
pub fn verify_trail<L>(
    origin: &str,
    key: &AuditPublicKey,
    leaves: L,
    checkpoints: &[TrailCheckpoint],
    progress: &mut dyn FnMut(Progress),
) -> Result<TrailSummary, TrailFault>
where
    L: IntoIterator<Item = TrailLeaf>,
{
    verify_trail_against(origin, key, leaves, checkpoints, None, progress)
}

/// [`verify_trail`], and also that the trail extends `known`, a checkpoint the auditor saw
/// before (its signature already checked by the caller): the root of the trail's first
/// `known.size` leaves must be `known.root` ([`TrailFault::InconsistentWithKnown`]). A trail with
/// fewer leaves is not refused here; [`super::coverage::coverage`] calls it truncated.
pub fn verify_trail_against<L>(
    origin: &str,
    key: &AuditPublicKey,
    leaves: L,
    checkpoints: &[TrailCheckpoint],
    known: Option<TreeHead>,
    progress: &mut dyn FnMut(Progress),
) -> Result<TrailSummary, TrailFault>
where
    L: IntoIterator<Item = TrailLeaf>,
{
    let leaves = leaves.into_iter();
    let total = leaves.size_hint().1.map(|n| n as u64);
    let mut walk = LeafWalk {
        leaves,
        tree: Frontier::new(),
        last_position: None,
        total,
        notes: checkpoints
            .iter()
            .map(|c| note_sha256(&c.signed_note))
            .collect(),
        known,
    };
    walk.check_known()?;
    let report = |walk: &LeafWalk<_>, done: usize, progress: &mut dyn FnMut(Progress)| {
        progress(Progress {
            leaves_checked: walk.tree.size(),
            leaves_total: walk.total,
            checkpoints_checked: done,
            checkpoints_total: checkpoints.len(),
        })
    };

    let mut signed_size = 0u64;
    let mut signed_root = EMPTY_ROOT;
    let mut last_note: Option<Hash> = None;

    for (k, cp) in checkpoints.iter().enumerate() {
        let from_index = signed_size;
        let head = open_checkpoint(cp, k, from_index, origin, key)?;
        check_extension(cp, k, &head, signed_size, &signed_root, last_note)?;

        let mut from_position = None;
        while walk.tree.size() < head.size {
            match walk.step() {
                None => {
                    return Err(TrailFault::MissingLeaf {
                        index: walk.tree.size(),
                        after_position: walk.last_position,
                    })
                }
                Some(Err(fault)) => return Err(fault),
                Some(Ok(leaf)) => {
                    from_position.get_or_insert(leaf.position);
                    if walk.tree.size() % PROGRESS_EVERY == 0 {
                        report(&walk, k, progress);
                    }
                }
            }
        }
        if walk.tree.root() != head.root {
            return Err(TrailFault::RootMismatch {
                checkpoint: k,
                size: head.size,
                from_index,
                from_position,
            });
        }
        signed_size = head.size;
        signed_root = head.root;
        last_note = Some(note_sha256(&cp.signed_note));
        report(&walk, k + 1, progress);
    }

    let mut first_unsealed_position = None;
    while let Some(step) = walk.step() {
        let leaf = step?;
        first_unsealed_position.get_or_insert(leaf.position);
        if walk.tree.size() % PROGRESS_EVERY == 0 {
            report(&walk, checkpoints.len(), progress);
        }
    }
    report(&walk, checkpoints.len(), progress);

    Ok(TrailSummary {
        leaves: walk.tree.size(),
        checkpoints: checkpoints.len(),
        signed_size,
        signed_root,
        unsealed_leaves: walk.tree.size() - signed_size,
        first_unsealed_position,
        last_note_sha256: last_note,
    })
}
