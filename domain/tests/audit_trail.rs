//! The offline trail verifier and its tamper matrix (issue 5, "Must show").
//!
//! A tenant log of 40 events is sequenced with the appender, sealed at sizes 10, 25 and 40 with
//! chained, signed checkpoints, then tampered with one way at a time.

use domain::audit::checkpoint::{audit_origin, Checkpoint};
use domain::audit::key::AuditSigner;
use domain::audit::leaf::AuditLeaf;
use domain::audit::merkle::{self, Hash};
use domain::audit::trail::{
    note_sha256, verify_trail, Progress, TrailCheckpoint, TrailFault, TrailLeaf,
};
use domain::audit::tree::{self, Frontier, MemoryStore};
use events::RecordedEvent;
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, ECDSA_P256_SHA256_ASN1_SIGNING};
use sha2::{Digest, Sha256};

const TENANT: &str = "tenant-1";
const N: usize = 40;
const SEALS: [u64; 3] = [10, 25, 40];

fn signer() -> AuditSigner {
    let rng = SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng).unwrap();
    AuditSigner::from_pkcs8(pkcs8.as_ref(), &rng).unwrap()
}

fn origin() -> String {
    audit_origin("example.org", TENANT).unwrap()
}

fn event(i: usize) -> RecordedEvent {
    let payload = format!("payload {i}").into_bytes();
    RecordedEvent {
        // Positions interleave with other tenants' events.
        position: 100 + 3 * i as i64,
        stream_id: format!("node/n{}", i % 4),
        stream_version: 1 + (i / 4) as i64,
        event_id: [i as u8; 16],
        event_type: "node.joined".into(),
        schema_version: 1,
        tenant_id: TENANT.into(),
        occurred_at_us: 1_700_000_000_000_000 + i as i64,
        payload_sha256: Sha256::digest(&payload).into(),
        payload,
        tx_id: None,
        // Every third event has an actor (a version 2 leaf): a trail mixes both versions.
        actor: i.is_multiple_of(3).then(|| {
            events::Actor::new(format!("spiffe://example.org/operator/op{i}"), "operator")
                .expect("actor")
        }),
    }
}

/// The log as the server built it.
struct Log {
    events: Vec<RecordedEvent>,
    /// Leaf hashes the sequencer recorded, by index.
    recorded: Vec<Hash>,
    store: MemoryStore,
    signer: AuditSigner,
    checkpoints: Vec<TrailCheckpoint>,
}

fn sequence(events: &[RecordedEvent]) -> Vec<Hash> {
    events
        .iter()
        .enumerate()
        .map(|(i, e)| AuditLeaf::from_event(e, i as u64).leaf_hash().unwrap())
        .collect()
}

fn build() -> Log {
    let events: Vec<RecordedEvent> = (0..N).map(event).collect();
    let recorded = sequence(&events);
    let signer = signer();
    let rng = SystemRandom::new();
    let mut store = MemoryStore::new();
    let mut frontier = Frontier::new();
    let mut out = Vec::new();
    let mut checkpoints = Vec::new();
    let mut previous: Option<(u64, String)> = None;
    for &size in &SEALS {
        out.clear();
        frontier
            .append(&recorded[frontier.size() as usize..size as usize], &mut out)
            .unwrap();
        for n in &out {
            store.insert(*n).unwrap();
        }
        let old = previous.as_ref().map_or(0, |p| p.0);
        let proof = tree::prove_consistency(&store, old, size).unwrap();
        let note = Checkpoint {
            origin: origin(),
            size,
            root: frontier.root(),
        }
        .sign(&signer, &rng)
        .unwrap();
        checkpoints.push(TrailCheckpoint {
            signed_note: note.clone(),
            previous_note_sha256: previous.as_ref().map(|p| note_sha256(&p.1)),
            consistency_proof: Some(proof),
        });
        previous = Some((size, note));
    }
    Log {
        events,
        recorded,
        store,
        signer,
        checkpoints,
    }
}

/// What an auditor recomputes from an export: each event's leaf at the index it claims.
fn leaves(events: &[(u64, RecordedEvent)], recorded: Option<&[Hash]>) -> Vec<TrailLeaf> {
    events
        .iter()
        .map(|(index, e)| TrailLeaf {
            index: *index,
            position: e.position,
            leaf_hash: AuditLeaf::from_event_recomputed(e, *index)
                .leaf_hash()
                .unwrap(),
            recorded_leaf_hash: recorded.and_then(|r| r.get(*index as usize).copied()),
            sealed: None,
        })
        .collect()
}

