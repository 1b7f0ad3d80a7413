//! The configuration's durations: `<number><unit>` with unit `ms`, `s`, `m`, `h` or `d` (`30s`,
//! `24h`). The domain owns the parser because the attestors parse their own configuration tables
//! ([`crate::attest::factory`]); `bcctl serve` reads every other duration of its configuration
//! with it too, so all of them read the same way.

use std::time::Duration;

/// Parses `30s`, `250ms`, `5m`, `24h`, `7d`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("{text:?} has no unit (ms, s, m, h, d)"))?;
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{text:?} does not start with a whole number"))?;
    let secs = match unit {
        "ms" => return Ok(Duration::from_millis(n)),
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?} (ms, s, m, h, d)"
            ))
        }
    };
    n.checked_mul(secs)
        .map(Duration::from_secs)
        .ok_or_else(|| format!("{text:?} is too long"))
}
