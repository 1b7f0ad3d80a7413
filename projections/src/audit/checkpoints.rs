//! `audit_checkpoints`: every signed checkpoint of every tenant's audit log, from
//! `audit.checkpoint.sealed` events.
//!
//! One row per checkpoint, keyed by (tenant, seq) where `seq` is the event's version in its
//! `audit/<tenant>` stream (1 for a tenant's first checkpoint). A second checkpoint of the same
//! size is refused by the table's unique key, so a fork cannot even be recorded. The leaves and
//! interior nodes (`audit_leaves`, `audit_nodes`, `audit_trees`) are not a projection: the
//! sequencer (`commands::audit`) writes them through [`super::trees`], since a leaf's index
//! depends on commit order, which only the tailer knows.

use events::schema::AuditCheckpointSealed;
use events::store::{LogTx, SqlValue, StoreTx};
use events::{EventPayload, RecordedEvent};
use sha2::{Digest, Sha256};

use crate::{BoxFuture, Projection, ProjectionError, TableSpec};

/// The `audit_checkpoints` projection.
#[derive(Clone, Copy, Debug, Default)]
pub struct AuditCheckpoints;

const TABLES: &[TableSpec] = &[TableSpec {
    name: "audit_checkpoints",
    columns: &[
        "tenant_id",
        "seq",
        "tree_size",
        "root_hash",
        "origin",
        "verifier_key",
        "signed_note",
        "note_sha256",
        "previous_note_sha256",
        "consistency_proof",
        "position",
        "occurred_at_us",
    ],
    order_by: "tenant_id, seq",
}];

const INSERT: &str =
    "INSERT INTO audit_checkpoints (tenant_id, seq, tree_size, root_hash, origin, \
     verifier_key, signed_note, note_sha256, previous_note_sha256, consistency_proof, position, \
     occurred_at_us) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)";

impl Projection for AuditCheckpoints {
    fn name(&self) -> &'static str {
        "audit_checkpoints"
    }

    fn tables(&self) -> &'static [TableSpec] {
        TABLES
    }

    fn handles(&self, event_type: &str) -> bool {
        event_type == AuditCheckpointSealed::EVENT_TYPE
    }

    fn apply<'a>(
        &'a self,
        tx: &'a mut StoreTx,
        events: &'a [&'a RecordedEvent],
    ) -> BoxFuture<'a, Result<(), ProjectionError>> {
        Box::pin(async move {
            for event in events {
                let sealed: AuditCheckpointSealed = event.decode()?;
                let bad = |why: &str| ProjectionError::Inapplicable {
                    projection: "audit_checkpoints",
                    position: event.position,
                    event_type: event.event_type.clone(),
                    why: why.to_string(),
                };
                let size = i64::try_from(sealed.tree_size)
                    .map_err(|_| bad("tree size does not fit a signed 64-bit column"))?;
                let note = String::from_utf8(sealed.signed_note.clone())
                    .map_err(|_| bad("signed note is not UTF-8"))?;
                let note_sha256: [u8; 32] = Sha256::digest(&sealed.signed_note).into();
                let previous = if sealed.previous_checkpoint_sha256.iter().all(|b| *b == 0) {
                    SqlValue::NullBytes
                } else {
                    SqlValue::Bytes(sealed.previous_checkpoint_sha256.clone())
                };
                let proof: Vec<u8> = sealed.consistency_proof.concat();
                tx.execute(
                    INSERT,
                    &[
                        SqlValue::Text(event.tenant_id.clone()),
                        SqlValue::Int(event.stream_version),
                        SqlValue::Int(size),
                        SqlValue::Bytes(sealed.root_hash.clone()),
                        SqlValue::Text(sealed.origin.clone()),
                        SqlValue::Text(sealed.verifier_key.clone()),
                        SqlValue::Text(note),
                        SqlValue::Bytes(note_sha256.to_vec()),
                        previous,
                        SqlValue::Bytes(proof),
                        SqlValue::Int(event.position),
                        SqlValue::Int(event.occurred_at_us),
                    ],
                )
                .await?;
            }
            Ok(())
        })
    }
}
