//! The events trust-bundle decisions produce, and the one way a publication is written.

use events::schema::{
    ApproverSetChanged, CommandRootAdded, CommandRootDropped, CommandRootSwitched,
    TrustBundleContent, TrustBundlePublished,
};

/// One event on the `trust-bundle` stream.
#[derive(Debug, Clone, PartialEq)]
pub enum TrustBundleEvent {
    /// A version of the bundle was published.
    Published(TrustBundlePublished),
    /// The deployment took a new approver set.
    ApproverSetChanged(ApproverSetChanged),
    /// Rotation stage 1: a second command-signing root is trusted.
    CommandRootAdded(CommandRootAdded),
    /// Rotation stage 2: workers sign under the new root.
    CommandRootSwitched(CommandRootSwitched),
    /// Rotation stage 3: the former root is no longer trusted.
    CommandRootDropped(CommandRootDropped),
}

/// Why a version is published (the event's `cause`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PublishCause {
    /// A configuration with new content was settled.
    Settled,
    /// The published content again, at a raised floor.
    Floor,
    /// Rotation stage 1.
    RotationAdd,
    /// Rotation stage 3.
    RotationDrop,
}

impl PublishCause {
    /// The stored text.
    pub fn as_str(self) -> &'static str {
        match self {
            PublishCause::Settled => "settled",
            PublishCause::Floor => "floor",
            PublishCause::RotationAdd => "rotation-add",
            PublishCause::RotationDrop => "rotation-drop",
        }
    }
}

/// A version to publish.
pub(crate) struct Publication {
    pub content: TrustBundleContent,
    pub digest: [u8; 32],
    pub version: u64,
    pub previous: u64,
    pub floor: u64,
    pub cause: PublishCause,
    pub active_root_sha256: Vec<u8>,
    pub set_sha256: Vec<u8>,
}

impl Publication {
    /// The `trust.bundle.published` event.
    pub fn into_event(self) -> TrustBundleEvent {
        TrustBundleEvent::Published(TrustBundlePublished {
            version: self.version,
            digest: self.digest.to_vec(),
            content: Some(self.content),
            previous_version: self.previous,
            floor: self.floor,
            cause: self.cause.as_str().to_string(),
            active_root_sha256: self.active_root_sha256,
            approver_set_sha256: self.set_sha256,
        })
    }
}
