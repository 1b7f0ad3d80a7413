//! The audit log's Merkle maths in memory: roots and proofs over a list of leaf hashes.
//!
//! The hashing and the verifiers are RFC 9162's and live in [`crate::merkle`], shared with the
//! batch scope; they are re-exported here so `domain::audit::merkle::verify_inclusion` and its
//! siblings keep their paths. What is the audit tree's own:
//!
//! - [`root`]: `MTH(D[n])` (RFC 9162 §2.1.1) of a list of leaf hashes, folded by the appender.
//! - Proof *generation* over a whole list of leaf hashes in memory ([`inclusion_proof`], `PATH`
//!   §2.1.3.1; [`consistency_proof`], `PROOF` §2.1.4.1) uses the same planner as the
//!   storage-backed tree in [`super::tree`], reading complete subtrees straight from the slice.
//!   It costs O(n) hashing per proof; the sequencer's store answers the same plans with O(log n)
//!   reads.

use super::tree::{self, HashReader, NodeCoord};

pub use crate::merkle::{
    consistency_proof_len, inclusion_proof_len, leaf_hash, node_hash, verify_consistency,
    verify_inclusion, Hash, ProofError, ProofKind, EMPTY_ROOT, LEAF_PREFIX, NODE_PREFIX,
};

/// The Merkle Tree Hash of a list of leaf hashes (RFC 9162 §2.1.1), in O(n) hashing and O(log n)
/// memory, with no allocation.
pub fn root(leaves: &[Hash]) -> Hash {
    let mut f = tree::Frontier::new();
    for leaf in leaves {
        f.push(*leaf, |_, _| {});
    }
    f.root()
}

/// The inclusion proof (`PATH`, RFC 9162 §2.1.3.1) of leaf `index` in the tree over `leaves`.
pub fn inclusion_proof(leaves: &[Hash], index: u64) -> Result<Vec<Hash>, ProofError> {
    let plan = tree::inclusion_plan(index, leaves.len() as u64)?;
    Ok(plan
        .read(&SliceReader(leaves))
        .unwrap_or_else(|never| match never {}))
}

/// The consistency proof (`PROOF`, RFC 9162 §2.1.4.1) from the first `old_size` leaves to all of
/// `leaves`. Empty when `old_size` is 0 or equal to the number of leaves.
pub fn consistency_proof(leaves: &[Hash], old_size: u64) -> Result<Vec<Hash>, ProofError> {
    let plan = tree::consistency_plan(old_size, leaves.len() as u64)?;
    Ok(plan
        .read(&SliceReader(leaves))
        .unwrap_or_else(|never| match never {}))
}

/// Answers node reads from a slice of leaf hashes by hashing the subtree (O(2^level) per read).
struct SliceReader<'a>(&'a [Hash]);

impl HashReader for SliceReader<'_> {
    type Error = std::convert::Infallible;

    fn node(&self, id: NodeCoord) -> Result<Hash, Self::Error> {
        let start = (id.index << id.level) as usize;
        let end = ((id.index + 1) << id.level) as usize;
        Ok(root(&self.0[start..end]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};

    #[test]
    fn empty_root_is_sha256_of_nothing() {
        let h: Hash = Sha256::digest([]).into();
        assert_eq!(h, EMPTY_ROOT);
        assert_eq!(root(&[]), EMPTY_ROOT);
    }

    #[test]
    fn one_leaf_root_is_the_leaf_hash() {
        let l = leaf_hash(b"x");
        assert_eq!(root(&[l]), l);
        assert_eq!(inclusion_proof_len(0, 1), 0);
        verify_inclusion(&l, 0, 1, &[], &l).unwrap();
    }
}
