//! RFC 9162 §2.1.3.2: verifying an inclusion proof, the one inclusion verifier of the codebase.
//!
//! The audit trail ([`crate::audit`]) and the batch scope ([`crate::quorum::scope`]) both call
//! [`verify_inclusion`]. A proof is the RFC's `PATH` (§2.1.3.1): sibling hashes from the leaf's
//! level up, one per level where the leaf's subtree has a sibling.

use super::error::{check_len, ProofError, ProofKind};
use super::hash::{node_hash, Hash};
use super::proof_len::inclusion_proof_len;
use super::walk::Walk;

/// Verifies that `leaf` (a leaf hash) is at `index` in the tree of `size` whose root is `root`.
///
/// `proof` is any exact-size sequence of hashes (a slice, or a typed hash viewed as bytes), so a
/// caller with its own hash type does not copy the proof. Refused: an index at or past the size
/// ([`ProofError::IndexOutOfRange`], step 1); a proof shorter or longer than the sizes call for
/// ([`ProofError::TooShort`], [`ProofError::ExtraHashes`]); a proof that does not lead to `root`
/// ([`ProofError::RootMismatch`], step 5).
pub fn verify_inclusion<'a, P>(
    leaf: &Hash,
    index: u64,
    size: u64,
    proof: P,
    root: &Hash,
) -> Result<(), ProofError>
where
    P: IntoIterator<Item = &'a Hash>,
    P::IntoIter: ExactSizeIterator,
{
    let proof = proof.into_iter();
    let expected = check_shape(index, size, proof.len())?;
    if root_from_path(leaf, index, size, proof, expected)? == *root {
        Ok(())
    } else {
        Err(ProofError::RootMismatch)
    }
}

/// Step 1 (`index < size`), then the proof's length against [`inclusion_proof_len`]; returns
/// that length.
fn check_shape(index: u64, size: u64, got: usize) -> Result<usize, ProofError> {
    if index >= size {
        return Err(ProofError::IndexOutOfRange { index, size });
    }
    let expected = inclusion_proof_len(index, size);
    check_len(ProofKind::Inclusion { index, size }, expected, got)?;
    Ok(expected)
}

/// Steps 2 to 5: folds the path into the root it leads to. The two refusals inside are
/// unreachable after the length check; they are kept as the RFC states them.
fn root_from_path<'a>(
    leaf: &Hash,
    index: u64,
    size: u64,
    proof: impl ExactSizeIterator<Item = &'a Hash>,
    expected: usize,
) -> Result<Hash, ProofError> {
    let got = proof.len();
    let mut walk = Walk::new(index, size - 1);
    let mut r = *leaf;
    for p in proof {
        if walk.at_root() {
            let what = ProofKind::Inclusion { index, size };
            return Err(ProofError::ExtraHashes {
                what,
                expected,
                got,
            });
        }
        if walk.sibling_is_left() {
            r = node_hash(p, &r);
            walk.skip_lone_levels();
        } else {
            r = node_hash(&r, p);
        }
        walk.up();
    }
    if walk.at_root() {
        Ok(r)
    } else {
        Err(ProofError::RootMismatch)
    }
}
