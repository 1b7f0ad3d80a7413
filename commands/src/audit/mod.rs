//! The audit trail's moving parts (issue 5): the sequencer, the sealer, and the reads the CLI's
//! export and proofs are made of.
//!
//! - [`Sequencer`] follows the exact tailer from a stored cursor, gives every event a dense index
//!   in its tenant's log in commit-visibility order, and stores the leaf hashes, the interior nodes
//!   they complete and the cursor in one transaction per batch. It only reads the log, so writers
//!   never wait on it.
//! - [`Sealer`] signs a C2SP checkpoint for every tenant whose tree grew (on an interval, and on
//!   demand), after [`domain::audit::check_seal`] approved it against the previous one, and
//!   records it as an `audit.checkpoint.sealed` event in the `audit/<tenant>` stream (inline
//!   projection `audit_checkpoints`).
//! - [`reads`] fetches what exports and proofs need: O(log n) node reads per proof.
//!
//! The maths (leaf encoding, Merkle trees, notes, the seal decision, the trail verifier) is pure
//! and lives in `domain::audit`.

mod error;
mod nodes;
pub mod reads;
pub mod sealer;
pub mod sequencer;

pub use error::AuditError;
pub use reads::{CheckpointRow, InclusionProof, LeafRow};
pub use sealer::{checkpoint_stream, SealOutcome, Sealer, SealerOptions};
pub use sequencer::{Sequencer, SequencerOptions, StepOutcome};
