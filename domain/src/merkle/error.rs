//! Why a Merkle proof was refused, or could not be made.

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

/// Refuses a proof of `got` hashes where the sizes in `what` call for exactly `expected`.
pub(crate) fn check_len(what: ProofKind, expected: usize, got: usize) -> Result<(), ProofError> {
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
