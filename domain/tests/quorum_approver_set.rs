//! Approver-set validation and the set-change rule: one test per refusal.

use crate::quorum_support;

use domain::quorum::{
    approver_set_signing_input, check_set_change, ApproverKey, ApproverSet, ApproverSetError,
    ApproverSetOffer, HeldApproverSet, SetChange, SetChangeRefusal, Tier, TrustDomain,
};
use quorum_support::{keys, set_of, td, TestKey};

fn tier(max_scope_size: u32, threshold: u32) -> Tier {
    Tier {
        max_scope_size,
        threshold,
    }
}

fn new_set(
    keys: &[&TestKey],
    threshold: u32,
    tiers: Vec<Tier>,
) -> Result<ApproverSet, ApproverSetError> {
    ApproverSet::new(
        keys.iter().map(|k| k.key.clone()).collect(),
        threshold,
        tiers,
        0,
    )
}

fn offer_signed_by(
    set: &ApproverSet,
    epoch: u64,
    signers: &[&TestKey],
    domain: &TrustDomain,
) -> ApproverSetOffer {
    let message = approver_set_signing_input(epoch, &set.digest(), domain);
    ApproverSetOffer {
        set: set.clone(),
        epoch,
        signatures: signers.iter().map(|k| k.set_signature(&message)).collect(),
    }
}

#[test]
fn quorum_set_refuses_tiers_not_ascending() {
    let k = keys();
    let err = new_set(&[&k[0], &k[1], &k[2]], 2, vec![tier(10, 1), tier(10, 2)]).unwrap_err();
    assert!(
        matches!(err, ApproverSetError::TiersNotAscending { index: 1, .. }),
        "{err}"
    );
    let err = new_set(&[&k[0], &k[1], &k[2]], 2, vec![tier(10, 1), tier(5, 1)]).unwrap_err();
    assert!(
        matches!(err, ApproverSetError::TiersNotAscending { index: 1, .. }),
        "{err}"
    );
}

#[test]
fn quorum_set_refuses_decreasing_tier_thresholds() {
    let k = keys();
    let err = new_set(&[&k[0], &k[1], &k[2]], 3, vec![tier(5, 2), tier(50, 1)]).unwrap_err();
    assert!(
        matches!(
            err,
            ApproverSetError::TierThresholdDecreasing { index: 1, .. }
        ),
        "{err}"
    );
}

#[test]
fn quorum_set_refuses_threshold_above_key_count() {
    let k = keys();
    let err = new_set(&[&k[0], &k[1]], 3, vec![]).unwrap_err();
    assert_eq!(
        err,
        ApproverSetError::ThresholdOutOfRange {
            threshold: 3,
            keys: 2
        }
    );
    let err = new_set(&[&k[0], &k[1]], 0, vec![]).unwrap_err();
    assert_eq!(
        err,
        ApproverSetError::ThresholdOutOfRange {
            threshold: 0,
            keys: 2
        }
    );
}

#[test]
fn quorum_set_refuses_tier_above_threshold_or_out_of_range() {
    let k = keys();
    let err = new_set(&[&k[0], &k[1], &k[2]], 2, vec![tier(5, 3)]).unwrap_err();
    assert!(
        matches!(err, ApproverSetError::TierAboveThreshold { index: 0, .. }),
        "{err}"
    );
    let err = new_set(&[&k[0], &k[1], &k[2]], 2, vec![tier(5, 0)]).unwrap_err();
    assert!(
        matches!(
            err,
            ApproverSetError::TierThresholdOutOfRange { index: 0, .. }
        ),
        "{err}"
    );
    let err = new_set(&[&k[0], &k[1], &k[2]], 2, vec![tier(0, 1)]).unwrap_err();
    assert_eq!(err, ApproverSetError::TierEmpty { index: 0 });
}

