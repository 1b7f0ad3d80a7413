//! The approver set a daemon holds, under the one epoch rule: a signed change at a higher epoch
//! is taken; an unsigned one keeps the held set while the bundle's version and roots apply; a
//! pinned daemon takes only its pinned first set and refuses destructive commands until then.

use crate::command_support::*;

use bcd::trust::approver_set::{load_held, reported, SetOutcome, APPROVER_SET_FILE};
use bcd::trust::bundle::{apply_welcome_trust, TrustUpdate};
use domain::pki::statement::{sign, TrustBundleStatement};
use domain::pki::{KeyRole, PrivateKey};
use domain::quorum::{ApproverSet, SetChangeRefusal, SetSignature};
use prost::Message as _;
use std::os::unix::fs::PermissionsExt;

/// A Welcome carrying a bundle at `version` with `content`, signed by `key`.
fn welcome(key: &PrivateKey, version: u64, content: Vec<u8>) -> proto::Welcome {
    let bundle = proto::TrustBundle {
        version,
        trust_domain: TD.into(),
        content,
    }
    .encode_to_vec();
    let signature = sign(
        key,
        &TrustBundleStatement {
            trust_domain: TD,
            bundle: &bundle,
        },
    )
    .unwrap();
    proto::Welcome {
        server_time_ms: now_ms(),
        trust_version: version,
        signed_trust_bundle: bundle,
        trust_bundle_signature: signature.as_bytes().to_vec(),
    }
}

/// Applies a Welcome offering `set` at `epoch` (bundle `version`) and settles the set.
fn offer(
    m: &Machine,
    join_key: &PrivateKey,
    version: u64,
    set: &ApproverSet,
    epoch: u64,
    signatures: &[SetSignature],
) -> SetOutcome {
    let w = welcome(
        join_key,
        version,
        content(&m.roots(), set, epoch, signatures),
    );
    assert!(matches!(
        apply_welcome_trust(&m.data, join_key.public_key(), &w).unwrap(),
        TrustUpdate::Stored { .. }
    ));
    m.settle()
}

fn three() -> Vec<Approver> {
    (0..3).map(|_| Approver::generate()).collect()
}

#[test]
fn a_keyless_daemon_takes_the_first_set_and_reports_it() {
    let a = three();
    let set = set_of(&[&a[0], &a[1], &a[2]], 2, 0);
    let m = Machine::new(&set, 1);
    let held = load_held(&m.data).unwrap();
    assert_eq!(held.set, set);
    assert_eq!(held.epoch, 1);
    assert_eq!(reported(&m.data), (1, set.digest().as_bytes().to_vec()));
    let mode = std::fs::metadata(m.data.file(APPROVER_SET_FILE))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
    // Without keys the report is empty.
    let keyless = Machine::new(&ApproverSet::none(), 0);
    assert_eq!(reported(&keyless.data), (0, Vec::new()));
}

#[test]
fn a_change_signed_by_the_held_threshold_at_epoch_2_is_taken() {
    let a = three();
    let held = set_of(&[&a[0], &a[1], &a[2]], 2, 0);
    let m = Machine::new(&held, 1);
    let d = Approver::generate();
    let next = set_of(&[&a[1], &a[2], &d], 2, 0);
    let sigs = vec![next_sig(&a[0], &next, 2), next_sig(&a[1], &next, 2)];
    let join_key = PrivateKey::generate(KeyRole::JoinSigning).unwrap();
    let outcome = offer(&m, &join_key, 2, &next, 2, &sigs);
    assert!(
        matches!(&outcome, SetOutcome::Adopted { first: false, held } if held.epoch == 2 && held.set == next),
        "{outcome:?}"
    );
    assert_eq!(reported(&m.data), (2, next.digest().as_bytes().to_vec()));
}

fn next_sig(a: &Approver, set: &ApproverSet, epoch: u64) -> SetSignature {
    a.sign_set(set, epoch, TD)
}

