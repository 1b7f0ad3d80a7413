//! Audit tree maths: RFC 9162 Merkle hashing and proofs, leaf encoding, C2SP checkpoints.
//!
//! Each tenant's events form an RFC 9162 Merkle log whose signed checkpoints let an auditor check
//! the trail offline against a pinned key (DESIGN.md, "Audit"; issue 5). This module is the pure
//! part of it; the sequencer, sealer, export and CLI are built on top.
//!
//! | module         | job                                                                          |
//! |----------------|------------------------------------------------------------------------------|
//! | [`merkle`]     | RFC 9162 §2.1 hashing, roots, in-memory proofs, and the one proof verifier   |
//! | [`tree`]       | the sequencer's appender ([`tree::Frontier`]) and proofs from stored nodes   |
//! | [`leaf`]       | the versioned byte encoding of an audit leaf                                 |
//! | [`key`]        | the audit key: public key, pin, verifier-key string, signer                  |
//! | [`note`]       | C2SP signed notes with ECDSA P-256 (signature type 0x02)                      |
//! | [`checkpoint`] | C2SP tlog checkpoints of a tenant's log                                      |
//! | [`seal`]       | the seal check: sign only strict extensions of the last checkpoint           |
//! | [`sealing`]    | the seal decider: whether to sign, the signed note, the sealed event         |
//! | [`trail`]      | the offline verifier of a tenant's whole trail                               |
//! | [`coverage`]   | whether a verified trail is entirely covered by signatures (the one bit)     |
//!
//! A typical flow: the sequencer turns each event into an [`AuditLeaf`], hashes it
//! ([`AuditLeaf::leaf_hash`]), appends the batch to the tenant's [`Frontier`] and stores the
//! nodes it reports. The sealer asks [`tree::prove_consistency`] for a proof from the last
//! checkpoint and [`decide_seal`] checks it ([`check_seal`]), signs the approved [`Checkpoint`]
//! with the signer passed in and records the note with the SHA-256 of the previous one. An auditor feeds the export to
//! [`verify_trail`].

pub mod checkpoint;
pub mod coverage;
pub mod key;
pub mod leaf;
pub mod merkle;
pub mod note;
pub mod seal;
pub mod sealing;
pub mod trail;
pub mod tree;

pub use checkpoint::{audit_origin, Checkpoint, CheckpointError};
pub use coverage::{coverage, sealed_leaf, CoverageFault, Expectations};
pub use key::{AuditPublicKey, AuditSigner, KeyError, KeyPin};
pub use leaf::{AuditLeaf, LeafActor, LeafError};
pub use merkle::{
    leaf_hash, node_hash, verify_consistency, verify_inclusion, Hash, ProofError, EMPTY_ROOT,
};
pub use note::{open_note, sign_note, Note, NoteError};
pub use seal::{check_seal, SealRefusal, TreeHead};
pub use sealing::{decide_seal, needs_seal, SealFailure, SealState, Sealed, Sealing, SignedHead};
pub use trail::{
    verify_trail, verify_trail_against, Progress, SealedLeaf, TrailCheckpoint, TrailFault,
    TrailLeaf, TrailSummary,
};
pub use tree::{Frontier, HashReader, MemoryStore, NodeCoord, ProofPlan, StoredNode, TreeError};