#[test]
fn quorum_set_refuses_duplicate_keys_and_bad_keys() {
    let k = keys();
    let err = new_set(&[&k[0], &k[1], &k[0]], 2, vec![]).unwrap_err();
    assert_eq!(
        err,
        ApproverSetError::DuplicateKey {
            kid: k[0].key.kid()
        }
    );
    let mut not_p256 = k[0].spki.clone();
    not_p256[40] ^= 0xff; // a point off the curve
    assert!(matches!(
        ApproverKey::from_spki(&not_p256),
        Err(ApproverSetError::NotP256 { .. })
    ));
    assert!(matches!(
        ApproverKey::from_spki(b"not a key"),
        Err(ApproverSetError::NotP256 { .. })
    ));
    let wrong_kid = k[1].key.kid();
    let err = ApproverKey::from_wire(wrong_kid.as_bytes(), &k[0].spki).unwrap_err();
    assert!(matches!(err, ApproverSetError::KidMismatch { .. }), "{err}");
}

#[test]
fn quorum_set_without_keys_has_no_threshold_or_tiers() {
    assert_eq!(
        ApproverSet::new(vec![], 1, vec![], 0).unwrap_err(),
        ApproverSetError::ThresholdOutOfRange {
            threshold: 1,
            keys: 0
        }
    );
    assert_eq!(
        ApproverSet::new(vec![], 0, vec![tier(5, 1)], 0).unwrap_err(),
        ApproverSetError::TiersWithoutKeys
    );
    assert!(ApproverSet::new(vec![], 0, vec![], 0)
        .expect("no quorum")
        .is_empty());
}

#[test]
fn quorum_set_required_approvals_by_tier() {
    let k = keys();
    let set = set_of(&[&k[0], &k[1], &k[2]], 3, &[(5, 1), (100, 2)], 0);
    assert_eq!(set.required_approvals(1), 1);
    assert_eq!(set.required_approvals(5), 1);
    assert_eq!(set.required_approvals(6), 2);
    assert_eq!(set.required_approvals(100), 2);
    assert_eq!(set.required_approvals(101), 3);
    assert_eq!(ApproverSet::none().required_approvals(10), 0);
}

#[test]
fn quorum_set_serde_round_trips_through_validation() {
    let k = keys();
    let set = set_of(&[&k[0], &k[1]], 2, &[(5, 1)], 1);
    let json = serde_json::to_string(&set).expect("json");
    let back: ApproverSet = serde_json::from_str(&json).expect("valid");
    assert_eq!(back, set);
    let bad = json.replace("\"threshold\":2", "\"threshold\":7");
    assert!(serde_json::from_str::<ApproverSet>(&bad).is_err());
}

fn held(set: &ApproverSet, epoch: u64) -> HeldApproverSet {
    HeldApproverSet {
        set: set.clone(),
        epoch,
    }
}

#[test]
fn quorum_change_taken_for_higher_epoch_signed_by_current_threshold() {
    let k = keys();
    let domain = td("prod.example.org");
    let h = set_of(&[&k[0], &k[1], &k[2]], 2, &[], 0);
    let n = set_of(&[&k[0], &k[1], &k[3]], 2, &[(5, 1)], 0);
    let offer = offer_signed_by(&n, 2, &[&k[0], &k[2]], &domain);
    let change = check_set_change(&offer, &held(&h, 1), None, &domain).expect("taken");
    match &change {
        SetChange::Adopt {
            held: new,
            first,
            signed_by,
        } => {
            assert_eq!(new.epoch, 2);
            assert_eq!(new.set, n);
            assert!(!first);
            assert_eq!(signed_by.len(), 2);
        }
        other => panic!("expected adopt, got {other:?}"),
    }
    assert_eq!(change.apply(&held(&h, 1)), held(&n, 2));
}

#[test]
fn quorum_change_refuses_stale_epoch() {
    let k = keys();
    let domain = td("prod.example.org");
    let h = set_of(&[&k[0], &k[1], &k[2]], 2, &[], 0);
    let n = set_of(&[&k[0], &k[1]], 2, &[], 0);
    let offer = offer_signed_by(&n, 2, &[&k[0], &k[1], &k[2]], &domain);
    let err = check_set_change(&offer, &held(&h, 3), None, &domain).unwrap_err();
    assert_eq!(
        err,
        SetChangeRefusal::StaleEpoch {
            held: 3,
            offered: 2
        }
    );
    assert_eq!(err.reason(), "stale-epoch");
}

