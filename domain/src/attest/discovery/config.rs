//! What the operator configures for the `discovery` attestor (`[attestors.discovery]` in `bcctl
//! serve`'s configuration, optional: the attestor is a built-in and these are its defaults).

use std::time::Duration;

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
}
