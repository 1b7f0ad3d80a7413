//! One log line of `bcd site` ([`site_log`]).

/// One log line of `bcd site` on standard error (the journal under systemd).
pub fn site_log(message: impl std::fmt::Display) {
    eprintln!(
        "{} bcd site: {message}",
        crate::node::rfc3339(crate::clock::now())
    );
}