#[test]
fn quorum_change_refuses_equal_epoch() {
    let k = keys();
    let domain = td("prod.example.org");
    let h = set_of(&[&k[0], &k[1], &k[2]], 2, &[], 0);
    let n = set_of(&[&k[0], &k[1]], 2, &[], 0);
    let offer = offer_signed_by(&n, 3, &[&k[0], &k[1], &k[2]], &domain);
    let err = check_set_change(&offer, &held(&h, 3), None, &domain).unwrap_err();
    assert_eq!(
        err,
        SetChangeRefusal::StaleEpoch {
            held: 3,
            offered: 3
        }
    );
    // The same set at the same epoch needs nothing.
    let same = ApproverSetOffer {
        set: h.clone(),
        epoch: 3,
        signatures: vec![],
    };
    assert_eq!(
        check_set_change(&same, &held(&h, 3), None, &domain),
        Ok(SetChange::Unchanged)
    );
}

#[test]
fn quorum_change_refuses_too_few_current_keys() {
    let k = keys();
    let domain = td("prod.example.org");
    let h = set_of(&[&k[0], &k[1], &k[2]], 2, &[], 0);
    let n = set_of(&[&k[0], &k[3]], 2, &[], 0);
    // dave (k[3]) is in the new set but not held: only held keys count.
    let offer = offer_signed_by(&n, 2, &[&k[0], &k[3]], &domain);
    let err = check_set_change(&offer, &held(&h, 1), None, &domain).unwrap_err();
    assert_eq!(
        err,
        SetChangeRefusal::Unsigned {
            valid: 1,
            required: 2,
            epoch: 2
        }
    );
    assert_eq!(err.reason(), "approver-set-unsigned");
}

#[test]
fn quorum_change_counts_duplicate_signatures_once() {
    let k = keys();
    let domain = td("prod.example.org");
    let h = set_of(&[&k[0], &k[1], &k[2]], 2, &[], 0);
    let n = set_of(&[&k[0], &k[1]], 1, &[], 0);
    // alice signs twice (two distinct valid signatures): still one approver.
    let offer = offer_signed_by(&n, 2, &[&k[0], &k[0]], &domain);
    assert_ne!(offer.signatures[0].sig, offer.signatures[1].sig);
    let err = check_set_change(&offer, &held(&h, 1), None, &domain).unwrap_err();
    assert_eq!(
        err,
        SetChangeRefusal::Unsigned {
            valid: 1,
            required: 2,
            epoch: 2
        }
    );
}

#[test]
fn quorum_change_refuses_signatures_for_another_trust_domain() {
    let k = keys();
    let h = set_of(&[&k[0], &k[1], &k[2]], 2, &[], 0);
    let n = set_of(&[&k[0], &k[1]], 2, &[], 0);
    let offer = offer_signed_by(&n, 2, &[&k[0], &k[1], &k[2]], &td("staging.example.org"));
    let err = check_set_change(&offer, &held(&h, 1), None, &td("prod.example.org")).unwrap_err();
    assert_eq!(
        err,
        SetChangeRefusal::Unsigned {
            valid: 0,
            required: 2,
            epoch: 2
        }
    );
}

#[test]
fn quorum_change_refuses_replayed_signatures_for_another_epoch() {
    let k = keys();
    let domain = td("prod.example.org");
    let h = set_of(&[&k[0], &k[1], &k[2]], 2, &[], 0);
    let n = set_of(&[&k[0], &k[1]], 2, &[], 0);
    let mut offer = offer_signed_by(&n, 2, &[&k[0], &k[1]], &domain);
    offer.epoch = 4;
    let err = check_set_change(&offer, &held(&h, 1), None, &domain).unwrap_err();
    assert_eq!(
        err,
        SetChangeRefusal::Unsigned {
            valid: 0,
            required: 2,
            epoch: 4
        }
    );
}

