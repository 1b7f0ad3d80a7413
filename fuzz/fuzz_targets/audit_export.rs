//! The audit export reader: a `bc-audit-export` JSON-lines file (docs/AUDIT.md: a header, its
//! checkpoint lines, then one event line per leaf) read into the trail and checked by the one
//! trail verifier (`domain::audit::verify_trail`) against the fuzz audit key, as `bcctl audit
//! verify --bundle` does.
//!
//! The line shapes mirror `cli/src/verbs/audit/format.rs` (private to the `bcctl` binary; see
//! fuzz/README.md). The invariant is soundness: when the verifier accepts, the signed size and
//! root it reports are the RFC 9162 root of exactly the first leaves (computed by the plain
//! recursive reference), every checkpoint it passed is signed by the key over that prefix, and
//! the leaf counts add up.
#![no_main]

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use domain::audit::{
    node_hash, sealed_leaf, verify_trail, AuditLeaf, Checkpoint, LeafActor, Hash, TrailCheckpoint, TrailLeaf,
    EMPTY_ROOT,
};
use fuzz_support::{audit_origin, audit_signer};
use libfuzzer_sys::fuzz_target;
use serde::Deserialize;
use sha2::{Digest, Sha256};

/// At most this many checkpoint or event lines are read (keeps one input fast).
const MAX_LINES: usize = 4096;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct Header {
    #[serde(rename = "type")]
    kind: String,
    format: String,
    version: u32,
    tenant: String,
    origin: Option<String>,
    verifier_key: Option<String>,
    leaf_version: u8,
    checkpoints: u64,
    events: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct CheckpointLine {
    #[serde(rename = "type")]
    kind: String,
    seq: u64,
    tree_size: u64,
    root_hash: String,
    signed_note: String,
    previous_note_sha256: Option<String>,
    consistency_proof: Vec<String>,
    position: i64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EventLine {
    #[serde(rename = "type")]
    kind: String,
    index: u64,
    position: i64,
    tenant_id: String,
    stream_id: String,
    stream_version: i64,
    event_type: String,
    schema_version: u32,
    occurred_at_us: i64,
    event_id: String,
    payload: String,
    leaf_hash: String,
    #[serde(default)]
    actor_id: Option<String>,
    #[serde(default)]
    actor_role: Option<String>,
}

/// RFC 9162 §2.1.1 by its definition, recursively: the reference the verifier is checked by.
fn root(leaves: &[Hash]) -> Hash {
    match leaves.len() {
        0 => EMPTY_ROOT,
        1 => leaves[0],
        n => {
            let k = 1usize << (usize::BITS - 1 - (n - 1).leading_zeros());
            node_hash(&root(&leaves[..k]), &root(&leaves[k..]))
        }
    }
}

fn hex32(s: &str) -> Option<Hash> {
    let mut out = [0u8; 32];
    hex::decode_to_slice(s, &mut out).ok()?;
    Some(out)
}

fn leaf_of(ev: &EventLine) -> Option<TrailLeaf> {
    let payload = B64.decode(ev.payload.as_bytes()).ok()?;
    let mut event_id = [0u8; 16];
    hex::decode_to_slice(&ev.event_id, &mut event_id).ok()?;
    let actor = match (&ev.actor_id, &ev.actor_role) {
        (None, None) => None,
        (Some(id), Some(role)) => Some(LeafActor { id, role }),
        _ => return None,
    };
    let leaf = AuditLeaf {
        tenant_id: &ev.tenant_id,
        index: ev.index,
        position: ev.position,
        stream_id: &ev.stream_id,
        stream_version: ev.stream_version,
        event_type: &ev.event_type,
        schema_version: ev.schema_version,
        occurred_at_us: ev.occurred_at_us,
        event_id,
        payload_sha256: Sha256::digest(&payload).into(),
        actor,
    };
    let leaf_hash = leaf.leaf_hash().ok()?;
    // The checkpoint an `audit.checkpoint.sealed` leaf of the tenant recorded, read from the
    // event as the cli's export reader does (an undecodable one is a refused export).
    let event = events::RecordedEvent {
        position: ev.position,
        stream_id: ev.stream_id.clone(),
        stream_version: ev.stream_version,
        event_id,
        event_type: ev.event_type.clone(),
        schema_version: ev.schema_version,
        tenant_id: ev.tenant_id.clone(),
        occurred_at_us: ev.occurred_at_us,
        payload,
        payload_sha256: [0; 32],
        tx_id: None,
        actor: match (&ev.actor_id, &ev.actor_role) {
            (Some(id), Some(role)) => events::Actor::new(id.as_str(), role.as_str()).ok(),
            _ => None,
        },
    };
    let sealed = sealed_leaf(&event, &ev.tenant_id).ok()?;
    Some(TrailLeaf {
        index: ev.index,
        position: ev.position,
        leaf_hash,
        recorded_leaf_hash: Some(hex32(&ev.leaf_hash)?),
        sealed,
    })
}

fn checkpoint_of(line: &CheckpointLine) -> Option<TrailCheckpoint> {
    let previous = match &line.previous_note_sha256 {
        None => None,
        Some(h) => Some(hex32(h)?),
    };
    let proof = line
        .consistency_proof
        .iter()
        .map(|h| hex32(h))
        .collect::<Option<Vec<_>>>()?;
    Some(TrailCheckpoint {
        signed_note: line.signed_note.clone(),
        previous_note_sha256: previous,
        consistency_proof: Some(proof),
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut lines = text.lines();
    let Some(Ok(header)) = lines.next().map(serde_json::from_str::<Header>) else {
        return;
    };
    if header.kind != "header" || header.format != "bc-audit-export" || header.version != 1 {
        return;
    }
    let origin = audit_origin();
    if header.tenant != fuzz_support::TENANT || header.checkpoints > MAX_LINES as u64 {
        return;
    }
    let mut checkpoints = Vec::new();
    for _ in 0..header.checkpoints {
        let Some(Ok(line)) = lines.next().map(serde_json::from_str::<CheckpointLine>) else {
            return;
        };
        let Some(cp) = checkpoint_of(&line) else {
            return;
        };
        checkpoints.push(cp);
    }
    let mut leaves = Vec::new();
    for line in lines.take(MAX_LINES) {
        let Ok(ev) = serde_json::from_str::<EventLine>(line) else {
            return;
        };
        if ev.kind != "event" || ev.tenant_id != header.tenant {
            return;
        }
        let Some(leaf) = leaf_of(&ev) else {
            return;
        };
        leaves.push(leaf);
    }
    let key = audit_signer().public_key();
    let Ok(summary) = verify_trail(
        &origin,
        key,
        leaves.iter().copied(),
        &checkpoints,
        &mut |_| {},
    ) else {
        return;
    };
    // Soundness: everything the verifier vouches for is recomputed here independently.
    let hashes: Vec<Hash> = leaves.iter().map(|l| l.leaf_hash).collect();
    assert_eq!(summary.leaves, hashes.len() as u64);
    assert_eq!(summary.checkpoints, checkpoints.len());
    assert_eq!(
        summary.unsealed_leaves,
        summary.leaves - summary.signed_size
    );
    for (i, leaf) in leaves.iter().enumerate() {
        assert_eq!(leaf.index, i as u64, "accepted leaves are dense from 0");
        assert_eq!(leaf.recorded_leaf_hash, Some(leaf.leaf_hash));
    }
    let mut last_size = 0u64;
    for cp in &checkpoints {
        let head = Checkpoint::open(&cp.signed_note, &origin, key).expect("accepted: opens");
        assert!(head.size >= last_size, "accepted checkpoints never shrink");
        let size = usize::try_from(head.size).expect("small");
        assert_eq!(
            root(&hashes[..size]),
            head.root,
            "a signed root is its prefix's root"
        );
        last_size = head.size;
    }
    assert_eq!(summary.signed_size, last_size);
    let signed = usize::try_from(summary.signed_size).expect("small");
    assert_eq!(root(&hashes[..signed]), summary.signed_root);
});
