//! The queue's decision on a new command (issue 21 "The queue"): the role's kinds, a ramdisk
//! certificate's allowed kinds, the batch rules (`batch-required` up front with approver keys
//! published and no break-glass allowance; a batched command's (subject, kind) in its batch's
//! scope, the batch of the node's own tenant, pending or approved and unexpired), and whether
//! the command is held until its batch is approved.
//!
//! (Filled by the queue work of issue 21.)

/// Why the queue refuses a command (filled by the queue work).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnqueueRefusal {
    /// Placeholder until the queue work lands.
    #[error("the command queue is not implemented yet")]
    Unimplemented,
}