#[test]
fn quorum_change_same_set_higher_epoch_needs_its_own_signatures() {
    let k = keys();
    let domain = td("prod.example.org");
    let h = set_of(&[&k[0], &k[1], &k[2]], 2, &[], 0);
    let unsigned = ApproverSetOffer {
        set: h.clone(),
        epoch: 5,
        signatures: vec![],
    };
    let err = check_set_change(&unsigned, &held(&h, 1), None, &domain).unwrap_err();
    assert_eq!(
        err,
        SetChangeRefusal::UnchangedSetUnsigned {
            held: 1,
            offered: 5
        }
    );
    let signed = offer_signed_by(&h, 5, &[&k[1], &k[2]], &domain);
    let change = check_set_change(&signed, &held(&h, 1), None, &domain).expect("taken");
    assert_eq!(change.apply(&held(&h, 1)).epoch, 5);
}

#[test]
fn quorum_change_removal_needs_signatures_and_keeps_epoch() {
    let k = keys();
    let domain = td("prod.example.org");
    let h = set_of(&[&k[0], &k[1]], 2, &[], 0);
    let removal = ApproverSetOffer {
        set: ApproverSet::none(),
        epoch: 2,
        signatures: vec![],
    };
    assert!(matches!(
        check_set_change(&removal, &held(&h, 1), None, &domain),
        Err(SetChangeRefusal::Unsigned { .. })
    ));
    let signed = offer_signed_by(&ApproverSet::none(), 2, &[&k[0], &k[1]], &domain);
    let after = check_set_change(&signed, &held(&h, 1), None, &domain)
        .expect("signed removal")
        .apply(&held(&h, 1));
    assert!(after.set.is_empty());
    assert_eq!(after.epoch, 2);
    assert_eq!(after.reported_digest(), None);
    // Afterwards a first set is taken without signatures, but never at or below epoch 2.
    let again = ApproverSetOffer {
        set: h.clone(),
        epoch: 2,
        signatures: vec![],
    };
    assert_eq!(
        check_set_change(&again, &after, None, &domain),
        Err(SetChangeRefusal::StaleEpoch {
            held: 2,
            offered: 2
        })
    );
}

#[test]
fn quorum_first_set_needs_no_signature() {
    let k = keys();
    let domain = td("prod.example.org");
    let n = set_of(&[&k[0], &k[1]], 2, &[], 0);
    let offer = ApproverSetOffer {
        set: n.clone(),
        epoch: 1,
        signatures: vec![],
    };
    let change =
        check_set_change(&offer, &HeldApproverSet::initial(), None, &domain).expect("first set");
    assert!(matches!(change, SetChange::Adopt { first: true, .. }));
    assert_eq!(change.apply(&HeldApproverSet::initial()), held(&n, 1));
}

#[test]
fn quorum_first_set_must_match_its_pin() {
    let k = keys();
    let domain = td("prod.example.org");
    let pinned = set_of(&[&k[0], &k[1]], 2, &[], 0);
    let attacker = set_of(&[&k[3]], 1, &[], 0);
    let offer = ApproverSetOffer {
        set: attacker.clone(),
        epoch: 1,
        signatures: vec![],
    };
    let err = check_set_change(
        &offer,
        &HeldApproverSet::initial(),
        Some(&pinned.digest()),
        &domain,
    )
    .unwrap_err();
    assert_eq!(
        err,
        SetChangeRefusal::PinMismatch {
            pinned: pinned.digest(),
            offered: attacker.digest()
        }
    );
    assert_eq!(err.reason(), "pin-mismatch");
    let good = ApproverSetOffer {
        set: pinned.clone(),
        epoch: 1,
        signatures: vec![],
    };
    assert!(check_set_change(
        &good,
        &HeldApproverSet::initial(),
        Some(&pinned.digest()),
        &domain
    )
    .is_ok());
}
