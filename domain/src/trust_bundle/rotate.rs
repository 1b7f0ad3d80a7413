//! Rotating the command-signing root in three stages: add (trust a second root; the version goes
//! up), switch (workers sign under it, gated on connected nodes holding that version) and drop
//! (the former root is no longer trusted, at least 24 h after the switch; the version goes up).

use events::schema::{CommandRootAdded, CommandRootDropped, CommandRootSwitched};

use super::content::content_of;
use super::digest::{bundle_digest, root_hashes, root_sha256, set_sha256};
use super::event::{Publication, PublishCause, TrustBundleEvent};
use super::refusal::{invalid_state, TrustBundleError, TrustBundleRefusal};
use super::state::{
    ConnectedNode, PublishedState, RotationStage, SettleOutcome, Settled, Switched,
    DROP_AFTER_SWITCH_US,
};
use crate::quorum::Decision;

/// How many of the nodes behind a refused switch names.
const BEHIND_SAMPLE: usize = 5;

/// Checks the root an add stage is asked to trust, before anything is read.
pub fn check_new_root(new_root_der: &[u8]) -> Result<(), TrustBundleRefusal> {
    if new_root_der.is_empty() {
        return Err(TrustBundleRefusal::InvalidConfig(
            "the new command-signing root is empty".to_string(),
        ));
    }
    Ok(())
}

/// Stage 1: trust `new_root_der` beside the current root; the version goes up.
pub fn decide_add_root(
    new_root_der: &[u8],
    state: &PublishedState,
) -> Result<Decision<TrustBundleEvent, Settled>, TrustBundleError> {
    check_new_root(new_root_der)?;
    if state.rotation_stage != RotationStage::None {
        return invalid_state(format!(
            "a rotation is already in progress (stage {}): run `bcctl pki rotate-command-root --stage {}` next",
            state.rotation_stage.as_str(),
            if state.rotation_stage == RotationStage::Added {
                "switch"
            } else {
                "drop"
            }
        ));
    }
    let held = &state.content.held;
    let new_hash = root_sha256(new_root_der);
    let mut roots = state.content.command_signing_roots.clone();
    if root_hashes(&roots).contains(&new_hash) {
        return invalid_state("that root is already trusted by the published bundle");
    }
    if roots.len() != 1 {
        return invalid_state(format!(
            "the published bundle trusts {} command-signing roots; a rotation starts from exactly one",
            roots.len()
        ));
    }
    roots.push(new_root_der.to_vec());
    let digest = bundle_digest(&roots, &held.set, held.epoch);
    let version = (state.version + 1).max(state.floor);
    let events = vec![
        TrustBundleEvent::CommandRootAdded(CommandRootAdded {
            root_der: new_root_der.to_vec(),
            root_sha256: new_hash.to_vec(),
        }),
        Publication {
            content: content_of(&roots, &held.set, held.epoch, &state.content.signatures),
            digest,
            version,
            previous: state.version,
            floor: state.floor,
            cause: PublishCause::RotationAdd,
            active_root_sha256: state.active_root_sha256.clone(),
            set_sha256: set_sha256(&held.set),
        }
        .into_event(),
    ];
    Ok(Decision {
        events,
        outcome: published(version, digest, state.version),
    })
}

/// Stage 2: workers sign under the new root. Refused while a connected node reports a trust
/// version below the published one (which carries the new root), unless `force`. `connected`
/// are the nodes seen within [`super::CONNECTED_WINDOW_US`].
pub fn decide_switch_root(
    state: &PublishedState,
    connected: &[ConnectedNode],
    force: bool,
) -> Result<Decision<TrustBundleEvent, Switched>, TrustBundleError> {
    if state.rotation_stage != RotationStage::Added {
        return invalid_state(format!(
            "switch comes after add (`bcctl pki rotate-command-root --stage add`): the rotation is at stage {}",
            state.rotation_stage.as_str()
        ));
    }
    let Some(to) = state.rotation_root_sha256.clone() else {
        return Err(TrustBundleError::Corrupt(
            "rotation stage added without its root".to_string(),
        ));
    };
    let behind: Vec<&ConnectedNode> = connected
        .iter()
        .filter(|n| n.trust_version < state.version)
        .collect();
    if !behind.is_empty() && !force {
        let sample = behind
            .iter()
            .take(BEHIND_SAMPLE)
            .map(|n| format!("{} at {}", n.node_id, n.trust_version))
            .collect::<Vec<_>>()
            .join(", ");
        return Err(TrustBundleRefusal::NodesBehind {
            behind: behind.len(),
            connected: connected.len(),
            version: state.version,
            sample,
        }
        .into());
    }
    Ok(Decision {
        events: vec![TrustBundleEvent::CommandRootSwitched(CommandRootSwitched {
            from_sha256: state.active_root_sha256.clone(),
            to_sha256: to,
            gated_version: state.version,
            forced: force,
            behind: u32::try_from(behind.len()).unwrap_or(u32::MAX),
        })],
        outcome: Switched {
            gated_version: state.version,
            connected: connected.len(),
            behind: behind.len(),
        },
    })
}

/// Stage 3: the former root is no longer trusted; the version goes up. Refused less than 24 h
/// after the switch (worker keys live at most 24 h), unless `force`.
pub fn decide_drop_root(
    state: &PublishedState,
    force: bool,
    now_us: i64,
) -> Result<Decision<TrustBundleEvent, Settled>, TrustBundleError> {
    if state.rotation_stage != RotationStage::Switched {
        return invalid_state(format!(
            "drop comes after switch (`bcctl pki rotate-command-root --stage switch`): the rotation is at stage {}",
            state.rotation_stage.as_str()
        ));
    }
    let switched_at = state.switched_at_us.unwrap_or(i64::MIN);
    if !force && now_us.saturating_sub(switched_at) < DROP_AFTER_SWITCH_US {
        return invalid_state(
            "the switch was less than 24 hours ago: worker certificates under the old root may \
             still be valid; drop later or use --force",
        );
    }
    let held = &state.content.held;
    let all = &state.content.command_signing_roots;
    let active = state.active_root_sha256.as_slice();
    let roots: Vec<Vec<u8>> = all
        .iter()
        .filter(|r| root_sha256(r).as_slice() == active)
        .cloned()
        .collect();
    let Some(old) = root_hashes(all)
        .into_iter()
        .find(|h| h.as_slice() != active)
    else {
        return Err(TrustBundleError::Corrupt(
            "rotation stage switched without a former root".to_string(),
        ));
    };
    let digest = bundle_digest(&roots, &held.set, held.epoch);
    let version = (state.version + 1).max(state.floor);
    let events = vec![
        TrustBundleEvent::CommandRootDropped(CommandRootDropped {
            root_sha256: old.to_vec(),
        }),
        Publication {
            content: content_of(&roots, &held.set, held.epoch, &state.content.signatures),
            digest,
            version,
            previous: state.version,
            floor: state.floor,
            cause: PublishCause::RotationDrop,
            active_root_sha256: state.active_root_sha256.clone(),
            set_sha256: set_sha256(&held.set),
        }
        .into_event(),
    ];
    Ok(Decision {
        events,
        outcome: published(version, digest, state.version),
    })
}

fn published(version: u64, digest: [u8; 32], previous: u64) -> Settled {
    Settled {
        version,
        digest,
        outcome: SettleOutcome::Published { previous },
        warning: None,
    }
}
