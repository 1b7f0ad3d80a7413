//! The seal decision: may the sealer sign this tree head?
//!
//! c2sp.org/tlog-checkpoint, "Signatures": "A log MUST not sign any checkpoint which is
//! inconsistent with any checkpoint it previously signed." The sealer also signs only when the
//! tree grew (issue 5: "only when the tree grew"). [`check_seal`] enforces both from values
//! alone: the previous signed tree head, the proposed one, and an RFC 9162 §2.1.4 consistency
//! proof between them, checked by [`super::merkle::verify_consistency`].
//!
//! Since every checkpoint is checked against the one before it, and consistency is transitive,
//! the log never signs two inconsistent checkpoints.

use crate::merkle::{verify_consistency, Hash, ProofError, EMPTY_ROOT};

/// A tree size and its root.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TreeHead {
    pub size: u64,
    pub root: Hash,
}

impl TreeHead {
    /// The empty tree (what precedes a tenant's first checkpoint).
    pub const EMPTY: TreeHead = TreeHead {
        size: 0,
        root: EMPTY_ROOT,
    };
}

/// Why the sealer must not sign the proposed tree head.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SealRefusal {
    #[error("nothing to seal: the tree is still at size {size}, already signed")]
    NothingToSeal { size: u64 },
    #[error("refusing to sign a fork: size {size} was signed with root {signed}, the proposed root is {proposed}")]
    Fork {
        size: u64,
        signed: String,
        proposed: String,
    },
    #[error("refusing to sign a smaller tree: size {signed} was signed, {proposed} proposed")]
    Shrinks { signed: u64, proposed: u64 },
    #[error("refusing to sign size {proposed}: it is not shown to extend signed size {signed} ({source})")]
    NotAnExtension {
        signed: u64,
        proposed: u64,
        source: ProofError,
    },
}

/// Decides whether `proposed` may be signed after `previous` (`None` before the first
/// checkpoint), given the consistency proof from `previous.size` to `proposed.size`.
///
/// Returns the tree head to sign, or why not: no growth ([`SealRefusal::NothingToSeal`]), same
/// size with another root ([`SealRefusal::Fork`]), a smaller size ([`SealRefusal::Shrinks`]), or a
/// proof that does not verify ([`SealRefusal::NotAnExtension`]).
pub fn check_seal(
    previous: Option<TreeHead>,
    proposed: TreeHead,
    proof: &[Hash],
) -> Result<TreeHead, SealRefusal> {
    let previous = previous.unwrap_or(TreeHead::EMPTY);
    if proposed.size < previous.size {
        return Err(SealRefusal::Shrinks {
            signed: previous.size,
            proposed: proposed.size,
        });
    }
    if proposed.size == previous.size {
        return Err(if proposed.root == previous.root {
            SealRefusal::NothingToSeal {
                size: previous.size,
            }
        } else {
            SealRefusal::Fork {
                size: previous.size,
                signed: hex::encode(previous.root),
                proposed: hex::encode(proposed.root),
            }
        });
    }
    verify_consistency(
        previous.size,
        proposed.size,
        &previous.root,
        &proposed.root,
        proof,
    )
    .map_err(|source| SealRefusal::NotAnExtension {
        signed: previous.size,
        proposed: proposed.size,
        source,
    })?;
    Ok(proposed)
}
