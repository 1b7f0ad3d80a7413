//! The settings of the identity handlers ([`IdentityConfig`]) and the pending-join retry hint
//! `bcctl serve` reads from its environment.

use std::sync::Arc;

use domain::attest::{Configured, DiscoveryConfig, X509PopConfig};
use domain::pki::TrustDomain;
use time::Duration;

use super::budget::RefusalBudget;

/// Settings of the identity handlers.
#[derive(Debug, Clone)]
pub struct IdentityConfig {
    /// The deployment's trust domain (must be the key set's).
    pub trust_domain: TrustDomain,
    /// Lifetime asked for node certificates (the CA caps it at 24 h, 2 h for ramdisks).
    pub leaf_lifetime: Duration,
    /// The tenant unauthenticated refusals are attributed to.
    pub root_tenant: String,
    /// Refusal events per (kind, reason) and minute; more are counted, not recorded one by one.
    pub refusals_per_minute: u32,
    /// The suppressed refusals this process holds until the maintenance flush writes them
    /// (shared by every handler built from clones of this config).
    pub refusal_budget: Arc<RefusalBudget>,
    /// How long after its notAfter a certificate may still re-join with `x509pop` (7 days;
    /// `[attestors.x509pop] grace`).
    pub x509pop_grace: std::time::Duration,
    /// The `discovery` attestor's settings (`[attestors.discovery]`); its `cert_ttl` is also the
    /// lifetime of every ramdisk certificate, at join and at each renewal (at most 2 h).
    pub discovery: domain::attest::DiscoveryConfig,
    /// The retry delay a pending join (one waiting for an operator's approval) answers:
    /// [`domain::attest::JOIN_PENDING_RETRY_SECONDS`] (30 s) by default; `bcctl serve` takes
    /// `BC_JOIN_PENDING_RETRY_SECONDS` (tests set 1 so a released join goes on at once).
    pub pending_retry_seconds: u32,
}

impl IdentityConfig {
    /// 24 h leaves, root tenant `root`, 60 refusals a minute, an empty refusal budget, an x509pop
    /// grace of 7 days, the discovery attestor's defaults, a pending-join retry hint of 30 s.
    pub fn new(trust_domain: TrustDomain) -> Self {
        IdentityConfig {
            trust_domain,
            leaf_lifetime: Duration::hours(24),
            root_tenant: "root".into(),
            refusals_per_minute: 60,
            refusal_budget: Arc::new(RefusalBudget::new()),
            x509pop_grace: domain::attest::x509pop::DEFAULT_GRACE,
            discovery: domain::attest::DiscoveryConfig::default(),
            pending_retry_seconds: domain::attest::JOIN_PENDING_RETRY_SECONDS,
        }
    }
}

impl IdentityConfig {
    /// This config with the settings of `configured` (the attestors as the configuration's
    /// tables configured them) that the identity handlers apply too: `x509pop`'s grace (what
    /// [`super::attestors::AttestorRegistry::builtin_for`] gives it) and `discovery`'s settings,
    /// whose `cert_ttl` is the lifetime of every ramdisk certificate, from any attestor.
    pub fn with_attestor_settings(mut self, configured: &[Configured]) -> Self {
        for c in configured {
            if let Some(x509pop) = c.config::<X509PopConfig>() {
                self.x509pop_grace = x509pop.grace;
            }
            if let Some(discovery) = c.config::<DiscoveryConfig>() {
                self.discovery = discovery.clone();
            }
        }
        self
    }
}

/// The environment variable `bcctl serve` reads [`IdentityConfig::pending_retry_seconds`] from.
pub const PENDING_RETRY_ENV: &str = "BC_JOIN_PENDING_RETRY_SECONDS";

/// The longest pending-join retry hint accepted (an hour: a node asks again at least that often).
pub const MAX_PENDING_RETRY_SECONDS: u32 = 3600;

/// Reads a pending-join retry hint as written in [`PENDING_RETRY_ENV`]: `None` (unset) is the
/// default of 30 s; otherwise whole seconds from 1 to [`MAX_PENDING_RETRY_SECONDS`]. The error
/// is a message for the operator, to follow the variable's name.
pub fn parse_pending_retry(value: Option<&str>) -> Result<u32, String> {
    let Some(text) = value else {
        return Ok(domain::attest::JOIN_PENDING_RETRY_SECONDS);
    };
    match text.trim().parse::<u32>() {
        Ok(n) if (1..=MAX_PENDING_RETRY_SECONDS).contains(&n) => Ok(n),
        _ => Err(format!(
            "must be whole seconds from 1 to {MAX_PENDING_RETRY_SECONDS}, got {text:?}; unset \
             it for the default of {} s",
            domain::attest::JOIN_PENDING_RETRY_SECONDS
        )),
    }
}
