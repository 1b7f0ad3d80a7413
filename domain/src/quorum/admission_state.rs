//! What a daemon's admission check remembers between commands (the used batch leaves and the
//! unbatched runs of the rolling hour), and the JSON files bcd keeps it in.

use std::collections::BTreeMap;

use super::scope::ScopeHash;

/// The file (in bcd's data directory) that keeps the used batch leaves.
pub const BATCH_LEAVES_FILE: &str = "batch-leaves.json";
/// The file (in bcd's data directory) that keeps the unbatched runs of the last hour.
pub const UNBATCHED_FILE: &str = "unbatched-destructive.json";
/// A leaf that ran.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct UsedLeaf {
    /// The command that ran on it.
    pub command_id: String,
    /// The approval's end (µs, at the daemon's trusted time); the entry is dropped after it.
    pub not_after_us: i64,
}

/// The used batch leaves, keyed by leaf hash (which holds the batch id).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct UsedLeaves {
    /// Leaf hash to the command that used it.
    pub leaves: BTreeMap<ScopeHash, UsedLeaf>,
}

/// One unbatched destructive command that ran.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct UnbatchedRun {
    /// The command.
    pub command_id: String,
    /// When it was admitted, local clock, µs.
    pub at_us: i64,
}

/// The unbatched destructive commands of the rolling hour.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct UnbatchedRuns {
    /// Runs, oldest first.
    pub runs: Vec<UnbatchedRun>,
}

/// Everything admission remembers between commands.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AdmissionState {
    /// Persisted in [`BATCH_LEAVES_FILE`].
    pub used_leaves: UsedLeaves,
    /// Persisted in [`UNBATCHED_FILE`].
    pub unbatched: UnbatchedRuns,
}

/// A state file that cannot be read or written.
#[derive(Debug, thiserror::Error)]
#[error("admission state file is not valid JSON of the expected shape ({0}); destructive commands stay refused until it is repaired or removed")]
pub struct StateFileError(#[from] serde_json::Error);

impl UsedLeaves {
    /// The JSON bytes of [`BATCH_LEAVES_FILE`].
    pub fn to_json(&self) -> Result<Vec<u8>, StateFileError> {
        Ok(serde_json::to_vec_pretty(self)?)
    }

    /// Reads [`BATCH_LEAVES_FILE`].
    pub fn from_json(bytes: &[u8]) -> Result<Self, StateFileError> {
        Ok(serde_json::from_slice(bytes)?)
    }
}

impl UnbatchedRuns {
    /// The JSON bytes of [`UNBATCHED_FILE`].
    pub fn to_json(&self) -> Result<Vec<u8>, StateFileError> {
        Ok(serde_json::to_vec_pretty(self)?)
    }

    /// Reads [`UNBATCHED_FILE`].
    pub fn from_json(bytes: &[u8]) -> Result<Self, StateFileError> {
        Ok(serde_json::from_slice(bytes)?)
    }
}
