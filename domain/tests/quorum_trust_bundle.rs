//! The trust bundle's pure decisions, refusal by refusal: configuration checks, settling (new,
//! unchanged, stale, floor), the set-change refusal, and the rotation stages' gates. The same
//! rules run end to end in `commands/tests/quorum_commands.rs`.

use crate::quorum_support as support;

use domain::quorum::{ApproverSet, ApproverSetOffer, SetChangeRefusal};
use domain::trust_bundle::{
    bundle_digest, content_of, decide_add_root, decide_drop_root, decide_settle,
    decide_switch_root, read_content, root_sha256, validate, BundleConfig, ConnectedNode,
    PublishedState, RotationStage, SettleOutcome, TrustBundleError, TrustBundleEvent,
    TrustBundleRefusal, DROP_AFTER_SWITCH_US,
};
use support::{keys, set_of, td};

fn root(tag: u8) -> Vec<u8> {
    vec![0x30, 0x82, tag, tag, tag, 0x01]
}

fn config() -> BundleConfig {
    BundleConfig {
        trust_domain: td("prod.example.org"),
        command_signing_roots: vec![root(1)],
        active_root: root(1),
        approvers: ApproverSetOffer {
            set: ApproverSet::none(),
            epoch: 0,
            signatures: Vec::new(),
        },
        floor: 0,
        pin: None,
    }
}

fn invalid_config(config: &BundleConfig) -> String {
    match validate(config) {
        Err(TrustBundleRefusal::InvalidConfig(why)) => why,
        other => panic!("expected INVALID_CONFIG, got {other:?}"),
    }
}

/// The state a settle of `config` at `version` leaves.
fn published(config: &BundleConfig, version: u64) -> PublishedState {
    let valid = validate(config).unwrap();
    let content = content_of(
        &config.command_signing_roots,
        &config.approvers.set,
        config.approvers.epoch,
        &config.approvers.signatures,
    );
    PublishedState {
        version,
        digest: valid.digest().to_vec(),
        content: read_content(content).unwrap(),
        active_root_sha256: root_sha256(&config.active_root).to_vec(),
        rotation_stage: RotationStage::None,
        rotation_root_sha256: None,
        switched_at_us: None,
        floor: config.floor,
    }
}

