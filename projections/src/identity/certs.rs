//! The `node_certs` projection: issues are inserted in runs (one `COPY` for a long run on
//! Postgres); an identity revocation revokes the serials it names (schema 1 events, which name
//! none, every open certificate of the node: [`RevokedCertificates`]); a deletion or retirement
//! revokes every open certificate of the node. A certificate's allowed command kinds are stored
//! comma-joined (`allowed_kinds`, NULL for none: every kind its role allows).

use events::schema::{
    NodeCertificateIssued, NodeDeleted, NodeIdentityRevoked, NodeRetired, RevokedCertificates,
};
use events::store::{DeferredWrite, LogTx, SqlValue, StoreTx};
use events::{EventPayload, RecordedEvent};

use super::writes::to_i64;
use crate::{BoxFuture, Projection, ProjectionError, TableSpec};

/// `node_certs`: every certificate issued, and when (at which position) it was revoked.
pub struct NodeCerts;

const NODE_CERTS_TABLES: &[TableSpec] = &[TableSpec {
    name: "node_certs",
    columns: &[
        "serial",
        "node_id",
        "identity_generation",
        "der",
        "not_before_us",
        "not_after_us",
        "revoked_at_us",
        "revoke_reason",
        "issued_position",
        "revoked_position",
        "allowed_kinds",
    ],
    order_by: "serial",
}];

/// The columns a certificate's issue writes, in the order of [`insert_certs`]' rows.
const CERT_COLUMNS: &[&str] = &[
    "serial",
    "node_id",
    "identity_generation",
    "der",
    "not_before_us",
    "not_after_us",
    "issued_position",
    "allowed_kinds",
];

/// Inserts a run of issued certificates ([`LogTx::insert_rows`]: one `COPY` on Postgres for a
/// long run, as in a rebuild).
async fn insert_certs(
    tx: &mut StoreTx,
    rows: &mut Vec<(NodeCertificateIssued, i64)>,
) -> Result<(), ProjectionError> {
    let values: Vec<Vec<SqlValue>> = rows
        .drain(..)
        .map(|(p, position)| {
            vec![
                SqlValue::Text(p.serial),
                SqlValue::Text(p.node_id),
                SqlValue::Int(i64::try_from(p.identity_generation).unwrap_or(i64::MAX)),
                SqlValue::Bytes(p.der),
                SqlValue::Int(p.not_before_us),
                SqlValue::Int(p.not_after_us),
                SqlValue::Int(position),
                super::writes::opt_text(
                    (!p.allowed_kinds.is_empty()).then(|| p.allowed_kinds.join(",")),
                ),
            ]
        })
        .collect();
    tx.insert_rows("node_certs", CERT_COLUMNS, values).await?;
    Ok(())
}

async fn revoke_all(
    tx: &mut StoreTx,
    e: &RecordedEvent,
    node_id: String,
    reason: String,
) -> Result<(), ProjectionError> {
    tx.defer(DeferredWrite::new(
        "node_certs",
        "UPDATE node_certs SET revoked_at_us = $2, revoke_reason = $3, revoked_position = $4 \
         WHERE node_id = $1 AND revoked_at_us IS NULL"
            .to_owned(),
        vec![
            node_id.into(),
            e.occurred_at_us.into(),
            reason.into(),
            e.position.into(),
        ],
    ))
    .await?;
    Ok(())
}

/// Serials per statement of [`revoke_named`] (well under both backends' parameter limits).
const SERIALS_PER_STATEMENT: usize = 500;

/// Revokes the named open certificates of a node; each must be one (else the event and the
/// table disagree: corruption or a bug, reported when the write is sent).
async fn revoke_named(
    tx: &mut StoreTx,
    e: &RecordedEvent,
    node_id: &str,
    serials: &[String],
    reason: &str,
) -> Result<(), ProjectionError> {
    for chunk in serials.chunks(SERIALS_PER_STATEMENT) {
        let mut sql = String::from(
            "UPDATE node_certs SET revoked_at_us = $2, revoke_reason = $3, revoked_position = $4 \
             WHERE node_id = $1 AND revoked_at_us IS NULL AND serial IN (",
        );
        let mut args: Vec<SqlValue> = vec![
            node_id.into(),
            e.occurred_at_us.into(),
            reason.into(),
            e.position.into(),
        ];
        for (i, serial) in chunk.iter().enumerate() {
            if i > 0 {
                sql.push_str(", ");
            }
            args.push(serial.as_str().into());
            sql.push_str(&format!("${}", args.len()));
        }
        sql.push(')');
        tx.defer(DeferredWrite::new("node_certs", sql, args).expecting(
            chunk.len() as u64,
            format!(
                "node.identity.revoked at position {} names a serial that is not an open \
                 certificate of node {node_id}",
                e.position
            ),
        ))
        .await?;
    }
    Ok(())
}

impl Projection for NodeCerts {
    fn name(&self) -> &'static str {
        "node_certs"
    }
    fn tables(&self) -> &'static [TableSpec] {
        NODE_CERTS_TABLES
    }
    fn only_writes(&self) -> bool {
        true
    }
    fn handles(&self, event_type: &str) -> bool {
        [
            NodeCertificateIssued::EVENT_TYPE,
            NodeIdentityRevoked::EVENT_TYPE,
            NodeDeleted::EVENT_TYPE,
            NodeRetired::EVENT_TYPE,
        ]
        .contains(&event_type)
    }
    fn apply<'a>(
        &'a self,
        tx: &'a mut StoreTx,
        events: &'a [&'a RecordedEvent],
    ) -> BoxFuture<'a, Result<(), ProjectionError>> {
        Box::pin(async move {
            // Consecutive issues go in multi-row inserts; a revocation flushes them first.
            let mut pending: Vec<(NodeCertificateIssued, i64)> = Vec::new();
            for e in events {
                match e.event_type.as_str() {
                    NodeCertificateIssued::EVENT_TYPE => {
                        let p: NodeCertificateIssued = e.decode()?;
                        to_i64(p.identity_generation, e, "node_certs")?;
                        pending.push((p, e.position));
                    }
                    NodeIdentityRevoked::EVENT_TYPE => {
                        insert_certs(tx, &mut pending).await?;
                        let p: NodeIdentityRevoked = e.decode()?;
                        let reason = format!("identity revoked: {}", p.reason);
                        match p.revoked_certificates(e.schema_version) {
                            RevokedCertificates::Named(serials) => {
                                revoke_named(tx, e, &p.node_id, serials, &reason).await?
                            }
                            RevokedCertificates::EveryUnrevokedOfNode => {
                                revoke_all(tx, e, p.node_id.clone(), reason).await?
                            }
                        }
                    }
                    NodeDeleted::EVENT_TYPE => {
                        insert_certs(tx, &mut pending).await?;
                        let p: NodeDeleted = e.decode()?;
                        revoke_all(tx, e, p.node_id, format!("node deleted: {}", p.reason)).await?;
                    }
                    NodeRetired::EVENT_TYPE => {
                        insert_certs(tx, &mut pending).await?;
                        let p: NodeRetired = e.decode()?;
                        revoke_all(tx, e, p.node_id, format!("node retired: {}", p.reason)).await?;
                    }
                    _ => {}
                }
            }
            insert_certs(tx, &mut pending).await
        })
    }
}
