//! Reads for exports, proofs and database-side verification: checkpoints, leaves joined with
//! their events (paged), and inclusion proofs from O(log n) stored nodes.
//!
//! These read through the store's read pool, never inside a write transaction.

use domain::audit::tree::inclusion_plan;
use domain::audit::Hash;
use events::store::EventStore;
use events::RecordedEvent;
use sqlx::Row;

use super::db::{self, Conn, Pooled};
use super::{to_hash, to_i64, to_u64, AuditError};

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

/// An inclusion proof of one event against a tenant's latest checkpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InclusionProof {
    pub checkpoint: CheckpointRow,
    pub leaf: LeafRow,
    /// RFC 9162 §2.1.3 inclusion proof of `leaf.index` in the tree of `checkpoint.tree_size`.
    pub proof: Vec<Hash>,
}

/// Every checkpoint of a tenant, in order.
pub async fn checkpoints(
    store: &EventStore,
    tenant: &str,
) -> Result<Vec<CheckpointRow>, AuditError> {
    let mut pooled = Pooled::acquire(store).await?;
    let mut conn = pooled.conn();
    checkpoints_in(&mut conn, tenant).await
}

const CHECKPOINT_COLUMNS: &str = "tenant_id, seq, tree_size, root_hash, origin, verifier_key, \
    signed_note, note_sha256, previous_note_sha256, consistency_proof, position, occurred_at_us";

macro_rules! checkpoint_from_row {
    ($r:expr) => {{
        let r = $r;
        let proof: Vec<u8> = r.try_get(9)?;
        let previous: Option<Vec<u8>> = r.try_get(8)?;
        (
            r.try_get::<String, _>(0)?,
            r.try_get::<i64, _>(1)?,
            r.try_get::<i64, _>(2)?,
            r.try_get::<Vec<u8>, _>(3)?,
            r.try_get::<String, _>(4)?,
            r.try_get::<String, _>(5)?,
            r.try_get::<String, _>(6)?,
            r.try_get::<Vec<u8>, _>(7)?,
            previous,
            proof,
            r.try_get::<i64, _>(10)?,
            r.try_get::<i64, _>(11)?,
        )
    }};
}

type RawCheckpoint = (
    String,
    i64,
    i64,
    Vec<u8>,
    String,
    String,
    String,
    Vec<u8>,
    Option<Vec<u8>>,
    Vec<u8>,
    i64,
    i64,
);

async fn checkpoints_in(
    conn: &mut Conn<'_>,
    tenant: &str,
) -> Result<Vec<CheckpointRow>, AuditError> {
    let sql = format!(
        "SELECT {CHECKPOINT_COLUMNS} FROM audit_checkpoints WHERE tenant_id = $1 ORDER BY seq"
    );
    let raw: Vec<RawCheckpoint> = match conn {
        Conn::Pg(c) => {
            let rows = sqlx::query(&sql).bind(tenant).fetch_all(&mut **c).await?;
            let mut out = Vec::with_capacity(rows.len());
            for r in &rows {
                out.push(checkpoint_from_row!(r));
            }
            out
        }
        Conn::Lite(c) => {
            let rows = sqlx::query(&sql).bind(tenant).fetch_all(&mut **c).await?;
            let mut out = Vec::with_capacity(rows.len());
            for r in &rows {
                out.push(checkpoint_from_row!(r));
            }
            out
        }
    };
    raw.into_iter().map(checkpoint_row).collect()
}

fn checkpoint_row(r: RawCheckpoint) -> Result<CheckpointRow, AuditError> {
    let (tenant_id, seq, size, root, origin, vkey, note, note_sha, prev, proof, position, at) = r;
    if proof.len() % 32 != 0 {
        return Err(AuditError::Corrupt(format!(
            "checkpoint {seq} of {tenant_id}: consistency proof is {} bytes, not a multiple of 32",
            proof.len()
        )));
    }
    Ok(CheckpointRow {
        seq: to_u64(seq, "audit_checkpoints.seq")?,
        tree_size: to_u64(size, "audit_checkpoints.tree_size")?,
        root_hash: to_hash(&root, "audit_checkpoints.root_hash")?,
        origin,
        verifier_key: vkey,
        signed_note: note,
        note_sha256: to_hash(&note_sha, "audit_checkpoints.note_sha256")?,
        previous_note_sha256: prev
            .map(|p| to_hash(&p, "audit_checkpoints.previous_note_sha256"))
            .transpose()?,
        consistency_proof: proof
            .chunks(32)
            .map(|c| to_hash(c, "consistency proof hash"))
            .collect::<Result<_, _>>()?,
        position,
        occurred_at_us: at,
        tenant_id,
    })
}

/// A tenant's tree size as the sequencer committed it.
pub async fn tree_size(store: &EventStore, tenant: &str) -> Result<u64, AuditError> {
    let mut pooled = Pooled::acquire(store).await?;
    db::tree_size(&mut pooled.conn(), tenant).await
}

/// Every tenant with a tree, and its size.
pub async fn tree_sizes(store: &EventStore) -> Result<Vec<(String, u64)>, AuditError> {
    let mut pooled = Pooled::acquire(store).await?;
    db::tree_sizes(&mut pooled.conn()).await
}

const LEAF_SELECT: &str = "SELECT l.leaf_index, l.position, l.leaf_hash, e.stream_id, \
    e.stream_version, e.event_id, e.event_type, e.schema_version, e.tenant_id, e.occurred_at_us, \
    e.payload, e.payload_sha256 FROM audit_leaves l LEFT JOIN events e ON e.position = l.position";

