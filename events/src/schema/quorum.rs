//! Event types of `proto/bc/events/v1/quorum.proto`.

use super::*;

event_payload! {
    TrustBundlePublished => "trust.bundle.published", version 1;
    ApproverSetChanged => "trust.approver_set.changed", version 1;
    CommandRootAdded => "trust.command_root.added", version 1;
    CommandRootSwitched => "trust.command_root.switched", version 1;
    CommandRootDropped => "trust.command_root.dropped", version 1;
    NodeTrustReported => "node.trust.reported", version 1;
    BatchCreated => "batch.created", version 1;
    BatchApprovalRecorded => "batch.approval.recorded", version 1;
    BatchApproved => "batch.approved", version 1;
    BatchExpired => "batch.expired", version 1;
    BatchCancelled => "batch.cancelled", version 1;
}
