//! `bcd node`'s log lines: one line on standard error (the journal under systemd), times in
//! RFC 3339.

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// A time in RFC 3339 (its debug form if it cannot be formatted).
pub fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap_or_else(|_| t.to_string())
}

/// One log line on standard error (the journal under systemd).
pub fn log(message: impl std::fmt::Display) {
    eprintln!("{} bcd node: {message}", rfc3339(crate::clock::now()));
}