type RawLeaf = (
    i64,
    i64,
    Vec<u8>,
    Option<(
        String,
        i64,
        Vec<u8>,
        String,
        i64,
        String,
        i64,
        Vec<u8>,
        Vec<u8>,
    )>,
);

macro_rules! leaf_from_row {
    ($r:expr) => {{
        let r = $r;
        let stream: Option<String> = r.try_get(3)?;
        let event = match stream {
            None => None,
            Some(stream) => Some((
                stream,
                r.try_get::<i64, _>(4)?,
                r.try_get::<Vec<u8>, _>(5)?,
                r.try_get::<String, _>(6)?,
                i64::from(r.try_get::<i32, _>(7)?),
                r.try_get::<String, _>(8)?,
                r.try_get::<i64, _>(9)?,
                r.try_get::<Vec<u8>, _>(10)?,
                r.try_get::<Vec<u8>, _>(11)?,
            )),
        };
        (
            r.try_get::<i64, _>(0)?,
            r.try_get::<i64, _>(1)?,
            r.try_get::<Vec<u8>, _>(2)?,
            event,
        )
    }};
}

fn leaf_row(raw: RawLeaf) -> Result<LeafRow, AuditError> {
    let (index, position, hash, event) = raw;
    let event = match event {
        None => None,
        Some((stream_id, version, id, ty, schema, tenant, at, payload, digest)) => {
            Some(RecordedEvent {
                position,
                stream_id,
                stream_version: version,
                event_id: id.as_slice().try_into().map_err(|_| {
                    AuditError::Corrupt(format!("event {position}: event id is not 16 bytes"))
                })?,
                event_type: ty,
                schema_version: u32::try_from(schema).map_err(|_| {
                    AuditError::Corrupt(format!("event {position}: negative schema version"))
                })?,
                tenant_id: tenant,
                occurred_at_us: at,
                payload,
                payload_sha256: to_hash(&digest, "events.payload_sha256")?,
                tx_id: None,
            })
        }
    };
    Ok(LeafRow {
        index: to_u64(index, "audit_leaves.leaf_index")?,
        position,
        leaf_hash: to_hash(&hash, "audit_leaves.leaf_hash")?,
        event,
    })
}

async fn leaves_in(
    conn: &mut Conn<'_>,
    sql: &str,
    tenant: &str,
    a: i64,
    b: i64,
) -> Result<Vec<LeafRow>, AuditError> {
    let raw: Vec<RawLeaf> = match conn {
        Conn::Pg(c) => {
            let rows = sqlx::query(sql)
                .bind(tenant)
                .bind(a)
                .bind(b)
                .fetch_all(&mut **c)
                .await?;
            let mut out = Vec::with_capacity(rows.len());
            for r in &rows {
                out.push(leaf_from_row!(r));
            }
            out
        }
        Conn::Lite(c) => {
            let rows = sqlx::query(sql)
                .bind(tenant)
                .bind(a)
                .bind(b)
                .fetch_all(&mut **c)
                .await?;
            let mut out = Vec::with_capacity(rows.len());
            for r in &rows {
                out.push(leaf_from_row!(r));
            }
            out
        }
    };
    raw.into_iter().map(leaf_row).collect()
}

/// Up to `limit` leaves of a tenant with index at least `from`, in index order, each with its
/// event.
pub async fn leaves(
    store: &EventStore,
    tenant: &str,
    from: u64,
    limit: u32,
) -> Result<Vec<LeafRow>, AuditError> {
    let mut pooled = Pooled::acquire(store).await?;
    let sql = format!(
        "{LEAF_SELECT} WHERE l.tenant_id = $1 AND l.leaf_index >= $2 ORDER BY l.leaf_index LIMIT $3"
    );
    leaves_in(
        &mut pooled.conn(),
        &sql,
        tenant,
        to_i64(from, "leaf index")?,
        i64::from(limit),
    )
    .await
}

/// The inclusion proof of the event at `position` against the tenant's latest checkpoint.
pub async fn prove(
    store: &EventStore,
    tenant: &str,
    position: i64,
) -> Result<InclusionProof, AuditError> {
    let mut pooled = Pooled::acquire(store).await?;
    let mut conn = pooled.conn();
    let Some(checkpoint) = checkpoints_in(&mut conn, tenant).await?.pop() else {
        return Err(AuditError::NoCheckpoint(tenant.to_string()));
    };
    let sql = format!("{LEAF_SELECT} WHERE l.tenant_id = $1 AND l.position = $2 LIMIT $3");
    let Some(leaf) = leaves_in(&mut conn, &sql, tenant, position, 1).await?.pop() else {
        return Err(AuditError::UnknownPosition {
            tenant: tenant.to_string(),
            position,
        });
    };
    if leaf.index >= checkpoint.tree_size {
        return Err(AuditError::NotYetSealed {
            tenant: tenant.to_string(),
            position,
            index: leaf.index,
            size: checkpoint.tree_size,
        });
    }
    let plan =
        inclusion_plan(leaf.index, checkpoint.tree_size).map_err(|source| AuditError::Proof {
            tenant: tenant.to_string(),
            source,
        })?;
    let proof = db::read_plan(&mut conn, tenant, &plan).await?;
    Ok(InclusionProof {
        checkpoint,
        leaf,
        proof,
    })
}
