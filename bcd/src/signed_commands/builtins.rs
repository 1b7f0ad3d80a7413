//! The non-destructive kinds bcd runs itself: `diag.ping`, `inventory.refresh`, `logs.collect`.
//!
//! - `diag.ping` answers with its `echo`.
//! - `inventory.refresh` answers with the hardware claims a join sends (product UUID, permanent
//!   MACs) as JSON.
//! - `logs.collect` answers with the last `lines` (default 100, at most 10,000) lines of a unit's
//!   journal (`journalctl -u UNIT -n N`), or with an empty unit, of bcd's own log:
//!   `[commands] log_file` when set, else `journalctl -u bcd`. A log that cannot be read is a
//!   failed result, never a crash.
//!
//! Output is cut to its last 4 KiB like a hook's.

use std::path::Path;
use std::process::{Command, Stdio};

use domain::command::payloads::{DiagPing, LogsCollect};
use prost::Message as _;

use super::hooks::{read_tail, OUTPUT_TAIL_BYTES};
use crate::join::hardware::{read_claims, sysfs_root};

/// The default of `logs.collect`'s `lines`.
pub const DEFAULT_LOG_LINES: u32 = 100;
/// The most lines `logs.collect` reads.
pub const MAX_LOG_LINES: u32 = 10_000;

/// A built-in's outcome: success or the failure's words, and its output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuiltinRun {
    /// Whether it succeeded.
    pub success: bool,
    /// A failure's cause.
    pub detail: String,
    /// The output's tail.
    pub output_tail: Vec<u8>,
}

fn ok(output: Vec<u8>) -> BuiltinRun {
    let start = output.len().saturating_sub(OUTPUT_TAIL_BYTES);
    BuiltinRun {
        success: true,
        detail: String::new(),
        output_tail: output[start..].to_vec(),
    }
}

fn fail(detail: String) -> BuiltinRun {
    BuiltinRun {
        success: false,
        detail,
        output_tail: Vec::new(),
    }
}

/// Whether bcd runs `kind` itself.
pub fn is_builtin(kind: &str) -> bool {
    matches!(kind, "diag.ping" | "inventory.refresh" | "logs.collect")
}

/// Runs the built-in `kind` on `payload` (its type was checked when the command verified).
pub fn run_builtin(kind: &str, payload: &[u8], log_file: Option<&Path>) -> BuiltinRun {
    match kind {
        "diag.ping" => match DiagPing::decode(payload) {
            Ok(ping) => ok(ping.echo.into_bytes()),
            Err(e) => fail(format!("the diag.ping payload does not decode: {e}")),
        },
        "inventory.refresh" => {
            let claims = read_claims(&sysfs_root());
            let json = serde_json::json!({
                "productUuid": claims.product_uuid,
                "macs": claims.macs,
            });
            ok(json.to_string().into_bytes())
        }
        "logs.collect" => match LogsCollect::decode(payload) {
            Ok(request) => collect_logs(&request, log_file),
            Err(e) => fail(format!("the logs.collect payload does not decode: {e}")),
        },
        other => fail(format!("{other} is not a built-in kind")),
    }
}

fn collect_logs(request: &LogsCollect, log_file: Option<&Path>) -> BuiltinRun {
    let lines = match request.lines {
        0 => DEFAULT_LOG_LINES,
        n => n.min(MAX_LOG_LINES),
    };
    if request.unit.is_empty() {
        if let Some(path) = log_file {
            return tail_file(path, lines);
        }
        return journalctl("bcd", lines);
    }
    if !valid_unit(&request.unit) {
        return fail(format!(
            "logs.collect: {:?} is not a systemd unit name",
            request.unit
        ));
    }
    journalctl(&request.unit, lines)
}

/// Unit names: letters, digits and `:-_.@\`, 1 to 255 characters, never starting with `-`.
fn valid_unit(unit: &str) -> bool {
    !unit.is_empty()
        && unit.len() <= 255
        && !unit.starts_with('-')
        && unit
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ":-_.@\\".contains(c))
}

fn last_lines(bytes: &[u8], lines: u32) -> Vec<u8> {
    let text = String::from_utf8_lossy(bytes);
    let all: Vec<&str> = text.lines().collect();
    let start = all.len().saturating_sub(lines as usize);
    let mut out = all[start..].join("\n").into_bytes();
    if !out.is_empty() {
        out.push(b'\n');
    }
    out
}

fn tail_file(path: &Path, lines: u32) -> BuiltinRun {
    match std::fs::File::open(path) {
        // The last 4 KiB are all a result carries: read a bounded tail of the file.
        Ok(mut file) => {
            use std::io::{Seek, SeekFrom};
            let len = file.metadata().map(|m| m.len()).unwrap_or(0);
            let window = (OUTPUT_TAIL_BYTES as u64) * 4;
            if len > window {
                let _ = file.seek(SeekFrom::Start(len - window));
            }
            ok(last_lines(&read_tail_all(file), lines))
        }
        Err(e) => fail(format!(
            "logs.collect: cannot read bcd's log {}: {e}",
            path.display()
        )),
    }
}

fn read_tail_all(mut file: std::fs::File) -> Vec<u8> {
    use std::io::Read;
    let mut bytes = Vec::new();
    let _ = file.read_to_end(&mut bytes);
    bytes
}

fn journalctl(unit: &str, lines: u32) -> BuiltinRun {
    let child = Command::new("journalctl")
        .args(["--no-pager", "-o", "short-iso", "-u", unit, "-n"])
        .arg(lines.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) => {
            return fail(format!(
                "logs.collect: journalctl is not available ({e}); set [commands] log_file in config.toml for bcd's own log"
            ))
        }
    };
    let stdout = child.stdout.take().map(read_tail).unwrap_or_default();
    let stderr = child.stderr.take().map(read_tail).unwrap_or_default();
    match child.wait() {
        Ok(status) if status.success() => ok(stdout),
        Ok(status) => fail(format!(
            "logs.collect: journalctl -u {unit} failed ({status}): {}",
            String::from_utf8_lossy(&stderr).trim()
        )),
        Err(e) => fail(format!("logs.collect: waiting for journalctl: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_lines_keeps_the_tail() {
        assert_eq!(last_lines(b"a\nb\nc\n", 2), b"b\nc\n".to_vec());
        assert_eq!(last_lines(b"", 2), Vec::<u8>::new());
    }

    #[test]
    fn unit_names_are_checked() {
        assert!(valid_unit("bcd.service"));
        assert!(!valid_unit("-x"));
        assert!(!valid_unit("a b"));
    }
}