fn indexed(events: &[RecordedEvent]) -> Vec<(u64, RecordedEvent)> {
    events
        .iter()
        .cloned()
        .enumerate()
        .map(|(i, e)| (i as u64, e))
        .collect()
}

fn verify(
    log: &Log,
    leaves: Vec<TrailLeaf>,
    checkpoints: &[TrailCheckpoint],
) -> Result<domain::audit::trail::TrailSummary, TrailFault> {
    verify_trail(
        &origin(),
        log.signer.public_key(),
        leaves,
        checkpoints,
        &mut |_| {},
    )
}

/// Signs a list of tree heads as a chained trail (no consistency proofs), so only the heads are wrong.
fn resign(heads: &[(u64, Hash)], signer: &AuditSigner) -> Vec<TrailCheckpoint> {
    let rng = SystemRandom::new();
    let mut out: Vec<TrailCheckpoint> = Vec::new();
    for &(size, root) in heads {
        let note = Checkpoint {
            origin: origin(),
            size,
            root,
        }
        .sign(signer, &rng)
        .unwrap();
        out.push(TrailCheckpoint {
            previous_note_sha256: out.last().map(|p| note_sha256(&p.signed_note)),
            signed_note: note,
            consistency_proof: None,
        });
    }
    out
}

#[test]
fn an_untouched_trail_verifies_with_progress() {
    let log = build();
    let mut seen: Vec<Progress> = Vec::new();
    let mut events = indexed(&log.events);
    // Two events sequenced after the last seal: checked, but not yet signed.
    events.push((40, event(40)));
    events.push((41, event(41)));
    let summary = verify_trail(
        &origin(),
        log.signer.public_key(),
        leaves(&events, None),
        &log.checkpoints,
        &mut |p| seen.push(p),
    )
    .unwrap();
    assert_eq!(summary.leaves, 42);
    assert_eq!(summary.checkpoints, 3);
    assert_eq!(summary.signed_size, 40);
    assert_eq!(summary.signed_root, merkle::root(&log.recorded));
    assert_eq!(summary.unsealed_leaves, 2);
    assert_eq!(
        summary.last_note_sha256,
        Some(note_sha256(&log.checkpoints[2].signed_note))
    );
    let last = seen.last().unwrap();
    assert_eq!(last.leaves_checked, 42);
    assert_eq!(last.leaves_total, Some(42));
    assert_eq!(last.checkpoints_checked, 3);
    assert!(seen.len() >= 4);
    // With the recorded leaf hashes too.
    verify(
        &log,
        leaves(&indexed(&log.events), Some(&log.recorded)),
        &log.checkpoints,
    )
    .unwrap();
    // An inclusion proof from the store checks against the last checkpoint's root.
    let proof = tree::prove_inclusion(&log.store, 17, 40).unwrap();
    merkle::verify_inclusion(&log.recorded[17], 17, 40, &proof, &summary.signed_root).unwrap();
}

#[test]
fn a_changed_payload_is_named() {
    let log = build();
    let mut events = indexed(&log.events);
    events[12].1.payload[0] ^= 1;
    assert_eq!(
        verify(&log, leaves(&events, Some(&log.recorded)), &log.checkpoints),
        Err(TrailFault::TamperedLeaf {
            index: 12,
            position: log.events[12].position
        })
    );
    // Without the recorded leaf hashes, the checkpoint covering it narrows it down.
    let fault = verify(&log, leaves(&events, None), &log.checkpoints).unwrap_err();
    assert_eq!(
        fault,
        TrailFault::RootMismatch {
            checkpoint: 1,
            size: 25,
            from_index: 10,
            from_position: Some(log.events[10].position)
        }
    );
    assert_eq!(fault.index(), 10);
    // A changed field other than the payload (the event type).
    let mut events = indexed(&log.events);
    events[3].1.event_type = "node.revoked".into();
    assert_eq!(
        verify(&log, leaves(&events, Some(&log.recorded)), &log.checkpoints)
            .unwrap_err()
            .index(),
        3
    );
}

