//! What a process is configured to publish, and the checks it must pass before it is settled.

use super::digest::{bundle_digest, root_hashes};
use super::refusal::{invalid_config, TrustBundleRefusal};
use crate::quorum::{ApproverSetOffer, SetDigest, TrustDomain};

/// What a process is configured to publish.
#[derive(Debug, Clone)]
pub struct BundleConfig {
    /// The deployment's trust domain (set signatures are checked in it).
    pub trust_domain: TrustDomain,
    /// Command-signing root certificates (DER) the bundle trusts.
    pub command_signing_roots: Vec<Vec<u8>>,
    /// The root workers sign under (DER; one of `command_signing_roots`). Empty only without roots.
    pub active_root: Vec<u8>,
    /// The approver set offered, its epoch and its signatures (`ApproverSet::none()` at epoch 0
    /// for no quorum).
    pub approvers: ApproverSetOffer,
    /// pki.trustVersion: the published version is never below it.
    pub floor: u64,
    /// The first-set pin (SHA-256 of approverSetInput), if the operator set one.
    pub pin: Option<SetDigest>,
}

/// A configuration that passed [`validate`], with its content digest.
#[derive(Debug, Clone, Copy)]
pub struct ValidConfig<'a> {
    config: &'a BundleConfig,
    digest: [u8; 32],
}

impl<'a> ValidConfig<'a> {
    /// The configuration.
    pub fn config(&self) -> &'a BundleConfig {
        self.config
    }

    /// Its content digest ([`super::bundle_digest`]).
    pub fn digest(&self) -> [u8; 32] {
        self.digest
    }
}

/// Checks a configuration can be published: roots present and distinct, approver keys only
/// with a root and an epoch, the active root among the trusted ones.
pub fn validate(config: &BundleConfig) -> Result<ValidConfig<'_>, TrustBundleRefusal> {
    let mut hashes = root_hashes(&config.command_signing_roots);
    if config.command_signing_roots.iter().any(|r| r.is_empty()) {
        return invalid_config("a command-signing root is empty: give the root certificate's DER");
    }
    hashes.sort_unstable();
    if hashes.windows(2).any(|w| w[0] == w[1]) {
        return invalid_config("a command-signing root is listed twice");
    }
    if !config.approvers.set.is_empty() && config.command_signing_roots.is_empty() {
        return invalid_config(
            "approver keys need a command-signing root in the bundle (pki.commandSigning)",
        );
    }
    if !config.approvers.set.is_empty() && config.approvers.epoch == 0 {
        return invalid_config("an approver set needs an epoch of 1 or more (pki.approvers.epoch)");
    }
    if !config.command_signing_roots.is_empty()
        && !config.command_signing_roots.contains(&config.active_root)
    {
        return invalid_config(
            "the active command-signing root (pki.commandSigning) is not among the trusted roots",
        );
    }
    let digest = bundle_digest(
        &config.command_signing_roots,
        &config.approvers.set,
        config.approvers.epoch,
    );
    Ok(ValidConfig { config, digest })
}
