//! One result of one check ([`Finding`]) and how bad it is ([`Level`]); a duration as messages
//! say it ([`human`]).

use std::time::Duration;

use serde::Serialize;

/// How bad a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Ok,
    Info,
    Warning,
    Error,
}

impl Level {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Level::Ok => "ok",
            Level::Info => "info",
            Level::Warning => "warning",
            Level::Error => "error",
        }
    }
}

/// One result of one check.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Finding {
    /// `pki.unseal`, `store.unmigrated`, ... (docs/DOCTOR.md).
    pub id: &'static str,
    pub level: Level,
    pub message: String,
    /// What to run or do, when there is something to do.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Finding {
    pub fn new(id: &'static str, level: Level, message: impl Into<String>) -> Self {
        Finding {
            id,
            level,
            message: message.into(),
            fix: None,
        }
    }

    pub fn fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = Some(fix.into());
        self
    }
}

/// A duration for a message: `3d 4h`, `2h 5m`, `40s`.
pub(crate) fn human(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        s if s >= 86_400 => format!("{}d {}h", s / 86_400, (s % 86_400) / 3600),
        s if s >= 3600 => format!("{}h {}m", s / 3600, (s % 3600) / 60),
        s if s >= 60 => format!("{}m {}s", s / 60, s % 60),
        s => format!("{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_people_say_them() {
        assert_eq!(human(Duration::from_secs(40)), "40s");
        assert_eq!(human(Duration::from_secs(125)), "2m 5s");
        assert_eq!(human(Duration::from_secs(6 * 3600)), "6h 0m");
        assert_eq!(human(Duration::from_secs(3 * 86_400 + 4 * 3600)), "3d 4h");
    }
}
