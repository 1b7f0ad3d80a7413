//! RFC 9162 §2.1 Merkle tree hashing, and the one proof verifier of the codebase.
//!
//! Definitions used here, all from RFC 9162 ("Certificate Transparency Version 2.0"):
//!
//! - §2.1.1: the Merkle Tree Hash of a list of n inputs, `MTH(D[n])`, with SHA-256:
//!   `MTH({}) = SHA-256()`, `MTH({d0}) = SHA-256(0x00 || d0)`, and for n > 1, with k the largest
//!   power of two smaller than n, `MTH(D[n]) = SHA-256(0x01 || MTH(D[0:k]) || MTH(D[k:n]))`.
//!   [`leaf_hash`] and [`node_hash`] are those two prefixed hashes; [`EMPTY_ROOT`] is `MTH({})`.
//! - §2.1.3.1 / §2.1.3.2: inclusion proofs (`PATH`) and their verification: [`verify_inclusion`].
//! - §2.1.4.1 / §2.1.4.2: consistency proofs (`PROOF`, `SUBPROOF`) and their verification:
//!   [`verify_consistency`].
//!
//! The verifiers follow the RFC's verification algorithms step by step, after first checking that
//! the proof has exactly the length the tree sizes call for (so a truncated proof, or one with
//! hashes appended, is refused with a typed error before any hashing). Every other part of the
//! codebase that checks a proof calls these two functions.
//!
//! Proof *generation* over a whole list of leaf hashes in memory ([`inclusion_proof`],
//! [`consistency_proof`]) uses the same planner as the storage-backed tree in
//! [`super::tree`], reading complete subtrees straight from the slice. It costs O(n) hashing per
//! proof; the sequencer's store answers the same plans with O(log n) reads.

use sha2::{Digest, Sha256};

use super::tree::{self, HashReader, NodeId};

/// A SHA-256 output: leaf hashes, interior node hashes and tree roots.
pub type Hash = [u8; 32];

/// `MTH({})`: the root of the empty tree, SHA-256 of the empty string (RFC 9162 §2.1.1).
pub const EMPTY_ROOT: Hash = [
    0xe3, 0xb0, 0xc4, 0x42, 0x98, 0xfc, 0x1c, 0x14, 0x9a, 0xfb, 0xf4, 0xc8, 0x99, 0x6f, 0xb9, 0x24,
    0x27, 0xae, 0x41, 0xe4, 0x64, 0x9b, 0x93, 0x4c, 0xa4, 0x95, 0x99, 0x1b, 0x78, 0x52, 0xb8, 0x55,
];

/// Prefix byte of a leaf hash (RFC 9162 §2.1.1).
pub const LEAF_PREFIX: u8 = 0x00;
/// Prefix byte of an interior node hash (RFC 9162 §2.1.1).
pub const NODE_PREFIX: u8 = 0x01;

/// `SHA-256(0x00 || data)`: the hash of one leaf's bytes.
pub fn leaf_hash(data: &[u8]) -> Hash {
    let mut h = Sha256::new();
    h.update([LEAF_PREFIX]);
    h.update(data);
    h.finalize().into()
}

/// `SHA-256(0x01 || left || right)`: the hash of an interior node.
pub fn node_hash(left: &Hash, right: &Hash) -> Hash {
    let mut buf = [0u8; 65];
    buf[0] = NODE_PREFIX;
    buf[1..33].copy_from_slice(left);
    buf[33..].copy_from_slice(right);
    Sha256::digest(buf).into()
}

