//! The one output convention of every `bcctl` verb (docs/CLI.md).
//!
//! - With `--json` a verb prints one JSON document on standard output, keys in camelCase, times
//!   as RFC 3339 strings (UTC, microseconds when the source has them), and nothing else there.
//! - An error under `--json` is one JSON line on standard error:
//!   `{"error":{"message":"…","exitCode":N}}`; without `--json` it is `bcctl: …`.
//! - Exit codes: 0 success, 1 the operation failed, 2 usage (a bad flag or value, found by the
//!   parser or by the verb), and the few special codes a verb documents ([`EXIT_SPECIAL`]).
//! - A path argument of `-` means standard output (or standard input where a verb reads).

use std::path::Path;

use serde::Serialize;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// The operation failed.
pub const EXIT_FAILED: u8 = 1;
/// A usage error: a bad flag or value, whether the parser or the verb found it.
pub const EXIT_USAGE: u8 = 2;
/// The first code a verb may give a documented meaning of its own (`audit verify`: 3 and up).
pub const EXIT_SPECIAL: u8 = 3;

/// Whether the command line asked for JSON (`--json` before a `--`), known before parsing so
/// that a parse error can be printed as JSON too.
pub fn json_requested<I: IntoIterator<Item = String>>(args: I) -> bool {
    args.into_iter()
        .take_while(|a| a != "--")
        .any(|a| a == "--json")
}

/// Prints `value` as one JSON document on standard output.
pub fn print_json<T: Serialize + ?Sized>(value: &T) {
    let text = serde_json::to_string(value).unwrap_or_else(|e| {
        format!("{{\"error\":{{\"message\":\"cannot encode the output: {e}\",\"exitCode\":1}}}}")
    });
    crate::invocation::write_stdout(&format!("{text}\n"));
}

/// Prints a failure the way the convention says: JSON on standard error under `--json`,
/// `bcctl: message` otherwise.
pub fn print_error(message: &str, exit_code: u8, json: bool) {
    if json {
        let v = serde_json::json!({"error": {"message": message, "exitCode": exit_code}});
        crate::errln!("{v}");
    } else {
        crate::errln!("bcctl: {message}");
    }
}

/// A time in microseconds since the epoch as RFC 3339 (UTC); out-of-range values print as the
/// number of microseconds, so nothing is hidden.
pub fn rfc3339_us(us: i64) -> String {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(us) * 1_000)
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_else(|| format!("{us}us"))
}

/// A time as RFC 3339 (UTC).
pub fn rfc3339(t: OffsetDateTime) -> String {
    t.to_offset(time::UtcOffset::UTC)
        .format(&Rfc3339)
        .unwrap_or_else(|_| t.unix_timestamp().to_string())
}

/// Whether a path argument means standard output / input.
pub fn is_stdio(path: &Path) -> bool {
    path.as_os_str() == "-"
}

/// Writes `bytes` to `path` (mode 0644 when new), or to standard output when `path` is `-`;
/// during an admin API call, into the reply ([`crate::invocation::write_file`]).
pub fn write_out(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if is_stdio(path) {
        crate::invocation::write_stdout_bytes(bytes)
    } else {
        crate::invocation::write_file(path, bytes, 0o644)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_seen_before_the_separator_only() {
        let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(json_requested(args(&["bcctl", "node", "list", "--json"])));
        assert!(!json_requested(args(&["bcctl", "node", "list"])));
        assert!(!json_requested(args(&["bcctl", "x", "--", "--json"])));
    }

    #[test]
    fn times_are_rfc3339_utc() {
        assert_eq!(rfc3339_us(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_us(1_500_000), "1970-01-01T00:00:01.5Z");
        assert_eq!(rfc3339_us(i64::MAX), format!("{}us", i64::MAX));
    }
}