fn refused<T: std::fmt::Debug>(result: Result<T, TrustBundleError>) -> TrustBundleRefusal {
    match result {
        Err(TrustBundleError::Refused(r)) => r,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn configurations_that_cannot_be_published_are_refused() {
    let mut empty_root = config();
    empty_root.command_signing_roots.push(Vec::new());
    assert!(invalid_config(&empty_root).contains("empty"));

    let mut twice = config();
    twice.command_signing_roots.push(root(1));
    assert!(invalid_config(&twice).contains("listed twice"));

    let k = keys();
    let set = set_of(&[&k[0], &k[1]], 1, &[], 0);
    let mut keys_without_root = config();
    keys_without_root.command_signing_roots.clear();
    keys_without_root.active_root.clear();
    keys_without_root.approvers.set = set.clone();
    keys_without_root.approvers.epoch = 1;
    assert!(invalid_config(&keys_without_root).contains("need a command-signing root"));

    let mut epoch_zero = config();
    epoch_zero.approvers.set = set;
    assert!(invalid_config(&epoch_zero).contains("epoch of 1 or more"));

    let mut inactive = config();
    inactive.active_root = root(2);
    assert!(invalid_config(&inactive).contains("not among the trusted roots"));

    let ok = config();
    assert_eq!(
        validate(&ok).unwrap().digest(),
        bundle_digest(&ok.command_signing_roots, &ApproverSet::none(), 0)
    );
}

#[test]
fn settling_publishes_keeps_or_serves_the_stale_version() {
    let c = config();
    let valid = validate(&c).unwrap();
    let first = decide_settle(&valid, None, None).unwrap();
    assert_eq!(first.outcome.version, 1);
    assert_eq!(
        first.outcome.outcome,
        SettleOutcome::Published { previous: 0 }
    );
    assert!(matches!(
        first.events.as_slice(),
        [TrustBundleEvent::Published(p)] if p.version == 1 && p.cause == "settled"
    ));

    // The same content at its version: nothing to write.
    let same = decide_settle(&valid, Some(&published(&c, 1)), None).unwrap();
    assert!(same.events.is_empty());
    assert_eq!(same.outcome.outcome, SettleOutcome::Unchanged);

    // The same content under a higher floor: republished at the floor.
    let mut floored = c.clone();
    floored.floor = 5;
    let valid_floored = validate(&floored).unwrap();
    let at_floor = decide_settle(&valid_floored, Some(&published(&c, 1)), None).unwrap();
    assert_eq!(at_floor.outcome.version, 5);
    assert!(matches!(
        at_floor.events.as_slice(),
        [TrustBundleEvent::Published(p)] if p.cause == "floor" && p.previous_version == 1
    ));

    // Content published before and since replaced: served at its old version, with a warning.
    let mut newer = c.clone();
    newer.command_signing_roots.push(root(2));
    let stale = decide_settle(&valid, Some(&published(&newer, 4)), Some(2)).unwrap();
    assert!(stale.events.is_empty());
    assert_eq!(stale.outcome.version, 2);
    assert_eq!(stale.outcome.outcome, SettleOutcome::Stale { published: 4 });
    assert!(stale.outcome.warning.unwrap().contains("above 4"));
}

#[test]
fn a_set_change_without_the_held_signatures_is_refused() {
    let k = keys();
    let held = set_of(&[&k[0], &k[1], &k[2]], 2, &[], 0);
    let mut c1 = config();
    c1.approvers.set = held;
    c1.approvers.epoch = 1;
    // The first set is taken without signatures, and says so.
    let first = decide_settle(&validate(&c1).unwrap(), None, None).unwrap();
    assert!(matches!(
        first.events.as_slice(),
        [TrustBundleEvent::Published(_), TrustBundleEvent::ApproverSetChanged(c)] if c.first
    ));

    let mut c2 = c1.clone();
    c2.approvers.set = set_of(&[&k[0], &k[1]], 1, &[], 0);
    c2.approvers.epoch = 2;
    let r = refused(decide_settle(
        &validate(&c2).unwrap(),
        Some(&published(&c1, 1)),
        None,
    ));
    assert!(
        matches!(
            r,
            TrustBundleRefusal::SetChange(SetChangeRefusal::Unsigned { valid: 0, .. })
        ),
        "{r:?}"
    );
}

#[test]
fn rotation_stages_run_in_order() {
    let c = config();
    let state = published(&c, 3);
    // Add: an empty root, a trusted root, and a second add are refused.
    assert!(matches!(
        refused(decide_add_root(&[], &state)),
        TrustBundleRefusal::InvalidConfig(_)
    ));
    assert!(matches!(
        refused(decide_add_root(&root(1), &state)),
        TrustBundleRefusal::InvalidState(why) if why.contains("already trusted")
    ));
    let added = decide_add_root(&root(2), &state).unwrap();
    assert_eq!(added.outcome.version, 4);
    assert!(matches!(
        added.events.as_slice(),
        [TrustBundleEvent::CommandRootAdded(_), TrustBundleEvent::Published(p)] if p.cause == "rotation-add"
    ));
    let mut two_roots = c.clone();
    two_roots.command_signing_roots.push(root(2));
    let mut in_add = published(&two_roots, 4);
    in_add.rotation_stage = RotationStage::Added;
    in_add.rotation_root_sha256 = Some(root_sha256(&root(2)).to_vec());
    assert!(matches!(
        refused(decide_add_root(&root(3), &in_add)),
        TrustBundleRefusal::InvalidState(why) if why.contains("--stage switch")
    ));
    let mut not_one = published(&two_roots, 4);
    not_one.rotation_stage = RotationStage::None;
    assert!(matches!(
        refused(decide_add_root(&root(3), &not_one)),
        TrustBundleRefusal::InvalidState(why) if why.contains("exactly one")
    ));

    // Switch: only after add; gated on connected nodes unless forced.
    assert!(matches!(
        refused(decide_switch_root(&state, &[], false)),
        TrustBundleRefusal::InvalidState(_)
    ));
    let nodes = [
        ConnectedNode {
            node_id: "n1".into(),
            trust_version: 3,
        },
        ConnectedNode {
            node_id: "n2".into(),
            trust_version: 4,
        },
    ];
    assert_eq!(
        refused(decide_switch_root(&in_add, &nodes, false)),
        TrustBundleRefusal::NodesBehind {
            behind: 1,
            connected: 2,
            version: 4,
            sample: "n1 at 3".into(),
        }
    );
    let forced = decide_switch_root(&in_add, &nodes, true).unwrap();
    assert_eq!((forced.outcome.behind, forced.outcome.connected), (1, 2));
    assert!(matches!(
        forced.events.as_slice(),
        [TrustBundleEvent::CommandRootSwitched(s)] if s.forced && s.behind == 1
    ));
    let mut no_root = in_add.clone();
    no_root.rotation_root_sha256 = None;
    assert!(matches!(
        decide_switch_root(&no_root, &[], false),
        Err(TrustBundleError::Corrupt(_))
    ));

    // Drop: only after switch, and 24 h after it unless forced.
    assert!(matches!(
        refused(decide_drop_root(&in_add, false, 0)),
        TrustBundleRefusal::InvalidState(_)
    ));
    let mut switched = in_add.clone();
    switched.rotation_stage = RotationStage::Switched;
    switched.active_root_sha256 = root_sha256(&root(2)).to_vec();
    switched.switched_at_us = Some(1_000);
    assert!(matches!(
        refused(decide_drop_root(&switched, false, 1_000 + DROP_AFTER_SWITCH_US - 1)),
        TrustBundleRefusal::InvalidState(why) if why.contains("less than 24 hours")
    ));
    let dropped = decide_drop_root(&switched, false, 1_000 + DROP_AFTER_SWITCH_US).unwrap();
    assert_eq!(dropped.outcome.version, 5);
    match dropped.events.as_slice() {
        [TrustBundleEvent::CommandRootDropped(d), TrustBundleEvent::Published(p)] => {
            assert_eq!(d.root_sha256, root_sha256(&root(1)).to_vec());
            assert_eq!(
                p.content.as_ref().unwrap().command_signing_roots,
                vec![root(2)]
            );
        }
        other => panic!("unexpected events {other:?}"),
    }
    assert!(decide_drop_root(&switched, true, 1_001).is_ok());
}