/// Why a proof was refused, or could not be made.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProofError {
    #[error("leaf index {index} is not in a tree of size {size} (indexes run from 0 to size - 1)")]
    IndexOutOfRange { index: u64, size: u64 },
    #[error(
        "old tree size {old_size} is larger than new tree size {new_size}: a log never shrinks"
    )]
    OldSizeExceedsNew { old_size: u64, new_size: u64 },
    #[error("proof has {got} hashes, but sizes {what} call for exactly {expected}: the proof is truncated")]
    TooShort {
        what: ProofKind,
        expected: usize,
        got: usize,
    },
    #[error("proof has {got} hashes, but sizes {what} call for exactly {expected}: extra hashes were appended")]
    ExtraHashes {
        what: ProofKind,
        expected: usize,
        got: usize,
    },
    #[error("proof does not lead to the expected root: the leaf, the proof or the root is not what the log committed to")]
    RootMismatch,
    #[error("consistency proof does not reproduce the old root: the old tree is not a prefix of the new one")]
    OldRootMismatch,
    #[error("consistency proof does not reproduce the new root: the new tree does not extend the old one")]
    NewRootMismatch,
    #[error("trees of equal size {size} have different roots: the log forked")]
    EqualSizeDifferentRoots { size: u64 },
    #[error("the empty tree's root must be SHA-256 of the empty string")]
    BadEmptyRoot,
}

/// Which kind of proof a length error is about (for the error message).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProofKind {
    /// An inclusion proof of `index` in a tree of `size`.
    Inclusion { index: u64, size: u64 },
    /// A consistency proof from `old_size` to `new_size`.
    Consistency { old_size: u64, new_size: u64 },
}

impl std::fmt::Display for ProofKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProofKind::Inclusion { index, size } => {
                write!(f, "(inclusion of index {index} in size {size})")
            }
            ProofKind::Consistency { old_size, new_size } => {
                write!(f, "(consistency from size {old_size} to {new_size})")
            }
        }
    }
}

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

    fn node(&self, id: NodeId) -> Result<Hash, Self::Error> {
        let start = (id.index << id.level) as usize;
        let end = ((id.index + 1) << id.level) as usize;
        Ok(root(&self.0[start..end]))
    }
}

/// Number of hashes in the inclusion proof of `index` in a tree of `size` (requires index < size).
///
/// The path has one hash per level below the point where `index` and `size - 1` part ways, plus
/// one for each left sibling above it on the right edge.
pub fn inclusion_proof_len(index: u64, size: u64) -> usize {
    debug_assert!(index < size);
    let last = size - 1;
    let inner = 64 - (index ^ last).leading_zeros();
    let border = if inner >= 64 {
        0
    } else {
        (index >> inner).count_ones()
    };
    (inner + border) as usize
}

/// Number of hashes in the consistency proof from `old_size` to `new_size`
/// (0 when `old_size` is 0 or equals `new_size`; requires old_size <= new_size).
pub fn consistency_proof_len(old_size: u64, new_size: u64) -> usize {
    if old_size == 0 || old_size >= new_size {
        return 0;
    }
    // Dry run of RFC 9162 §2.1.4.2 steps 2-6: the shifts never depend on hash values.
    let mut len = usize::from(!old_size.is_power_of_two());
    let mut fn_ = old_size - 1;
    let mut sn = new_size - 1;
    while fn_ & 1 == 1 {
        fn_ >>= 1;
        sn >>= 1;
    }
    while sn != 0 {
        len += 1;
        // Step 6 with the hashing left out: an even fn equal to sn climbs to its next odd level.
        if fn_ & 1 == 0 && fn_ == sn {
            while fn_ & 1 == 0 && fn_ != 0 {
                fn_ >>= 1;
                sn >>= 1;
            }
        }
        fn_ >>= 1;
        sn >>= 1;
    }
    len
}

fn check_len(what: ProofKind, expected: usize, got: usize) -> Result<(), ProofError> {
    if got < expected {
        Err(ProofError::TooShort {
            what,
            expected,
            got,
        })
    } else if got > expected {
        Err(ProofError::ExtraHashes {
            what,
            expected,
            got,
        })
    } else {
        Ok(())
    }
}

