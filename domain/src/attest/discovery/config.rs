//! What the operator configures for the `discovery` attestor (`[attestors.discovery]` in `bcctl
//! serve`'s configuration, optional: the attestor is a built-in and these are its defaults), how
//! the table is read (the attestor registers in [`super::factory`]).
//!
//! ```toml
//! [attestors.discovery]
//! approval = "never"        # or "unknown-machines", "always" (default "never")
//! allowed_kinds = ["inventory.refresh", "logs.collect", "diag.*", "disk.wipe", "deploy.*", "boot.kexec"]
//! cert_ttl = "2h"           # a ramdisk certificate's life, at most (and by default) 2h
//! ```

use std::time::Duration;

use serde::Deserialize;

use super::wire::DISCOVERY_ATTESTOR;
use crate::attest::factory::{parse_table, ConfigTable, SettingError};
use crate::attest::kinds::{check_kind_list, KindListError};
use crate::pki::leaf::RAMDISK_MAX_LIFETIME;

/// The commissioning command kinds a ramdisk certificate allows by default (spec 000
/// "discovery", `discoveryAllowedKinds`).
pub const DEFAULT_ALLOWED_KINDS: &[&str] = &[
    "inventory.refresh",
    "logs.collect",
    "diag.*",
    "disk.wipe",
    "deploy.*",
    "boot.kexec",
];

/// The longest (and default) life of a ramdisk certificate: 2 hours.
pub const MAX_CERT_TTL: Duration = Duration::from_secs(RAMDISK_MAX_LIFETIME.whole_seconds() as u64);

/// When a discovery join waits for an operator's approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DiscoveryApproval {
    /// `approval = "never"` (the default): the two vouchers suffice.
    #[default]
    Never,
    /// `approval = "unknown-machines"`: defer unless the assertion's boot entry names a product
    /// UUID and the machine claims exactly it.
    UnknownMachines,
    /// `approval = "always"`: every discovery join waits for an operator.
    Always,
}

impl DiscoveryApproval {
    /// The configuration word.
    pub fn as_str(self) -> &'static str {
        match self {
            DiscoveryApproval::Never => "never",
            DiscoveryApproval::UnknownMachines => "unknown-machines",
            DiscoveryApproval::Always => "always",
        }
    }

    /// Reads the configuration word.
    pub fn parse(text: &str) -> Option<DiscoveryApproval> {
        match text {
            "never" => Some(DiscoveryApproval::Never),
            "unknown-machines" => Some(DiscoveryApproval::UnknownMachines),
            "always" => Some(DiscoveryApproval::Always),
            _ => None,
        }
    }
}

/// Why a discovery configuration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DiscoveryConfigError {
    /// `allowed_kinds` holds a pattern that is no kind name or prefix, or too many.
    #[error("allowed_kinds: {0}")]
    Kinds(#[from] KindListError),
    /// `cert_ttl` is zero or above 2 hours.
    #[error("cert_ttl {0:?} is not above 0 and at most 2h (a ramdisk certificate lives 2 hours at most)")]
    CertTtl(Duration),
}

/// The `discovery` attestor's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoveryConfig {
    /// When a join waits for an operator.
    pub approval: DiscoveryApproval,
    /// The command kinds the ramdisk certificate allows (exact names or `prefix.*`).
    pub allowed_kinds: Vec<String>,
    /// The ramdisk certificate's lifetime, at join and at every renewal (at most 2 h).
    pub cert_ttl: Duration,
}

impl Default for DiscoveryConfig {
    /// Approval never, the default kinds, 2 hours.
    fn default() -> Self {
        DiscoveryConfig {
            approval: DiscoveryApproval::Never,
            allowed_kinds: DEFAULT_ALLOWED_KINDS
                .iter()
                .map(|k| (*k).to_owned())
                .collect(),
            cert_ttl: MAX_CERT_TTL,
        }
    }
}

impl DiscoveryConfig {
    /// Checks the kinds and the lifetime.
    pub fn validate(&self) -> Result<(), DiscoveryConfigError> {
        check_kind_list(&self.allowed_kinds)?;
        if self.cert_ttl.is_zero() || self.cert_ttl > MAX_CERT_TTL {
            return Err(DiscoveryConfigError::CertTtl(self.cert_ttl));
        }
        Ok(())
    }

    /// The ramdisk certificate lifetime as the certificate decisions take it (capped at 2 h).
    pub fn ramdisk_lifetime(&self) -> time::Duration {
        time::Duration::try_from(self.cert_ttl)
            .unwrap_or(RAMDISK_MAX_LIFETIME)
            .min(RAMDISK_MAX_LIFETIME)
    }
}

/// `[attestors.discovery]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct DiscoveryTable {
    approval: Option<String>,
    allowed_kinds: Option<Vec<String>>,
    cert_ttl: Option<String>,
}

