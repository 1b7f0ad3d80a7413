//! RFC 9162 §2.1.4.2: verifying a consistency proof, the one consistency verifier of the
//! codebase (the audit trail's seal and offline check call it).
//!
//! A proof is the RFC's `PROOF(m, D[n])` (§2.1.4.1). The edge cases the RFC leaves to the caller
//! are decided here: equal sizes need an empty proof and equal roots (different roots are
//! [`ProofError::EqualSizeDifferentRoots`], a fork); an old size of 0 needs an empty proof and
//! the old root equal to [`EMPTY_ROOT`], since every tree extends the empty one.

use super::error::{check_len, ProofError, ProofKind};
use super::hash::{node_hash, Hash, EMPTY_ROOT};
use super::proof_len::consistency_proof_len;
use super::walk::Walk;

/// Verifies that the tree of `new_size` with root `new_root` extends the tree of `old_size` with
/// root `old_root`.
pub fn verify_consistency(
    old_size: u64,
    new_size: u64,
    old_root: &Hash,
    new_root: &Hash,
    proof: &[Hash],
) -> Result<(), ProofError> {
    if old_size > new_size {
        return Err(ProofError::OldSizeExceedsNew { old_size, new_size });
    }
    let what = ProofKind::Consistency { old_size, new_size };
    check_len(what, consistency_proof_len(old_size, new_size), proof.len())?;
    if old_size == 0 {
        return check_empty_old_root(old_root);
    }
    if old_size == new_size {
        return check_equal_sizes(old_size, old_root, new_root);
    }
    let (first, rest) =
        split_first_hash(old_size, old_root, proof).ok_or(ProofError::TooShort {
            what,
            expected: 1,
            got: 0,
        })?;
    let (fr, sr, walk) =
        fold_proof(old_size, new_size, first, rest).ok_or_else(|| ProofError::ExtraHashes {
            what,
            expected: consistency_proof_len(old_size, new_size),
            got: proof.len(),
        })?;
    // Step 7.
    if fr != *old_root {
        return Err(ProofError::OldRootMismatch);
    }
    if sr != *new_root || !walk.at_root() {
        return Err(ProofError::NewRootMismatch);
    }
    Ok(())
}

/// Every tree extends the empty one, whose root is `MTH({})`.
fn check_empty_old_root(old_root: &Hash) -> Result<(), ProofError> {
    if *old_root == EMPTY_ROOT {
        Ok(())
    } else {
        Err(ProofError::BadEmptyRoot)
    }
}

/// Two trees of one size are consistent only when they are the same tree.
fn check_equal_sizes(size: u64, old_root: &Hash, new_root: &Hash) -> Result<(), ProofError> {
    if old_root == new_root {
        Ok(())
    } else {
        Err(ProofError::EqualSizeDifferentRoots { size })
    }
}

/// Step 2: when `old_size` is a power of two the old root is the proof's implicit first
/// element; otherwise the proof's first hash is. `None` for an empty proof (unreachable after
/// the length check).
fn split_first_hash<'a>(
    old_size: u64,
    old_root: &'a Hash,
    proof: &'a [Hash],
) -> Option<(&'a Hash, &'a [Hash])> {
    if old_size.is_power_of_two() {
        Some((old_root, proof))
    } else {
        proof.split_first()
    }
}

/// Steps 3 to 6: folds the proof into the old root `fr` and the new root `sr`. `None` when a
/// hash is left once `sn` reached 0 (unreachable after the length check; kept as the RFC states
/// it).
fn fold_proof(
    old_size: u64,
    new_size: u64,
    first: &Hash,
    rest: &[Hash],
) -> Option<(Hash, Hash, Walk)> {
    let mut walk = Walk::new(old_size - 1, new_size - 1);
    walk.skip_set_bits();
    let (mut fr, mut sr) = (*first, *first);
    for c in rest {
        if walk.at_root() {
            return None;
        }
        if walk.sibling_is_left() {
            fr = node_hash(c, &fr);
            sr = node_hash(c, &sr);
            walk.skip_lone_levels();
        } else {
            sr = node_hash(&sr, c);
        }
        walk.up();
    }
    Some((fr, sr, walk))
}