/// Verifies that `leaf` (a leaf hash) is at `index` in the tree of `size` whose root is `root`,
/// following RFC 9162 §2.1.3.2.
pub fn verify_inclusion(
    leaf: &Hash,
    index: u64,
    size: u64,
    proof: &[Hash],
    root: &Hash,
) -> Result<(), ProofError> {
    // Step 1.
    if index >= size {
        return Err(ProofError::IndexOutOfRange { index, size });
    }
    check_len(
        ProofKind::Inclusion { index, size },
        inclusion_proof_len(index, size),
        proof.len(),
    )?;
    // Steps 2-3.
    let mut fn_ = index;
    let mut sn = size - 1;
    let mut r = *leaf;
    // Step 4.
    for p in proof {
        if sn == 0 {
            // Unreachable after the length check; kept as the RFC states it.
            return Err(ProofError::ExtraHashes {
                what: ProofKind::Inclusion { index, size },
                expected: inclusion_proof_len(index, size),
                got: proof.len(),
            });
        }
        if fn_ & 1 == 1 || fn_ == sn {
            r = node_hash(p, &r);
            if fn_ & 1 == 0 {
                while fn_ & 1 == 0 && fn_ != 0 {
                    fn_ >>= 1;
                    sn >>= 1;
                }
            }
        } else {
            r = node_hash(&r, p);
        }
        fn_ >>= 1;
        sn >>= 1;
    }
    // Step 5.
    if sn == 0 && r == *root {
        Ok(())
    } else {
        Err(ProofError::RootMismatch)
    }
}

/// Verifies that the tree of `new_size` with root `new_root` extends the tree of `old_size` with
/// root `old_root`, following RFC 9162 §2.1.4.2.
///
/// Edge cases the RFC leaves to the caller: equal sizes need an empty proof and equal roots
/// (different roots are [`ProofError::EqualSizeDifferentRoots`], a fork); an old size of 0 needs an
/// empty proof and `old_root` equal to [`EMPTY_ROOT`], since every tree extends the empty one.
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
        return if *old_root == EMPTY_ROOT {
            Ok(())
        } else {
            Err(ProofError::BadEmptyRoot)
        };
    }
    if old_size == new_size {
        return if old_root == new_root {
            Ok(())
        } else {
            Err(ProofError::EqualSizeDifferentRoots { size: old_size })
        };
    }
    // Step 2: when old_size is a power of two the old root is the proof's implicit first element.
    let (first, rest) = if old_size.is_power_of_two() {
        (old_root, proof)
    } else {
        // The length check guarantees at least one element here.
        match proof.split_first() {
            Some((first, rest)) => (first, rest),
            None => {
                return Err(ProofError::TooShort {
                    what,
                    expected: 1,
                    got: 0,
                })
            }
        }
    };
    // Steps 3-4.
    let mut fn_ = old_size - 1;
    let mut sn = new_size - 1;
    while fn_ & 1 == 1 {
        fn_ >>= 1;
        sn >>= 1;
    }
    // Step 5.
    let mut fr = *first;
    let mut sr = *first;
    // Step 6.
    for c in rest {
        if sn == 0 {
            // Unreachable after the length check; kept as the RFC states it.
            return Err(ProofError::ExtraHashes {
                what,
                expected: consistency_proof_len(old_size, new_size),
                got: proof.len(),
            });
        }
        if fn_ & 1 == 1 || fn_ == sn {
            fr = node_hash(c, &fr);
            sr = node_hash(c, &sr);
            if fn_ & 1 == 0 {
                while fn_ & 1 == 0 && fn_ != 0 {
                    fn_ >>= 1;
                    sn >>= 1;
                }
            }
        } else {
            sr = node_hash(&sr, c);
        }
        fn_ >>= 1;
        sn >>= 1;
    }
    // Step 7.
    if fr != *old_root {
        return Err(ProofError::OldRootMismatch);
    }
    if sr != *new_root || sn != 0 {
        return Err(ProofError::NewRootMismatch);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn proof_lengths_at_the_edges() {
        assert_eq!(inclusion_proof_len(0, 2), 1);
        assert_eq!(inclusion_proof_len(6, 7), 2);
        assert_eq!(inclusion_proof_len(0, 7), 3);
        assert_eq!(inclusion_proof_len(u64::MAX - 1, u64::MAX), 63);
        assert_eq!(consistency_proof_len(3, 7), 4);
        assert_eq!(consistency_proof_len(4, 7), 1);
        assert_eq!(consistency_proof_len(6, 7), 3);
    }
}
