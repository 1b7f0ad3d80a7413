//! One log line of `bcd site` ([`site_log`]).

use time::OffsetDateTime;

/// One log line of `bcd site` on standard error (the journal under systemd).
pub fn site_log(message: impl std::fmt::Display) {
    eprintln!(
        "{} bcd site: {message}",
        crate::node::rfc3339(OffsetDateTime::now_utc())
    );
}
