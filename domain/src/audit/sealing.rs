//! Sealing a tenant's log: the decision to sign a checkpoint and the event that records it.
//!
//! A tree that grew by nothing, or only by the last checkpoint's own event (an idle tenant), is
//! left as it is ([`needs_seal`]): that leaf is covered by the next checkpoint, once anything
//! else happens. A grown tree is checked against the last signed head ([`check_seal`]), the
//! C2SP checkpoint is signed with the signer the shell passes (key name = origin
//! `<trust-domain>/audit/<tenant>`), and `audit.checkpoint.sealed` carries the note, the
//! SHA-256 of the previous one and the consistency proof.

use events::schema::AuditCheckpointSealed;
use ring::rand::SecureRandom;

use super::checkpoint::{Checkpoint, CheckpointError};
use super::key::AuditSigner;
use super::seal::{check_seal, SealRefusal, TreeHead};
use crate::decision::Decision;
use crate::merkle::Hash;

/// The last checkpoint a tenant's log signed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignedHead {
    /// 1 for the first checkpoint.
    pub seq: u64,
    /// Its tree head.
    pub head: TreeHead,
    /// The SHA-256 of its signed note.
    pub note_sha256: Hash,
}

/// Whether a tree of `size` leaves needs a checkpoint after one signed at `signed_size`:
/// it grew, and by more than the last checkpoint's own event (`grew_only_by_own_checkpoint`,
/// which matters only when it grew by exactly one leaf).
pub fn needs_seal(signed_size: u64, size: u64, grew_only_by_own_checkpoint: bool) -> bool {
    size > signed_size && !(size == signed_size + 1 && grew_only_by_own_checkpoint)
}

/// What a seal reads: the last signed checkpoint (`None` before the first), the tree's size,
/// and for a tree that [`needs_seal`], its root at that size and the consistency proof from
/// the signed size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealState {
    pub last: Option<SignedHead>,
    pub size: u64,
    pub grew_only_by_own_checkpoint: bool,
    pub grown: Option<(Hash, Vec<Hash>)>,
}

/// Who seals: the tenant, its log's origin and verifier key, and the audit key that signs
/// (with the randomness it signs with).
pub struct Sealing<'a> {
    pub tenant: &'a str,
    pub origin: &'a str,
    pub verifier_key: &'a str,
    pub signer: &'a AuditSigner,
    pub rng: &'a (dyn SecureRandom + Sync),
}

/// What a seal decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sealed {
    /// A checkpoint was signed: its sequence number and tree head.
    Sealed { seq: u64, head: TreeHead },
    /// Nothing to vouch for: the last checkpoint's size stands.
    Unchanged { size: u64 },
}

/// Why a seal did not sign.
#[derive(Debug)]
pub enum SealFailure {
    /// The tree head must not be signed ([`check_seal`]).
    Refused(SealRefusal),
    /// The signer failed.
    Checkpoint(CheckpointError),
}

/// Decides a seal: nothing for a tree that does not [`needs_seal`]; else the proposed head
/// checked against the signed one, signed, and recorded as `audit.checkpoint.sealed`.
pub fn decide_seal(
    sealing: &Sealing<'_>,
    state: &SealState,
) -> Result<Decision<AuditCheckpointSealed, Sealed>, SealFailure> {
    let (signed_size, signed_seq) = state.last.map_or((0, 0), |l| (l.head.size, l.seq));
    let grown = match &state.grown {
        Some(grown) if needs_seal(signed_size, state.size, state.grew_only_by_own_checkpoint) => {
            grown
        }
        _ => return Ok(Decision::unchanged(Sealed::Unchanged { size: signed_size })),
    };
    let (root, proof) = grown;
    let proposed = TreeHead {
        size: state.size,
        root: *root,
    };
    let head =
        check_seal(state.last.map(|l| l.head), proposed, proof).map_err(SealFailure::Refused)?;
    let checkpoint = Checkpoint {
        origin: sealing.origin.to_string(),
        size: head.size,
        root: head.root,
    };
    let note = checkpoint
        .sign(sealing.signer, sealing.rng)
        .map_err(SealFailure::Checkpoint)?;
    let event = AuditCheckpointSealed {
        tenant_id: sealing.tenant.to_string(),
        tree_size: head.size,
        root_hash: head.root.to_vec(),
        signed_note: note.into_bytes(),
        previous_checkpoint_sha256: state.last.map_or([0u8; 32], |l| l.note_sha256).to_vec(),
        origin: sealing.origin.to_string(),
        verifier_key: sealing.verifier_key.to_string(),
        consistency_proof: proof.iter().map(|h| h.to_vec()).collect(),
    };
    Ok(Decision {
        events: vec![event],
        outcome: Sealed::Sealed {
            seq: signed_seq + 1,
            head,
        },
    })
}