impl DiscoveryConfig {
    /// Reads `[attestors.discovery]` (the defaults without it), checked; a refusal names its
    /// key.
    pub fn from_table(table: Option<&ConfigTable>) -> Result<Self, String> {
        let written: DiscoveryTable = parse_table(DISCOVERY_ATTESTOR, table)?;
        let mut config = DiscoveryConfig::default();
        if let Some(text) = &written.approval {
            config.approval = DiscoveryApproval::parse(text).ok_or_else(|| {
                SettingError::new(
                    "attestors.discovery.approval",
                    format!("{text:?} is not \"never\", \"unknown-machines\" or \"always\""),
                )
            })?;
        }
        if let Some(kinds) = &written.allowed_kinds {
            check_kind_list(kinds).map_err(|e| {
                SettingError::new("attestors.discovery.allowed_kinds", e.to_string())
            })?;
            config.allowed_kinds = kinds.clone();
        }
        if let Some(text) = &written.cert_ttl {
            config.cert_ttl = crate::duration::parse_duration(text)
                .map_err(|m| SettingError::new("attestors.discovery.cert_ttl", m))?;
        }
        config.validate().map_err(|e| match e {
            DiscoveryConfigError::Kinds(e) => {
                SettingError::new("attestors.discovery.allowed_kinds", e.to_string())
            }
            e @ DiscoveryConfigError::CertTtl(_) => {
                SettingError::new("attestors.discovery.cert_ttl", e.to_string())
            }
        })?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_validate_and_bad_settings_do_not() {
        let d = DiscoveryConfig::default();
        assert_eq!(d.validate(), Ok(()));
        assert_eq!(d.cert_ttl, Duration::from_secs(7200));
        assert_eq!(d.ramdisk_lifetime(), time::Duration::hours(2));
        let mut bad = d.clone();
        bad.cert_ttl = Duration::from_secs(7201);
        assert!(matches!(
            bad.validate(),
            Err(DiscoveryConfigError::CertTtl(_))
        ));
        bad.cert_ttl = Duration::ZERO;
        assert!(bad.validate().is_err());
        let mut bad = d;
        bad.allowed_kinds.push("wipe everything".into());
        assert!(matches!(
            bad.validate(),
            Err(DiscoveryConfigError::Kinds(_))
        ));
        for a in ["never", "unknown-machines", "always"] {
            assert_eq!(DiscoveryApproval::parse(a).map(|a| a.as_str()), Some(a));
        }
        assert_eq!(DiscoveryApproval::parse("sometimes"), None);
    }

    /// Issue 40 item 16: the default allowed kinds are exactly the registered kinds a ramdisk
    /// may run (spec 000 "discovery": "exactly the registered kinds whose roles include
    /// ramdisk"), and every default pattern allows at least one of them, so the list and the
    /// registry cannot drift apart unnoticed.
    #[test]
    fn the_default_allowed_kinds_are_exactly_the_registered_ramdisk_kinds() {
        use crate::attest::kinds::pattern_allows;
        use crate::command::kinds::BUILT_IN_KINDS;
        use crate::pki::NodeRole;
        let allowed_by_defaults: Vec<&str> = BUILT_IN_KINDS
            .iter()
            .filter(|k| {
                DEFAULT_ALLOWED_KINDS
                    .iter()
                    .any(|p| pattern_allows(p, k.name))
            })
            .map(|k| k.name)
            .collect();
        let ramdisk_kinds: Vec<&str> = BUILT_IN_KINDS
            .iter()
            .filter(|k| k.allows_role(NodeRole::Ramdisk))
            .map(|k| k.name)
            .collect();
        assert_eq!(allowed_by_defaults, ramdisk_kinds);
        for pattern in DEFAULT_ALLOWED_KINDS {
            assert!(
                BUILT_IN_KINDS
                    .iter()
                    .any(|k| pattern_allows(pattern, k.name)),
                "the default allowed kind {pattern:?} allows no registered kind"
            );
        }
    }

    #[test]
    fn the_discovery_table_is_optional_and_checked() {
        let read = |text: &str| {
            let t = crate::attest::factory::toml_table(text, "discovery")?;
            DiscoveryConfig::from_table(t.as_ref())
        };
        assert_eq!(
            DiscoveryConfig::from_table(None),
            Ok(DiscoveryConfig::default())
        );
        assert_eq!(read("[discovery]\n"), Ok(DiscoveryConfig::default()));
        let c = read(
            "[discovery]\napproval = \"unknown-machines\"\nallowed_kinds = [\"disk.wipe\", \
             \"diag.*\"]\ncert_ttl = \"30m\"\n",
        )
        .unwrap();
        assert_eq!(c.approval, DiscoveryApproval::UnknownMachines);
        assert_eq!(c.allowed_kinds, vec!["disk.wipe", "diag.*"]);
        assert_eq!(c.cert_ttl, Duration::from_secs(1800));
        for (bad, key) in [
            ("approval = \"sometimes\"", "attestors.discovery.approval"),
            (
                "allowed_kinds = [\"disk wipe\"]",
                "attestors.discovery.allowed_kinds",
            ),
            ("cert_ttl = \"3h\"", "attestors.discovery.cert_ttl"),
            ("cert_ttl = \"soon\"", "attestors.discovery.cert_ttl"),
        ] {
            let err = read(&format!("[discovery]\n{bad}\n")).unwrap_err();
            assert!(err.starts_with(key), "{bad}: {err}");
        }
        assert!(read("[discovery]\nttl = \"1h\"\n").is_err());
    }
}