#[test]
fn a_deleted_event_is_named() {
    let log = build();
    let mut events = indexed(&log.events);
    events.remove(12);
    assert_eq!(
        verify(&log, leaves(&events, Some(&log.recorded)), &log.checkpoints),
        Err(TrailFault::MissingLeaf {
            index: 12,
            after_position: Some(log.events[11].position)
        })
    );
    // Deleted and the rest renumbered to hide the gap: the shifted leaves no longer match.
    let renumbered = indexed(
        &log.events
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != 12)
            .map(|(_, e)| e.clone())
            .collect::<Vec<_>>(),
    );
    assert_eq!(
        verify(
            &log,
            leaves(&renumbered, Some(&log.recorded)),
            &log.checkpoints
        ),
        Err(TrailFault::TamperedLeaf {
            index: 12,
            position: log.events[13].position
        })
    );
    assert!(matches!(
        verify(&log, leaves(&renumbered, None), &log.checkpoints),
        Err(TrailFault::RootMismatch { checkpoint: 1, .. })
    ));
}

#[test]
fn an_inserted_event_is_named() {
    let log = build();
    let mut intruder = event(99);
    intruder.position = log.events[12].position + 1;
    // Inserted under an index already taken.
    let mut events = indexed(&log.events);
    events.insert(13, (12, intruder.clone()));
    assert_eq!(
        verify(&log, leaves(&events, Some(&log.recorded)), &log.checkpoints),
        Err(TrailFault::ExtraLeaf {
            index: 12,
            position: intruder.position,
            expected: 13
        })
    );
    // Inserted and everything after renumbered.
    let mut shifted: Vec<RecordedEvent> = log.events.clone();
    shifted.insert(12, intruder.clone());
    assert_eq!(
        verify(
            &log,
            leaves(&indexed(&shifted), Some(&log.recorded)),
            &log.checkpoints
        ),
        Err(TrailFault::TamperedLeaf {
            index: 12,
            position: intruder.position
        })
    );
    assert!(matches!(
        verify(&log, leaves(&indexed(&shifted), None), &log.checkpoints),
        Err(TrailFault::RootMismatch { checkpoint: 1, .. })
    ));
}

#[test]
fn swapped_events_are_named() {
    let log = build();
    let mut swapped = log.events.clone();
    swapped.swap(20, 21);
    assert_eq!(
        verify(
            &log,
            leaves(&indexed(&swapped), Some(&log.recorded)),
            &log.checkpoints
        ),
        Err(TrailFault::TamperedLeaf {
            index: 20,
            position: log.events[21].position
        })
    );
    assert!(matches!(
        verify(&log, leaves(&indexed(&swapped), None), &log.checkpoints),
        Err(TrailFault::RootMismatch {
            checkpoint: 1,
            from_index: 10,
            ..
        })
    ));
    // Out of index order in the export.
    let mut events = indexed(&log.events);
    events.swap(20, 21);
    assert_eq!(
        verify(&log, leaves(&events, Some(&log.recorded)), &log.checkpoints),
        Err(TrailFault::MissingLeaf {
            index: 20,
            after_position: Some(log.events[19].position)
        })
    );
}

#[test]
fn a_truncated_tail_is_named() {
    let log = build();
    let mut events = indexed(&log.events);
    events.truncate(35);
    assert_eq!(
        verify(&log, leaves(&events, Some(&log.recorded)), &log.checkpoints),
        Err(TrailFault::MissingLeaf {
            index: 35,
            after_position: Some(log.events[34].position)
        })
    );
}

#[test]
fn an_altered_checkpoint_signature_is_named() {
    let log = build();
    let mut cps = log.checkpoints.clone();
    let note = &cps[1].signed_note;
    let (text, line) = note.rsplit_once("\n\n").unwrap();
    let (prefix, b64) = line.trim_end().rsplit_once(' ').unwrap();
    use base64::Engine as _;
    let b64e = base64::engine::general_purpose::STANDARD;
    let mut raw = b64e.decode(b64).unwrap();
    let at = raw.len() - 3;
    raw[at] ^= 0x40;
    cps[1].signed_note = format!("{text}\n\n{prefix} {}\n", b64e.encode(raw));
    let fault = verify(
        &log,
        leaves(&indexed(&log.events), Some(&log.recorded)),
        &cps,
    )
    .unwrap_err();
    assert!(
        matches!(
            fault,
            TrailFault::BadSignature {
                checkpoint: 1,
                from_index: 10,
                ..
            }
        ),
        "{fault:?}"
    );
}

#[test]
fn a_checkpoint_signed_by_another_key_is_named() {
    let log = build();
    let other = signer();
    let rng = SystemRandom::new();
    let mut cps = log.checkpoints.clone();
    let cp = Checkpoint {
        origin: origin(),
        size: 25,
        root: merkle::root(&log.recorded[..25]),
    };
    cps[1].signed_note = cp.sign(&other, &rng).unwrap();
    cps[2].previous_note_sha256 = Some(note_sha256(&cps[1].signed_note));
    let fault = verify(
        &log,
        leaves(&indexed(&log.events), Some(&log.recorded)),
        &cps,
    )
    .unwrap_err();
    assert!(
        matches!(fault, TrailFault::WrongKey { checkpoint: 1, .. }),
        "{fault:?}"
    );
    assert_eq!(fault.checkpoint(), Some(1));
}

