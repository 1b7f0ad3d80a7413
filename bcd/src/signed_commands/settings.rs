//! `[commands]` in `config.toml`: the hooks of destructive kinds, their timeout, bcd's own log.
//!
//! ```toml
//! [commands]
//! hook_timeout_seconds = 600     # the default
//! log_file = "/var/log/bcd.log"  # logs.collect without a unit (else journalctl -u bcd)
//! [commands.hooks]
//! "node.reboot" = "/usr/libexec/bcd/reboot"
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

/// The default hook timeout.
pub const DEFAULT_HOOK_TIMEOUT_SECONDS: u64 = 600;

/// `[commands]` in `config.toml`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandSettings {
    /// `[commands.hooks]`: kind → program.
    pub hooks: BTreeMap<String, PathBuf>,
    /// `hook_timeout_seconds`.
    pub hook_timeout: Duration,
    /// `log_file`: bcd's own log for `logs.collect` with no unit (else `journalctl -u bcd`).
    pub log_file: Option<PathBuf>,
}

impl Default for CommandSettings {
    fn default() -> Self {
        CommandSettings {
            hooks: BTreeMap::new(),
            hook_timeout: Duration::from_secs(DEFAULT_HOOK_TIMEOUT_SECONDS),
            log_file: None,
        }
    }
}

/// `[commands]` as written.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawCommands {
    hook_timeout_seconds: Option<u64>,
    log_file: Option<PathBuf>,
    #[serde(default)]
    hooks: BTreeMap<String, PathBuf>,
}

impl RawCommands {
    /// The settings, or what is wrong (a zero timeout, a relative hook path).
    pub(crate) fn settings(self) -> Result<CommandSettings, String> {
        let timeout = self
            .hook_timeout_seconds
            .unwrap_or(DEFAULT_HOOK_TIMEOUT_SECONDS);
        if timeout == 0 {
            return Err("hook_timeout_seconds must be at least 1".into());
        }
        for (kind, program) in &self.hooks {
            if !program.is_absolute() {
                return Err(format!(
                    "the hook of {kind:?} must be an absolute path, not {}",
                    program.display()
                ));
            }
        }
        Ok(CommandSettings {
            hooks: self.hooks,
            hook_timeout: Duration::from_secs(timeout),
            log_file: self.log_file,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<CommandSettings, String> {
        #[derive(Deserialize)]
        struct File {
            commands: RawCommands,
        }
        toml::from_str::<File>(text)
            .map_err(|e| e.to_string())?
            .commands
            .settings()
    }

    #[test]
    fn hooks_and_timeout_are_read_and_checked() {
        let s = parse("[commands]\nhook_timeout_seconds = 5\n[commands.hooks]\n\"node.reboot\" = \"/bin/true\"\n")
            .unwrap();
        assert_eq!(s.hook_timeout, Duration::from_secs(5));
        assert_eq!(s.hooks["node.reboot"], PathBuf::from("/bin/true"));
        assert_eq!(
            parse("[commands]\nhook_timeout_seconds = 0\n").unwrap_err(),
            "hook_timeout_seconds must be at least 1"
        );
        assert_eq!(
            parse("[commands.hooks]\n\"node.reboot\" = \"reboot.sh\"\n").unwrap_err(),
            "the hook of \"node.reboot\" must be an absolute path, not reboot.sh"
        );
        assert_eq!(parse("[commands]\n").unwrap(), CommandSettings::default());
    }
}