#[test]
fn an_unsigned_change_keeps_the_held_set_while_the_version_and_roots_apply() {
    let a = three();
    let held = set_of(&[&a[0], &a[1], &a[2]], 2, 0);
    let m = Machine::new(&held, 1);
    let mallory = Approver::generate();
    let next = set_of(&[&mallory], 1, 5);
    // One held signature (threshold 2) and one by a key the daemon does not hold.
    let sigs = vec![next_sig(&a[0], &next, 2), next_sig(&mallory, &next, 2)];
    let join_key = PrivateKey::generate(KeyRole::JoinSigning).unwrap();
    let outcome = offer(&m, &join_key, 7, &next, 2, &sigs);
    match &outcome {
        SetOutcome::Refused {
            held: kept,
            refusal,
        } => {
            assert_eq!(kept.set, held);
            assert_eq!(kept.epoch, 1);
            assert_eq!(
                refusal,
                &SetChangeRefusal::Unsigned {
                    valid: 1,
                    required: 2,
                    epoch: 2
                }
            );
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(
        m.stored().trust_version,
        7,
        "the rest of the bundle applies"
    );
    assert_eq!(load_held(&m.data).unwrap().set, held);
    // The held quorum still governs: an unbatched reboot stays refused (mallory's set would
    // have allowed 5 an hour).
    let c = signed(
        &m.worker,
        &body(&new_id(), NODE, "node.reboot", reboot(), None),
        TD,
    );
    let result = m.runner().handle(&c, now_ms());
    assert_eq!(
        result.reject_reason,
        proto::CommandRejectReason::UnbatchedLimit as i32
    );
    assert!(m.ran().is_empty());
}

#[test]
fn a_lower_or_equal_epoch_is_stale() {
    let a = three();
    let held = set_of(&[&a[0], &a[1], &a[2]], 2, 0);
    let m = Machine::new(&held, 3);
    let next = set_of(&[&a[0], &a[1]], 2, 0);
    let sigs = vec![next_sig(&a[0], &next, 3), next_sig(&a[1], &next, 3)];
    let join_key = PrivateKey::generate(KeyRole::JoinSigning).unwrap();
    let outcome = offer(&m, &join_key, 2, &next, 3, &sigs);
    assert!(
        matches!(
            &outcome,
            SetOutcome::Refused {
                refusal: SetChangeRefusal::StaleEpoch {
                    held: 3,
                    offered: 3
                },
                ..
            }
        ),
        "{outcome:?}"
    );
}

#[test]
fn a_pinned_daemon_refuses_another_set_and_destructive_commands_until_its_set_arrives() {
    let a = three();
    let pinned = set_of(&[&a[0], &a[1]], 1, 1);
    let other = set_of(&[&a[2]], 1, 1);
    // A keyless daemon pinned to `pinned`, whose first bundle offers `other`.
    let mut m = Machine::new(&ApproverSet::none(), 0);
    m.pin = Some(pinned.digest());
    let join_key = PrivateKey::generate(KeyRole::JoinSigning).unwrap();
    let outcome = offer(&m, &join_key, 2, &other, 1, &[]);
    assert!(
        matches!(&outcome, SetOutcome::Refused { refusal: SetChangeRefusal::PinMismatch { .. }, held } if held.set.is_empty()),
        "{outcome:?}"
    );
    assert_eq!(reported(&m.data), (0, Vec::new()));
    let c = signed(
        &m.worker,
        &body(&new_id(), NODE, "node.reboot", reboot(), None),
        TD,
    );
    let result = m.runner().handle(&c, now_ms());
    assert_eq!(
        result.reject_reason,
        proto::CommandRejectReason::BatchUnapproved as i32
    );
    assert!(
        result.detail.starts_with("awaiting-pinned-set: "),
        "{}",
        result.detail
    );
    assert!(m.ran().is_empty());
    // The pinned set arrives: taken as the first set, and the unbatched allowance (1) applies.
    let outcome = offer(&m, &join_key, 3, &pinned, 1, &[]);
    assert!(
        matches!(&outcome, SetOutcome::Adopted { first: true, .. }),
        "{outcome:?}"
    );
    let c = signed(
        &m.worker,
        &body(&new_id(), NODE, "node.reboot", reboot(), None),
        TD,
    );
    let result = m.runner().handle(&c, now_ms());
    assert_eq!(
        result.outcome,
        proto::CommandOutcome::Succeeded as i32,
        "{result:?}"
    );
    assert_eq!(m.ran(), vec![c.command_id.clone()]);
}

#[test]
fn config_reads_the_first_set_pin_and_refuses_a_malformed_one() {
    use bcd::config::{Config, ConfigError};
    let path = std::path::Path::new("/etc/bcd/config.toml");
    let set = set_of(&[&Approver::generate()], 1, 0);
    let text = format!("approver_set_sha256 = \"{}\"\n", set.digest().to_hex());
    let config = Config::parse(path, &text).unwrap();
    assert_eq!(config.approver_set_pin, Some(set.digest()));
    assert_eq!(Config::parse(path, "").unwrap().approver_set_pin, None);
    assert!(matches!(
        Config::parse(path, "approver_set_sha256 = \"abc\"\n"),
        Err(ConfigError::MalformedSetPin { .. })
    ));
}
