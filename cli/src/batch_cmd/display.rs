//! How server values reach a terminal: control characters filtered, statuses by name.

use domain::quorum::BatchStatus;

/// Server strings pass through a printable filter before they reach a terminal.
pub(crate) fn printable(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

pub(crate) fn status_name(status: BatchStatus) -> &'static str {
    match status {
        BatchStatus::Pending => "pending",
        BatchStatus::Approved => "approved",
        BatchStatus::Expired => "expired",
        BatchStatus::Cancelled => "cancelled",
    }
}
