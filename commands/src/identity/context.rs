//! What the join and renew handlers take from the key set and the config: the decision's
//! [`JoinContext`], the check that both name one trust domain, and digests as stored.

use domain::identity::JoinContext;
use domain::pki::KeySet;

use super::config::IdentityConfig;
use super::error::IdentityError;

pub(super) fn digest_vec(d: Option<[u8; 32]>) -> Vec<u8> {
    d.map(|d| d.to_vec()).unwrap_or_default()
}

/// Refuses a config whose trust domain is not the key set's.
pub(super) fn check_trust_domain(
    keys: &KeySet,
    config: &IdentityConfig,
) -> Result<(), IdentityError> {
    if keys.trust_domain != config.trust_domain {
        return Err(IdentityError::Failed(format!(
            "INVALID_CONFIG: the configured trust domain {} is not the PKI bundle's {}",
            config.trust_domain, keys.trust_domain
        )));
    }
    Ok(())
}

/// What the join and renew decisions need of the key set and the config.
pub(super) fn context<'a>(keys: &'a KeySet, config: &'a IdentityConfig) -> JoinContext<'a> {
    JoinContext {
        trust_domain: &config.trust_domain,
        node_ca: &keys.node_ca,
        join_encryption: &keys.join_encryption,
        leaf_lifetime: config.leaf_lifetime,
        ramdisk_lifetime: config.discovery.ramdisk_lifetime(),
    }
}
