//! Settling the trust bundle at start: what every role that holds the keys does before it serves
//! (`all` and `api`), so a Welcome carries a signed bundle at the deployment's current version.
//!
//! The content settled is [`configured_bundle`]'s, which `bcctl pki trust-version` compares with
//! the published bundle too: the command-signing roots are the published ones (a restart never
//! undoes a root rotation; before anything is published, the key set's root), and the approver
//! quorum is the configured `[quorum]` table's when there is one, else the published one.
//!
//! A configured set the settle refuses (not signed by the held set's threshold for a higher
//! epoch: approver-set-unsigned, stale-epoch) is not published: the process logs a warning naming
//! `bcctl batch sign-approvers --epoch <published + 1>` and settles the published quorum with the
//! rest of its configuration, so it still starts (see docs/DECISIONS.md, "Issue 21: an unsigned
//! approver-set change at start").

use commands::quorum::{
    published_bundle, settle_trust_bundle, BundleConfig, PublishedBundle, QuorumError,
    QuorumRefusal, SettleOutcome,
};
use commands::Clock;
use domain::pki::KeySet;
use domain::quorum::{ApproverSet, ApproverSetOffer, TrustDomain};
use events::store::EventStore;
use sha2::{Digest, Sha256};

use crate::serve::config::quorum::QuorumConfig;
use crate::serve::error::ServeError;

/// The bundle this configuration publishes: over `published` (if any) with the key set's root
/// `root_der` before anything is published, the configured `quorum` (if any), and `floor`.
pub fn configured_bundle(
    trust_domain: &TrustDomain,
    root_der: &[u8],
    published: Option<&PublishedBundle>,
    quorum: Option<&QuorumConfig>,
    floor: u64,
) -> Result<BundleConfig, String> {
    let configured = quorum.map(|q| q.offer(trust_domain)).transpose()?;
    Ok(match published {
        None => BundleConfig {
            trust_domain: trust_domain.clone(),
            command_signing_roots: vec![root_der.to_vec()],
            active_root: root_der.to_vec(),
            approvers: configured.unwrap_or(ApproverSetOffer {
                set: ApproverSet::none(),
                epoch: 0,
                signatures: Vec::new(),
            }),
            floor,
            pin: None,
        },
        Some(published) => {
            let active_root = published
                .command_signing_roots
                .iter()
                .find(|r| Sha256::digest(r).as_slice() == published.active_root_sha256.as_slice())
                .cloned()
                .unwrap_or_default();
            BundleConfig {
                trust_domain: trust_domain.clone(),
                command_signing_roots: published.command_signing_roots.clone(),
                active_root,
                approvers: configured.unwrap_or(ApproverSetOffer {
                    set: published.held.set.clone(),
                    epoch: published.held.epoch,
                    signatures: published.set_signatures.clone(),
                }),
                floor: floor.max(published.floor),
                pin: None,
            }
        }
    })
}

/// The deployment's trust domain in the quorum's type.
pub fn quorum_trust_domain(keys: &KeySet) -> Result<TrustDomain, ServeError> {
    TrustDomain::new(keys.trust_domain.as_str())
        .map_err(|e| ServeError::Trust(format!("trust domain {}: {e}", keys.trust_domain)))
}

/// The warning a process logs when its configured approver set is refused.
pub fn unsigned_change_warning(refusal: &QuorumRefusal, published_epoch: u64) -> String {
    format!(
        "the configured approver set ([quorum]) is not published: {refusal}; daemons keep the \
         held set. Have the current approvers sign it: bcctl batch sign-approvers --epoch {} \
         (and set quorum.epoch and quorum.set_signatures)",
        published_epoch.saturating_add(1)
    )
}

/// Settles the trust bundle this process serves (see the module doc) and answers its version.
pub async fn settle_trust(
    store: &EventStore,
    clock: &dyn Clock,
    keys: &KeySet,
    floor: u64,
    quorum: Option<&QuorumConfig>,
) -> Result<u64, ServeError> {
    let trust = |e: String| ServeError::Trust(e);
    let trust_domain = quorum_trust_domain(keys)?;
    let root = keys.command_signing_root.cert_der();
    let published = published_bundle(store)
        .await
        .map_err(|e| trust(e.to_string()))?;
    let config = configured_bundle(&trust_domain, root, published.as_ref(), quorum, floor)
        .map_err(|e| ServeError::Invalid {
            key: "quorum",
            message: e,
        })?;
    let settled = match settle_trust_bundle(store, clock, &config).await {
        Err(QuorumError::Refused(refusal @ QuorumRefusal::SetChange(_))) if quorum.is_some() => {
            let epoch = published.as_ref().map_or(0, |p| p.held.epoch);
            tracing::warn!("{}", unsigned_change_warning(&refusal, epoch));
            let held = configured_bundle(&trust_domain, root, published.as_ref(), None, floor)
                .map_err(trust)?;
            settle_trust_bundle(store, clock, &held)
                .await
                .map_err(|e| trust(e.to_string()))?
        }
        other => other.map_err(|e| trust(e.to_string()))?,
    };
    if let Some(w) = &settled.warning {
        tracing::warn!("{w}");
    }
    match settled.outcome {
        SettleOutcome::Published { previous } => {
            tracing::info!(
                version = settled.version,
                previous,
                "trust bundle published"
            )
        }
        _ => tracing::info!(version = settled.version, "trust bundle settled"),
    }
    Ok(settled.version)
}
