//! The published bundle as the decisions read it, and what a settle or a rotation answers.

use super::content::PublishedContent;

/// A node is connected when its session has not ended and it was seen within this window.
pub const CONNECTED_WINDOW_US: i64 = 120 * 1_000_000;
/// The drop stage waits this long after the switch (worker keys live at most 24 h).
pub const DROP_AFTER_SWITCH_US: i64 = 24 * 3600 * 1_000_000;

/// Where a command-signing root rotation stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RotationStage {
    /// No rotation in progress.
    None,
    /// A second root is trusted; workers still sign under the first.
    Added,
    /// Workers sign under the new root; the former one is still trusted.
    Switched,
}

impl RotationStage {
    /// The stored text: `none`, `added` or `switched`.
    pub fn as_str(self) -> &'static str {
        match self {
            RotationStage::None => "none",
            RotationStage::Added => "added",
            RotationStage::Switched => "switched",
        }
    }

    /// Parses the stored text.
    pub fn parse(text: &str) -> Option<RotationStage> {
        match text {
            "none" => Some(RotationStage::None),
            "added" => Some(RotationStage::Added),
            "switched" => Some(RotationStage::Switched),
            _ => None,
        }
    }
}

/// The published bundle: its version, digest, content and rotation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishedState {
    /// The published version.
    pub version: u64,
    /// Its content digest.
    pub digest: Vec<u8>,
    /// Its content.
    pub content: PublishedContent,
    /// SHA-256 of the root workers sign under (empty without roots).
    pub active_root_sha256: Vec<u8>,
    /// The rotation stage.
    pub rotation_stage: RotationStage,
    /// The root being rotated to (stage added).
    pub rotation_root_sha256: Option<Vec<u8>>,
    /// When the switch happened, µs since the Unix epoch (stage switched).
    pub switched_at_us: Option<i64>,
    /// The floor it was published with.
    pub floor: u64,
}

/// A node's reported trust version, as the switch gate reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectedNode {
    /// The node.
    pub node_id: String,
    /// The trust version it reported.
    pub trust_version: u64,
}

/// How a settle ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettleOutcome {
    /// A new version was published.
    Published { previous: u64 },
    /// The configuration is what is published.
    Unchanged,
    /// The configuration is a bundle published before and since replaced: it is served at its
    /// old version (which daemons ignore) and the record is not changed.
    Stale { published: u64 },
}

/// The version this process serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled {
    pub version: u64,
    pub digest: [u8; 32],
    pub outcome: SettleOutcome,
    /// A warning to log (a stale configuration).
    pub warning: Option<String>,
}

/// The result of a switch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Switched {
    pub gated_version: u64,
    pub connected: usize,
    /// Connected nodes behind the version (non-zero only with `force`).
    pub behind: usize,
}
