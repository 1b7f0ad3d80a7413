//! Settling a configuration: which version its content is published at, or why nothing changes.
//!
//! - nothing published yet: publish at max(1, floor);
//! - the same digest as published: keep the version (republish at the floor if the floor is
//!   above it);
//! - a digest published before and since replaced: serve it at its old version and warn, change
//!   nothing (unless the floor is above the published version, which publishes it again);
//! - new content: publish at max(published + 1, floor), after
//!   [`crate::quorum::check_set_change`] took the approver part (first set without signatures,
//!   pin checked; later sets only at a higher epoch signed by the current threshold of current
//!   keys in this trust domain).

use events::schema::ApproverSetChanged;

use super::config::ValidConfig;
use super::content::content_of;
use super::digest::{root_hashes, root_sha256, set_sha256};
use super::event::{Publication, PublishCause, TrustBundleEvent};
use super::refusal::{TrustBundleError, TrustBundleRefusal};
use super::state::{PublishedState, SettleOutcome, Settled};
use crate::quorum::{check_set_change, Decision, HeldApproverSet, SetChange};

/// Decides a settle. `published` is the published bundle, if any; `replaced_version` is the
/// highest version at which this configuration's digest was published before, looked up only
/// when the published digest differs.
pub fn decide_settle(
    valid: &ValidConfig<'_>,
    published: Option<&PublishedState>,
    replaced_version: Option<u64>,
) -> Result<Decision<TrustBundleEvent, Settled>, TrustBundleError> {
    let config = valid.config();
    let digest = valid.digest();
    let same_content = published.is_some_and(|p| p.digest == digest);
    let (held, previous, active) = match published {
        None => (HeldApproverSet::initial(), 0, None),
        Some(p) => {
            if config.floor <= p.version {
                if same_content {
                    return Ok(Decision::unchanged(Settled {
                        version: p.version,
                        digest,
                        outcome: SettleOutcome::Unchanged,
                        warning: None,
                    }));
                }
                if let Some(old) = replaced_version {
                    return Ok(Decision::unchanged(stale(digest, old, p.version)));
                }
            }
            (
                p.content.held.clone(),
                p.version,
                Some(p.active_root_sha256.clone()),
            )
        }
    };
    let change = if same_content {
        SetChange::Unchanged
    } else {
        check_set_change(
            &config.approvers,
            &held,
            config.pin.as_ref(),
            &config.trust_domain,
        )
        .map_err(TrustBundleRefusal::SetChange)?
    };
    let version = (previous + 1).max(config.floor).max(1);
    let config_active: Vec<u8> = if config.active_root.is_empty() {
        Vec::new()
    } else {
        root_sha256(&config.active_root).to_vec()
    };
    let roots = root_hashes(&config.command_signing_roots);
    let active_root_sha256 = match active {
        Some(a) if roots.iter().any(|r| r.as_slice() == a.as_slice()) => a,
        _ => config_active,
    };
    let mut events = vec![Publication {
        content: content_of(
            &config.command_signing_roots,
            &config.approvers.set,
            config.approvers.epoch,
            &config.approvers.signatures,
        ),
        digest,
        version,
        previous,
        floor: config.floor,
        cause: if same_content {
            PublishCause::Floor
        } else {
            PublishCause::Settled
        },
        active_root_sha256,
        set_sha256: set_sha256(&config.approvers.set),
    }
    .into_event()];
    if let SetChange::Adopt {
        held: new,
        first,
        signed_by,
    } = &change
    {
        events.push(TrustBundleEvent::ApproverSetChanged(ApproverSetChanged {
            epoch: new.epoch,
            approver_set_sha256: new.set.digest().as_bytes().to_vec(),
            first: *first,
            signed_by: signed_by.iter().map(|k| k.as_bytes().to_vec()).collect(),
            previous_epoch: held.epoch,
        }));
    }
    Ok(Decision {
        events,
        outcome: Settled {
            version,
            digest,
            outcome: SettleOutcome::Published { previous },
            warning: None,
        },
    })
}

fn stale(digest: [u8; 32], old: u64, published: u64) -> Settled {
    Settled {
        version: old,
        digest,
        outcome: SettleOutcome::Stale { published },
        warning: Some(format!(
            "this configuration's trust bundle was published as version {old} \
             and has since been replaced (the deployment publishes version {published}); \
             serving it at version {old}, which daemons ignore: update this \
             process's configuration, or raise pki.trustVersion above {published} to \
             publish it again"
        )),
    }
}
