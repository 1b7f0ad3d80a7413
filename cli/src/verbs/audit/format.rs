//! The export and proof formats: the header, checkpoint and event lines of an export (JSON lines,
//! documented in `docs/AUDIT.md`), and their conversions to and from the trail.

use std::borrow::Cow;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use domain::audit::{AuditLeaf, Hash, LeafActor, TrailCheckpoint};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::error::AuditCmdError;

pub(super) const EXPORT_FORMAT: &str = "bc-audit-export";
pub(super) const PROOF_FORMAT: &str = "bc-audit-inclusion-proof";
pub(super) const PAGE: u32 = 10_000;

/// First line of an export.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Header {
    #[serde(rename = "type")]
    pub(super) kind: String,
    pub(super) format: String,
    pub(super) version: u32,
    pub(super) tenant: String,
    pub(super) origin: Option<String>,
    pub(super) verifier_key: Option<String>,
    pub(super) leaf_version: u8,
    pub(super) checkpoints: u64,
    pub(super) events: u64,
}

/// One checkpoint line.
#[derive(Serialize, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub(super) struct CheckpointLine {
    #[serde(rename = "type")]
    pub(super) kind: String,
    pub(super) seq: u64,
    pub(super) tree_size: u64,
    pub(super) root_hash: String,
    pub(super) signed_note: String,
    pub(super) previous_note_sha256: Option<String>,
    pub(super) consistency_proof: Vec<String>,
    pub(super) position: i64,
}

/// One event line: the event as stored, its index and the leaf hash the sequencer recorded.
/// `actor_id` and `actor_role` are there for an event with an actor (its leaf is version 2) and
/// left out for one without, so exports made before actors were recorded read as they did.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EventLine<'a> {
    #[serde(rename = "type", borrow)]
    pub(super) kind: Cow<'a, str>,
    pub(super) index: u64,
    pub(super) position: i64,
    #[serde(borrow)]
    pub(super) tenant_id: Cow<'a, str>,
    #[serde(borrow)]
    pub(super) stream_id: Cow<'a, str>,
    pub(super) stream_version: i64,
    #[serde(borrow)]
    pub(super) event_type: Cow<'a, str>,
    pub(super) schema_version: u32,
    pub(super) occurred_at_us: i64,
    #[serde(borrow)]
    pub(super) event_id: Cow<'a, str>,
    #[serde(borrow)]
    pub(super) payload: Cow<'a, str>,
    #[serde(borrow)]
    pub(super) leaf_hash: Cow<'a, str>,
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    pub(super) actor_id: Option<Cow<'a, str>>,
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    pub(super) actor_role: Option<Cow<'a, str>>,
}

impl<'a> EventLine<'a> {
    pub(super) fn of(event: &'a events::RecordedEvent, index: u64, leaf_hash: &Hash) -> Self {
        EventLine {
            kind: Cow::Borrowed("event"),
            index,
            position: event.position,
            tenant_id: Cow::Borrowed(&event.tenant_id),
            stream_id: Cow::Borrowed(&event.stream_id),
            stream_version: event.stream_version,
            event_type: Cow::Borrowed(&event.event_type),
            schema_version: event.schema_version,
            occurred_at_us: event.occurred_at_us,
            event_id: Cow::Owned(hex::encode(event.event_id)),
            payload: Cow::Owned(B64.encode(&event.payload)),
            leaf_hash: Cow::Owned(hex::encode(leaf_hash)),
            actor_id: event.actor.as_ref().map(|a| Cow::Borrowed(a.id())),
            actor_role: event.actor.as_ref().map(|a| Cow::Borrowed(a.role())),
        }
    }

    /// The line's actor: both fields or neither.
    pub(super) fn actor(&self) -> Result<Option<LeafActor<'_>>, String> {
        match (&self.actor_id, &self.actor_role) {
            (None, None) => Ok(None),
            (Some(id), Some(role)) => Ok(Some(LeafActor { id, role })),
            (Some(_), None) => Err("actor_id is given without actor_role".into()),
            (None, Some(_)) => Err("actor_role is given without actor_id".into()),
        }
    }

    /// The line's actor as the log records it (checked as the store checks it).
    pub(super) fn recorded_actor(&self) -> Result<Option<events::Actor>, String> {
        self.actor()?
            .map(|a| events::Actor::new(a.id, a.role).map_err(|e| e.to_string()))
            .transpose()
    }

    /// The leaf hash recomputed from the line, the payload digest recomputed from its bytes.
    pub(super) fn recompute(&self, payload_buf: &mut Vec<u8>) -> Result<Hash, String> {
        payload_buf.clear();
        B64.decode_vec(self.payload.as_bytes(), payload_buf)
            .map_err(|_| "payload is not standard base64".to_string())?;
        let event_id: [u8; 16] =
            hex_array(&self.event_id).ok_or_else(|| "event_id is not 32 hex digits".to_string())?;
        let leaf = AuditLeaf {
            tenant_id: &self.tenant_id,
            index: self.index,
            position: self.position,
            stream_id: &self.stream_id,
            stream_version: self.stream_version,
            event_type: &self.event_type,
            schema_version: self.schema_version,
            occurred_at_us: self.occurred_at_us,
            event_id,
            payload_sha256: Sha256::digest(&payload_buf[..]).into(),
            actor: self.actor()?,
        };
        leaf.leaf_hash().map_err(|e| e.to_string())
    }
}

pub(super) fn hex_array<const N: usize>(s: &str) -> Option<[u8; N]> {
    let mut out = [0u8; N];
    hex::decode_to_slice(s, &mut out).ok()?;
    Some(out)
}

pub(super) fn checkpoint_line(c: &commands::audit::CheckpointRow) -> CheckpointLine {
    CheckpointLine {
        kind: "checkpoint".into(),
        seq: c.seq,
        tree_size: c.tree_size,
        root_hash: hex::encode(c.root_hash),
        signed_note: c.signed_note.clone(),
        previous_note_sha256: c.previous_note_sha256.map(hex::encode),
        consistency_proof: c.consistency_proof.iter().map(hex::encode).collect(),
        position: c.position,
    }
}

pub(super) fn trail_checkpoint(
    line: &CheckpointLine,
    k: usize,
) -> Result<TrailCheckpoint, AuditCmdError> {
    let bad = |what: &str| {
        AuditCmdError::Tampered(format!(
            "checkpoint {k} of the export is malformed: {what} is not 64 hex digits"
        ))
    };
    let previous = match &line.previous_note_sha256 {
        None => None,
        Some(h) => Some(hex_array::<32>(h).ok_or_else(|| bad("previous_note_sha256"))?),
    };
    let proof = line
        .consistency_proof
        .iter()
        .map(|h| hex_array::<32>(h).ok_or_else(|| bad("a consistency proof hash")))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(TrailCheckpoint {
        signed_note: line.signed_note.clone(),
        previous_note_sha256: previous,
        consistency_proof: Some(proof),
    })
}
