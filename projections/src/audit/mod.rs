//! The audit tables: the `audit_checkpoints` projection, the tables the sequencer writes
//! (`audit_sequencer`, `audit_trees`, `audit_leaves`, `audit_nodes`) and every read of them.
//!
//! - [`checkpoints`]: the projection of `audit.checkpoint.sealed` events.
//! - [`trees`]: the sequencer's writes (leader lock, cursor, leaves, interior nodes, sizes).
//! - [`idle`]: whether a tree grew only by its own last checkpoint (the sealer waits).
//! - [`read`]: what sealing, exports and proofs read, inside a transaction or from the read
//!   pool ([`ReadFrom`]).
//!
//! Hashes are plain `[u8; 32]`; Merkle node coordinates are `(level, index)` pairs, so this crate
//! needs nothing of the domain's tree maths.

pub mod checkpoints;
mod error;
pub mod idle;
pub mod read;
mod source;
pub mod trees;

pub use checkpoints::AuditCheckpoints;
pub use error::{AuditTableError, Hash};
pub use read::{CheckpointRow, LastCheckpoint, LeafRow};
pub use source::ReadFrom;
pub use trees::{NewLeaf, NewNode};
