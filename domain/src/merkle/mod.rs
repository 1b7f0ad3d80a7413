//! RFC 9162 Merkle trees: the hashing, the proof lengths, and the one proof verifier of the
//! codebase.
//!
//! Two trees are built on these definitions: each tenant's audit log ([`crate::audit`], leaves
//! are events) and each destructive batch's scope ([`crate::quorum::scope`], leaves are the
//! commands a batch approves). Both check inclusion through [`verify_inclusion`]; the audit trail
//! also checks consistency through [`verify_consistency`]. Nothing else in the codebase folds a
//! proof.
//!
//! Definitions used, all from RFC 9162 ("Certificate Transparency Version 2.0"):
//!
//! | module          | RFC 9162              | what                                                  |
//! |-----------------|-----------------------|-------------------------------------------------------|
//! | [`hash`]        | §2.1.1                | `MTH` leaf and interior hashes, the empty root         |
//! | [`proof_len`]   | §2.1.3.1, §2.1.4.1    | how many hashes `PATH` and `PROOF` hold for given sizes |
//! | [`inclusion`]   | §2.1.3.2              | verifying an inclusion proof                           |
//! | [`consistency`] | §2.1.4.2              | verifying a consistency proof                          |
//! | [`error`]       |                       | why a proof was refused                                |
//! | `walk`          | §2.1.3.2, §2.1.4.2    | the `(fn, sn)` index steps both verifiers share        |
//!
//! The verifiers first check that a proof has exactly the length the sizes call for, so a
//! truncated proof, or one with hashes added, is refused with a typed error before any hashing;
//! then they follow the RFC's verification steps one by one.

pub mod consistency;
pub mod error;
pub mod hash;
pub mod inclusion;
pub mod proof_len;
mod walk;

pub use consistency::verify_consistency;
pub use error::{ProofError, ProofKind};
pub use hash::{leaf_hash, node_hash, Hash, EMPTY_ROOT, LEAF_PREFIX, NODE_PREFIX};
pub use inclusion::verify_inclusion;
pub use proof_len::{consistency_proof_len, inclusion_proof_len};
