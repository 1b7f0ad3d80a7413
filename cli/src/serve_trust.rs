//! Settling the trust bundle at start: what every role that holds the keys does before it serves
//! (`all` and `api`), so a Welcome carries a signed bundle at the deployment's current version.

use commands::quorum::{published_bundle, settle_trust_bundle, BundleConfig, SettleOutcome};
use commands::Clock;
use domain::pki::KeySet;
use domain::quorum::{ApproverSet, ApproverSetOffer};
use events::store::EventStore;
use sha2::{Digest, Sha256};

use crate::serve_error::ServeError;

/// Settles the trust bundle this process serves. Before anything is published it publishes the
/// key set's command-signing root with no approver quorum; once a bundle is published (possibly
/// changed since by root rotation or an approver-set change) it settles that same content, so a
/// restart never undoes an operator's change: the version stays, or rises to the floor.
pub async fn settle_trust(
    store: &EventStore,
    clock: &dyn Clock,
    keys: &KeySet,
    floor: u64,
) -> Result<u64, ServeError> {
    let trust = |e: String| ServeError::Trust(e);
    let trust_domain = domain::quorum::TrustDomain::new(keys.trust_domain.as_str())
        .map_err(|e| trust(format!("trust domain {}: {e}", keys.trust_domain)))?;
    let config = match published_bundle(store)
        .await
        .map_err(|e| trust(e.to_string()))?
    {
        None => {
            let root = keys.command_signing_root.cert_der().to_vec();
            BundleConfig {
                trust_domain,
                command_signing_roots: vec![root.clone()],
                active_root: root,
                approvers: ApproverSetOffer {
                    set: ApproverSet::none(),
                    epoch: 0,
                    signatures: Vec::new(),
                },
                floor,
                pin: None,
            }
        }
        Some(published) => {
            let active_root = published
                .command_signing_roots
                .iter()
                .find(|r| Sha256::digest(r).as_slice() == published.active_root_sha256.as_slice())
                .cloned()
                .unwrap_or_default();
            BundleConfig {
                trust_domain,
                command_signing_roots: published.command_signing_roots,
                active_root,
                approvers: ApproverSetOffer {
                    set: published.held.set,
                    epoch: published.held.epoch,
                    signatures: published.set_signatures,
                },
                floor: floor.max(published.floor),
                pin: None,
            }
        }
    };
    let settled = settle_trust_bundle(store, clock, &config)
        .await
        .map_err(|e| trust(e.to_string()))?;
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
