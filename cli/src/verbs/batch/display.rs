//! How server text reaches a terminal: control characters filtered.

/// Server strings pass through a printable filter before they reach a terminal.
pub(crate) fn printable(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}
