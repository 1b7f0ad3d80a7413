//! What the join and renew handlers take from the key set and the config: the decision's
//! [`JoinContext`], the check that both name one trust domain, digests as stored, and the
//! refusals a join meets before any transaction reads (the role, the self-report's bounds).

use domain::attest::{AttestorRefusal, ADMISSION};
use domain::identity::{JoinContext, JoinInput};
use domain::pki::{KeySet, NodeRole};

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

/// The role `input` asks for when the attestor (`id`, admitting `roles`) lists it, else
/// `<id>:wrong-role` (spec 001 "The contract": before verify); and the machine's self-report
/// within its bounds, else `join:claim-too-long`, `join:claim-not-printable` or
/// `join:claim-too-many` ([`domain::identity::SelfReport::check`]).
pub(super) fn role_and_report(
    id: &str,
    roles: &[NodeRole],
    input: &JoinInput,
) -> Result<NodeRole, AttestorRefusal> {
    let role = match input.role.parse::<NodeRole>() {
        Ok(r) if roles.contains(&r) => r,
        _ => return Err(AttestorRefusal::new(id, "wrong-role")),
    };
    if let Err(refusal) = input.report.check() {
        return Err(AttestorRefusal::new(ADMISSION, refusal.reason()));
    }
    Ok(role)
}