#[test]
fn a_fork_is_named() {
    let log = build();
    let r = |n: usize| merkle::root(&log.recorded[..n]);
    let mut other = log.recorded.clone();
    other[24] = merkle::leaf_hash(b"other history");
    let forked = merkle::root(&other[..25]);
    let cps = resign(&[(10, r(10)), (25, r(25)), (25, forked)], &log.signer);
    assert_eq!(
        verify(
            &log,
            leaves(&indexed(&log.events), Some(&log.recorded)),
            &cps
        ),
        Err(TrailFault::Fork {
            checkpoint: 2,
            size: 25,
            from_index: 25
        })
    );
}

#[test]
fn a_checkpoint_that_does_not_extend_the_previous_is_named() {
    let log = build();
    let r = |n: usize| merkle::root(&log.recorded[..n]);
    // A bigger tree over a rewritten history, with that tree's own consistency proof.
    let mut rewritten = log.recorded.clone();
    rewritten[3] = merkle::leaf_hash(b"rewritten");
    let mut cps = resign(
        &[(10, r(10)), (25, merkle::root(&rewritten[..25]))],
        &log.signer,
    );
    cps[1].consistency_proof = Some(merkle::consistency_proof(&rewritten[..25], 10).unwrap());
    let fault = verify(
        &log,
        leaves(&indexed(&log.events), Some(&log.recorded)),
        &cps,
    )
    .unwrap_err();
    assert!(
        matches!(
            fault,
            TrailFault::NotExtension {
                checkpoint: 1,
                previous_size: 10,
                size: 25,
                source: Some(_)
            }
        ),
        "{fault:?}"
    );
    assert_eq!(fault.index(), 10);
    // Without a recorded proof, the root recomputed from the events tells the same story.
    cps[1].consistency_proof = None;
    assert!(matches!(
        verify(
            &log,
            leaves(&indexed(&log.events), Some(&log.recorded)),
            &cps
        ),
        Err(TrailFault::RootMismatch { checkpoint: 1, .. })
    ));
    // A smaller tree after a larger one.
    let cps = resign(&[(25, r(25)), (10, r(10))], &log.signer);
    assert_eq!(
        verify(
            &log,
            leaves(&indexed(&log.events), Some(&log.recorded)),
            &cps
        ),
        Err(TrailFault::NotExtension {
            checkpoint: 1,
            previous_size: 25,
            size: 10,
            source: None
        })
    );
}

#[test]
fn a_broken_hash_chain_is_named() {
    let log = build();
    let events = leaves(&indexed(&log.events), Some(&log.recorded));
    // A link to the wrong note.
    let mut cps = log.checkpoints.clone();
    cps[2].previous_note_sha256 = Some(note_sha256(&cps[0].signed_note));
    assert!(matches!(
        verify(&log, events.clone(), &cps),
        Err(TrailFault::BrokenChain {
            checkpoint: 2,
            from_index: 25,
            ..
        })
    ));
    // A checkpoint removed from the middle.
    let mut cps = log.checkpoints.clone();
    cps.remove(1);
    assert!(matches!(
        verify(&log, events.clone(), &cps),
        Err(TrailFault::BrokenChain { checkpoint: 1, .. })
    ));
    // A first checkpoint that claims a predecessor.
    let mut cps = log.checkpoints.clone();
    cps[0].previous_note_sha256 = Some([0; 32]);
    assert!(matches!(
        verify(&log, events, &cps),
        Err(TrailFault::BrokenChain { checkpoint: 0, .. })
    ));
}

#[test]
fn a_checkpoint_of_another_tenant_is_refused() {
    let log = build();
    let rng = SystemRandom::new();
    let mut cps = log.checkpoints.clone();
    cps[0].signed_note = Checkpoint {
        origin: audit_origin("example.org", "tenant-2").unwrap(),
        size: 10,
        root: merkle::root(&log.recorded[..10]),
    }
    .sign(&log.signer, &rng)
    .unwrap();
    let fault = verify(
        &log,
        leaves(&indexed(&log.events), Some(&log.recorded)),
        &cps,
    )
    .unwrap_err();
    // Signed under another origin's name: no signature for this tenant's log.
    assert!(
        matches!(fault, TrailFault::WrongKey { checkpoint: 0, .. }),
        "{fault:?}"
    );
}

