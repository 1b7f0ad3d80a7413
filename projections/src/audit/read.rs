//! Every read of the audit tables: tree sizes, stored node hashes, checkpoints, and leaves joined
//! with the events they were made from (paged, or the one at a position).
//!
//! Each function reads through a [`ReadFrom`]: the sequencer and the sealer read inside their
//! transaction, exports and proofs from the read pool. Columns are checked on the way out (a
//! negative size or a hash that is not 32 bytes is [`AuditTableError::Corrupt`]).

use events::store::SqlValue;
use events::RecordedEvent;

use super::error::{to_hash, to_i64, to_u64, AuditTableError, Hash};
use super::ReadFrom;

/// One recorded checkpoint (a row of `audit_checkpoints`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointRow {
    pub tenant_id: String,
    /// 1 for the tenant's first checkpoint.
    pub seq: u64,
    pub tree_size: u64,
    pub root_hash: Hash,
    pub origin: String,
    pub verifier_key: String,
    pub signed_note: String,
    pub note_sha256: Hash,
    /// `None` for the first checkpoint.
    pub previous_note_sha256: Option<Hash>,
    /// From the previous checkpoint's size (0 for the first) to `tree_size`.
    pub consistency_proof: Vec<Hash>,
    /// Position of the `audit.checkpoint.sealed` event.
    pub position: i64,
    pub occurred_at_us: i64,
}

/// One leaf of a tenant's log with the event it was made from (`None` if the event row is gone).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeafRow {
    pub index: u64,
    pub position: i64,
    pub leaf_hash: Hash,
    pub event: Option<RecordedEvent>,
}

/// What the sealer needs of a tenant's last checkpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LastCheckpoint {
    pub seq: u64,
    pub size: u64,
    pub root: Hash,
    /// SHA-256 of its signed note.
    pub note_sha256: Hash,
}

/// A tenant's tree size as the sequencer committed it (0 when it has no leaves yet).
pub async fn tree_size(src: &mut ReadFrom<'_>, tenant: &str) -> Result<u64, AuditTableError> {
    let size: Option<(i64,)> = src
        .fetch_optional(
            "SELECT size FROM audit_trees WHERE tenant_id = $1",
            &[SqlValue::from(tenant)],
        )
        .await?;
    to_u64(size.map_or(0, |(s,)| s), "audit_trees.size")
}

/// Every tenant with a tree, and its size, by tenant.
pub async fn tree_sizes(src: &mut ReadFrom<'_>) -> Result<Vec<(String, u64)>, AuditTableError> {
    let rows: Vec<(String, i64)> = src
        .fetch_all(
            "SELECT tenant_id, size FROM audit_trees ORDER BY tenant_id",
            &[],
        )
        .await?;
    rows.into_iter()
        .map(|(t, s)| Ok((t, to_u64(s, "audit_trees.size")?)))
        .collect()
}

/// The stored hashes of the nodes `(level, index)`, in the order asked: level 0 from
/// `audit_leaves`, the rest from `audit_nodes`. One query per node; proofs need O(log n).
pub async fn node_hashes(
    src: &mut ReadFrom<'_>,
    tenant: &str,
    ids: &[(u32, u64)],
) -> Result<Vec<Hash>, AuditTableError> {
    let mut out = Vec::with_capacity(ids.len());
    for &(level, index) in ids {
        let at = to_i64(index, "node index")?;
        let hash: Option<(Vec<u8>,)> = if level == 0 {
            src.fetch_optional(
                "SELECT leaf_hash FROM audit_leaves WHERE tenant_id = $1 AND leaf_index = $2",
                &[SqlValue::from(tenant), SqlValue::Int(at)],
            )
            .await?
        } else {
            src.fetch_optional(
                "SELECT hash FROM audit_nodes WHERE tenant_id = $1 AND level = $2 AND node_index = $3",
                &[
                    SqlValue::from(tenant),
                    SqlValue::Int(i64::from(level)),
                    SqlValue::Int(at),
                ],
            )
            .await?
        };
        let Some((hash,)) = hash else {
            return Err(AuditTableError::Corrupt(format!(
                "tenant {tenant}: node (level {level}, index {index}) is missing from the audit tables"
            )));
        };
        out.push(to_hash(&hash, "stored node hash")?);
    }
    Ok(out)
}

