//! The events batch decisions produce on a batch's stream.

use events::schema::{
    BatchApprovalRecorded, BatchApproved, BatchCancelled, BatchCreated, BatchExpired,
};

/// One event on a `batch/<id>` stream.
#[derive(Debug, Clone, PartialEq)]
pub enum BatchEvent {
    /// The batch was created with its scope.
    Created(BatchCreated),
    /// One approver's signature was recorded.
    ApprovalRecorded(BatchApprovalRecorded),
    /// The batch holds its required approvals (at creation when it needs none).
    Approved(BatchApproved),
    /// An operator cancelled the batch.
    Cancelled(BatchCancelled),
    /// The batch passed its end while pending.
    Expired(BatchExpired),
}
