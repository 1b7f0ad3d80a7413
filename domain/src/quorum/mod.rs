//! The destructive-batch quorum: approver sets, scope trees, approvals and admission.