/// The last checkpoint of a tenant, if it has one.
pub async fn last_checkpoint(
    src: &mut ReadFrom<'_>,
    tenant: &str,
) -> Result<Option<LastCheckpoint>, AuditTableError> {
    let row: Option<(i64, i64, Vec<u8>, Vec<u8>)> = src
        .fetch_optional(
            "SELECT seq, tree_size, root_hash, note_sha256 FROM audit_checkpoints \
             WHERE tenant_id = $1 ORDER BY seq DESC LIMIT 1",
            &[SqlValue::from(tenant)],
        )
        .await?;
    let Some((seq, size, root, note)) = row else {
        return Ok(None);
    };
    Ok(Some(LastCheckpoint {
        seq: to_u64(seq, "audit_checkpoints.seq")?,
        size: to_u64(size, "audit_checkpoints.tree_size")?,
        root: to_hash(&root, "audit_checkpoints.root_hash")?,
        note_sha256: to_hash(&note, "audit_checkpoints.note_sha256")?,
    }))
}

/// Tenants whose tree is larger than their last checkpoint (or who have none), by tenant.
pub async fn grown_tenants(src: &mut ReadFrom<'_>) -> Result<Vec<String>, AuditTableError> {
    let rows: Vec<(String,)> = src
        .fetch_all(
            "SELECT t.tenant_id FROM audit_trees t \
             LEFT JOIN (SELECT tenant_id, MAX(tree_size) AS s FROM audit_checkpoints \
             GROUP BY tenant_id) k ON k.tenant_id = t.tenant_id \
             WHERE t.size > COALESCE(k.s, 0) ORDER BY t.tenant_id",
            &[],
        )
        .await?;
    Ok(rows.into_iter().map(|(t,)| t).collect())
}

crate::from_row! {
    /// A row of `audit_checkpoints` as stored.
    struct StoredCheckpoint {
        tenant_id: String,
        seq: i64,
        tree_size: i64,
        root_hash: Vec<u8>,
        origin: String,
        verifier_key: String,
        signed_note: String,
        note_sha256: Vec<u8>,
        previous_note_sha256: Option<Vec<u8>>,
        consistency_proof: Vec<u8>,
        position: i64,
        occurred_at_us: i64,
    }
}

/// Every checkpoint of a tenant, in order.
pub async fn checkpoints(
    src: &mut ReadFrom<'_>,
    tenant: &str,
) -> Result<Vec<CheckpointRow>, AuditTableError> {
    let rows: Vec<StoredCheckpoint> = src
        .fetch_all(
            "SELECT tenant_id, seq, tree_size, root_hash, origin, verifier_key, signed_note, \
             note_sha256, previous_note_sha256, consistency_proof, position, occurred_at_us \
             FROM audit_checkpoints WHERE tenant_id = $1 ORDER BY seq",
            &[SqlValue::from(tenant)],
        )
        .await?;
    rows.into_iter().map(checkpoint_row).collect()
}

fn checkpoint_row(r: StoredCheckpoint) -> Result<CheckpointRow, AuditTableError> {
    if !r.consistency_proof.len().is_multiple_of(32) {
        return Err(AuditTableError::Corrupt(format!(
            "checkpoint {} of {}: consistency proof is {} bytes, not a multiple of 32",
            r.seq,
            r.tenant_id,
            r.consistency_proof.len()
        )));
    }
    Ok(CheckpointRow {
        seq: to_u64(r.seq, "audit_checkpoints.seq")?,
        tree_size: to_u64(r.tree_size, "audit_checkpoints.tree_size")?,
        root_hash: to_hash(&r.root_hash, "audit_checkpoints.root_hash")?,
        origin: r.origin,
        verifier_key: r.verifier_key,
        signed_note: r.signed_note,
        note_sha256: to_hash(&r.note_sha256, "audit_checkpoints.note_sha256")?,
        previous_note_sha256: r
            .previous_note_sha256
            .map(|p| to_hash(&p, "audit_checkpoints.previous_note_sha256"))
            .transpose()?,
        consistency_proof: r
            .consistency_proof
            .chunks(32)
            .map(|c| to_hash(c, "consistency proof hash"))
            .collect::<Result<_, _>>()?,
        position: r.position,
        occurred_at_us: r.occurred_at_us,
        tenant_id: r.tenant_id,
    })
}