// --- Coverage (issue 17): what the checkpoints do not cover is not "ok". ---

fn summary_with_tail(log: &Log) -> domain::audit::trail::TrailSummary {
    let mut events = indexed(&log.events);
    events.push((40, event(40)));
    events.push((41, event(41)));
    verify(log, leaves(&events, None), &log.checkpoints).unwrap()
}

#[test]
fn coverage_refuses_a_tail_a_truncation_and_no_checkpoint_in_that_order() {
    use domain::audit::{coverage, CoverageFault, Expectations, TreeHead};
    let log = build();
    let s = summary_with_tail(&log);
    assert_eq!(
        coverage(&s, &Expectations::default()),
        Err(CoverageFault::Unsealed {
            count: 2,
            from_index: 40,
            from_position: Some(event(40).position),
            signed_size: 40,
        })
    );
    let accept = Expectations {
        allow_unsealed: true,
        ..Default::default()
    };
    assert_eq!(coverage(&s, &accept), Ok(()));
    let known = TreeHead {
        size: 41,
        root: [0; 32],
    };
    let expect = Expectations {
        known: Some(known),
        allow_unsealed: true,
        ..Default::default()
    };
    assert!(matches!(
        coverage(&s, &expect),
        Err(CoverageFault::Truncated {
            signed_size: 40,
            expected: 41,
            against: domain::audit::coverage::FROM_KNOWN,
        })
    ));
    let expect = Expectations {
        at_least_size: Some(41),
        ..Default::default()
    };
    assert!(matches!(
        coverage(&s, &expect),
        Err(CoverageFault::Truncated { expected: 41, .. })
    ));
    // No checkpoint at all: the leaves verify (nothing to compare them with), none is covered.
    let bare = verify(&log, leaves(&indexed(&log.events), None), &[]).unwrap();
    assert_eq!(
        coverage(&bare, &accept),
        Err(CoverageFault::NoCheckpoint { leaves: 40 })
    );
    // The whole sealed trail: covered.
    let full = verify(
        &log,
        leaves(&indexed(&log.events), Some(&log.recorded)),
        &log.checkpoints,
    )
    .unwrap();
    assert_eq!(coverage(&full, &Expectations::default()), Ok(()));
}

#[test]
fn a_sealed_leaf_naming_a_checkpoint_the_trail_lacks_is_named() {
    use domain::audit::SealedLeaf;
    let log = build();
    let mut ls = leaves(&indexed(&log.events), None);
    // Leaf 12 claims to be the event that recorded checkpoint 1: it must be checkpoint 1's note.
    ls[12].sealed = Some(SealedLeaf {
        seq: 1,
        note_sha256: note_sha256(&log.checkpoints[0].signed_note),
    });
    assert!(verify(&log, ls.clone(), &log.checkpoints).is_ok());
    ls[12].sealed = Some(SealedLeaf {
        seq: 1,
        note_sha256: [9; 32],
    });
    assert!(matches!(
        verify(&log, ls.clone(), &log.checkpoints),
        Err(TrailFault::CheckpointMismatch {
            index: 12,
            seq: 1,
            ..
        })
    ));
    // Checkpoints removed from the trail: the leaf still shows one.
    ls[12].sealed = Some(SealedLeaf {
        seq: 2,
        note_sha256: note_sha256(&log.checkpoints[1].signed_note),
    });
    assert!(matches!(
        verify(&log, ls, &log.checkpoints[..1]),
        Err(TrailFault::CheckpointRemoved {
            index: 12,
            seq: 2,
            carried: 1,
            ..
        })
    ));
}

#[test]
fn a_trail_that_does_not_extend_a_known_checkpoint_is_named() {
    use domain::audit::{verify_trail_against, TreeHead};
    let log = build();
    let run = |known: TreeHead| {
        verify_trail_against(
            &origin(),
            log.signer.public_key(),
            leaves(&indexed(&log.events), None),
            &log.checkpoints,
            Some(known),
            &mut |_| {},
        )
    };
    let real = TreeHead {
        size: 17,
        root: merkle::root(&log.recorded[..17]),
    };
    assert!(run(real).is_ok());
    assert_eq!(
        run(TreeHead {
            size: 17,
            root: [7; 32]
        }),
        Err(TrailFault::InconsistentWithKnown { size: 17 })
    );
}