crate::from_row! {
    /// A leaf joined with its event (the event's columns are NULL when its row is gone).
    struct StoredLeaf {
        leaf_index: i64,
        position: i64,
        leaf_hash: Vec<u8>,
        stream_id: Option<String>,
        stream_version: Option<i64>,
        event_id: Option<Vec<u8>>,
        event_type: Option<String>,
        schema_version: Option<i32>,
        tenant_id: Option<String>,
        occurred_at_us: Option<i64>,
        payload: Option<Vec<u8>>,
        payload_sha256: Option<Vec<u8>>,
        actor_id: Option<String>,
        actor_role: Option<String>,
    }
}

const LEAF_SELECT: &str = "SELECT l.leaf_index, l.position, l.leaf_hash, e.stream_id, \
    e.stream_version, e.event_id, e.event_type, e.schema_version, e.tenant_id, e.occurred_at_us, \
    e.payload, e.payload_sha256, e.actor_id, e.actor_role FROM audit_leaves l LEFT JOIN events e ON e.position = l.position";

/// Up to `limit` leaves of a tenant with index at least `from`, in index order, each with its
/// event.
pub async fn leaves(
    src: &mut ReadFrom<'_>,
    tenant: &str,
    from: u64,
    limit: u32,
) -> Result<Vec<LeafRow>, AuditTableError> {
    let sql = format!(
        "{LEAF_SELECT} WHERE l.tenant_id = $1 AND l.leaf_index >= $2 ORDER BY l.leaf_index LIMIT $3"
    );
    let args = [
        SqlValue::from(tenant),
        SqlValue::Int(to_i64(from, "leaf index")?),
        SqlValue::Int(i64::from(limit)),
    ];
    let rows: Vec<StoredLeaf> = src.fetch_all(&sql, &args).await?;
    rows.into_iter().map(leaf_row).collect()
}

/// The leaf of the event at `position` in a tenant's log, if the sequencer gave it one there.
pub async fn leaf_at(
    src: &mut ReadFrom<'_>,
    tenant: &str,
    position: i64,
) -> Result<Option<LeafRow>, AuditTableError> {
    let sql = format!("{LEAF_SELECT} WHERE l.tenant_id = $1 AND l.position = $2 LIMIT 1");
    let row: Option<StoredLeaf> = src
        .fetch_optional(&sql, &[SqlValue::from(tenant), SqlValue::Int(position)])
        .await?;
    row.map(leaf_row).transpose()
}

fn leaf_row(r: StoredLeaf) -> Result<LeafRow, AuditTableError> {
    let position = r.position;
    let actor = match (r.actor_id, r.actor_role) {
        (None, None) => None,
        (Some(id), Some(role)) => Some(
            events::Actor::new(id, role)
                .map_err(|e| AuditTableError::Corrupt(format!("event {position}: {e}")))?,
        ),
        _ => {
            return Err(AuditTableError::Corrupt(format!(
                "event {position}: one of actor_id and actor_role is NULL"
            )))
        }
    };
    let event = match (
        r.stream_id,
        r.stream_version,
        r.event_id,
        r.event_type,
        r.schema_version,
        r.tenant_id,
        r.occurred_at_us,
        r.payload,
        r.payload_sha256,
    ) {
        (
            Some(stream_id),
            Some(stream_version),
            Some(id),
            Some(event_type),
            Some(schema),
            Some(tenant_id),
            Some(occurred_at_us),
            Some(payload),
            Some(digest),
        ) => Some(RecordedEvent {
            position,
            stream_id,
            stream_version,
            event_id: id.as_slice().try_into().map_err(|_| {
                AuditTableError::Corrupt(format!("event {position}: event id is not 16 bytes"))
            })?,
            event_type,
            schema_version: u32::try_from(schema).map_err(|_| {
                AuditTableError::Corrupt(format!("event {position}: negative schema version"))
            })?,
            tenant_id,
            occurred_at_us,
            payload,
            payload_sha256: to_hash(&digest, "events.payload_sha256")?,
            tx_id: None,
            actor,
        }),
        (None, None, None, None, None, None, None, None, None) => None,
        _ => {
            return Err(AuditTableError::Corrupt(format!(
                "event {position}: some of its columns are NULL"
            )))
        }
    };
    Ok(LeafRow {
        index: to_u64(r.leaf_index, "audit_leaves.leaf_index")?,
        position,
        leaf_hash: to_hash(&r.leaf_hash, "audit_leaves.leaf_hash")?,
        event,
    })
}
