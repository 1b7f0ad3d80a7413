//! Identity projections: `join_tokens` (+ `join_token_uses`), `nodes`, `node_certs`,
//! `attestation_uses` and `refusal_counters`, built only from the events of
//! `events/proto/bc/events/v1/identity.proto`.
//!
//! Every row records the position it reflects (`position`, or `issued_position` /
//! `revoked_position` for certificates); times come from the events (`occurred_at_us` or a field),
//! never from a clock. The unique keys are the race guards of the command layer: a second use of
//! one token use (`join_token_uses` primary key), a second use of one renew proof
//! (`attestation_uses` primary key) and a second active node for one hardware key fail inside the
//! command's transaction, which then retries from a fresh read.

use events::schema::{
    AttestationUsesPruned, JoinRefused, JoinTokenCreated, JoinTokenRevoked, JoinTokenUsed,
    NodeCertificateIssued, NodeDeleted, NodeIdentityRevoked, NodeJoined, NodeRetired,
    RefusalsSuppressed, RenewProofUsed, RenewRefused,
};
use events::store::{Backend, LogTx, SqlValue, StoreTx};
use events::{EventPayload, RecordedEvent};

use crate::{BoxFuture, Projection, ProjectionError, TableSpec};

/// The attestor name a renew proof is recorded under in `attestation_uses`.
pub const RENEW_POP_ATTESTOR: &str = "renew-pop";

fn bytes_or_null(b: &[u8]) -> SqlValue {
    if b.is_empty() {
        SqlValue::NullBytes
    } else {
        SqlValue::Bytes(b.to_vec())
    }
}

fn text_or_null(s: &str) -> SqlValue {
    if s.is_empty() {
        SqlValue::NullText
    } else {
        SqlValue::Text(s.to_owned())
    }
}

fn greatest(tx: &StoreTx) -> &'static str {
    match tx.backend() {
        Backend::Postgres => "GREATEST",
        Backend::Sqlite => "MAX",
    }
}

fn to_i64(v: u64, e: &RecordedEvent, projection: &'static str) -> Result<i64, ProjectionError> {
    i64::try_from(v).map_err(|_| ProjectionError::Inapplicable {
        projection,
        position: e.position,
        event_type: e.event_type.clone(),
        why: format!("{v} does not fit a signed 64-bit column"),
    })
}

// ---------------------------------------------------------------------------------------------
// join_tokens

/// `join_tokens` and `join_token_uses`.
pub struct JoinTokens;

const JOIN_TOKENS_TABLES: &[TableSpec] = &[
    TableSpec {
        name: "join_tokens",
        columns: &[
            "token_id",
            "tenant_id",
            "site_id",
            "pool_id",
            "role",
            "secret_sha256",
            "uses_total",
            "uses_left",
            "expires_at_us",
            "expect_product_uuid",
            "expect_mac",
            "allow_reclaim",
            "created_at_us",
            "revoked_at_us",
            "revoke_reason",
            "version",
            "position",
        ],
        order_by: "token_id",
    },
    TableSpec {
        name: "join_token_uses",
        columns: &[
            "token_id",
            "use_number",
            "node_id",
            "used_at_us",
            "position",
        ],
        order_by: "token_id, use_number",
    },
];

impl Projection for JoinTokens {
    fn name(&self) -> &'static str {
        "join_tokens"
    }
    fn tables(&self) -> &'static [TableSpec] {
        JOIN_TOKENS_TABLES
    }
    fn handles(&self, event_type: &str) -> bool {
        [
            JoinTokenCreated::EVENT_TYPE,
            JoinTokenRevoked::EVENT_TYPE,
            JoinTokenUsed::EVENT_TYPE,
        ]
        .contains(&event_type)
    }
    fn apply<'a>(
        &'a self,
        tx: &'a mut StoreTx,
        events: &'a [&'a RecordedEvent],
    ) -> BoxFuture<'a, Result<(), ProjectionError>> {
        Box::pin(async move {
            for e in events {
                match e.event_type.as_str() {
                    JoinTokenCreated::EVENT_TYPE => {
                        let p: JoinTokenCreated = e.decode()?;
                        tx.execute(
                            "INSERT INTO join_tokens (token_id, tenant_id, site_id, pool_id, role, \
                             secret_sha256, uses_total, uses_left, expires_at_us, \
                             expect_product_uuid, expect_mac, allow_reclaim, created_at_us, \
                             version, position) \
                             VALUES ($1, $2, $3, $4, $5, $6, $7, $7, $8, $9, $10, $11, $12, $13, $14)",
                            &[
                                p.token_id.into(),
                                p.tenant_id.into(),
                                p.site_id.into(),
                                p.pool_id.into(),
                                p.role.into(),
                                p.secret_sha256.into(),
                                i64::from(p.uses).into(),
                                p.expires_at_us.into(),
                                text_or_null(&p.expect_product_uuid),
                                text_or_null(&p.expect_mac),
                                p.allow_reclaim.into(),
                                e.occurred_at_us.into(),
                                e.stream_version.into(),
                                e.position.into(),
                            ],
                        )
                        .await?;
                    }
                    JoinTokenRevoked::EVENT_TYPE => {
                        let p: JoinTokenRevoked = e.decode()?;
                        tx.execute(
                            "UPDATE join_tokens SET revoked_at_us = $2, revoke_reason = $3, \
                             version = $4, position = $5 WHERE token_id = $1",
                            &[
                                p.token_id.into(),
                                e.occurred_at_us.into(),
                                p.reason.into(),
                                e.stream_version.into(),
                                e.position.into(),
                            ],
                        )
                        .await?;
                    }
                    JoinTokenUsed::EVENT_TYPE => {
                        let p: JoinTokenUsed = e.decode()?;
                        tx.execute(
                            "INSERT INTO join_token_uses (token_id, use_number, node_id, \
                             used_at_us, position) VALUES ($1, $2, $3, $4, $5)",
                            &[
                                p.token_id.clone().into(),
                                i64::from(p.use_number).into(),
                                p.node_id.into(),
                                e.occurred_at_us.into(),
                                e.position.into(),
                            ],
                        )
                        .await?;
                        tx.execute(
                            "UPDATE join_tokens SET uses_left = $2, version = $3, position = $4 \
                             WHERE token_id = $1",
                            &[
                                p.token_id.into(),
                                i64::from(p.uses_left).into(),
                                e.stream_version.into(),
                                e.position.into(),
                            ],
                        )
                        .await?;
                    }
                    _ => {}
                }
            }
            Ok(())
        })
    }
}

// ---------------------------------------------------------------------------------------------
// nodes

/// `nodes`: one row per node, following every event of its `node/<id>` stream.
pub struct Nodes;

const NODES_TABLES: &[TableSpec] = &[TableSpec {
    name: "nodes",
    columns: &[
        "node_id",
        "tenant_id",
        "site_id",
        "pool_id",
        "role",
        "status",
        "status_reason",
        "identity_generation",
        "attestor",
        "node_key",
        "token_id",
        "hardware_key_sha256",
        "product_uuid_sha256",
        "macs_sha256",
        "joined_at_us",
        "updated_at_us",
        "version",
        "position",
    ],
    order_by: "node_id",
}];

const NODE_STREAM_TYPES: &[&str] = &[
    NodeJoined::EVENT_TYPE,
    NodeCertificateIssued::EVENT_TYPE,
    RenewProofUsed::EVENT_TYPE,
    NodeIdentityRevoked::EVENT_TYPE,
    NodeDeleted::EVENT_TYPE,
    NodeRetired::EVENT_TYPE,
];

async fn touch_node(
    tx: &mut StoreTx,
    e: &RecordedEvent,
    node_id: String,
    set: &str,
    extra: Vec<SqlValue>,
) -> Result<(), ProjectionError> {
    let mut args = vec![
        SqlValue::Text(node_id),
        e.occurred_at_us.into(),
        e.stream_version.into(),
        e.position.into(),
    ];
    args.extend(extra);
    let comma = if set.is_empty() { "" } else { ", " };
    let sql = format!(
        "UPDATE nodes SET updated_at_us = $2, version = $3, position = $4{comma}{set} \
         WHERE node_id = $1"
    );
    let n = tx.execute(&sql, &args).await?;
    if n != 1 {
        return Err(ProjectionError::Inapplicable {
            projection: "nodes",
            position: e.position,
            event_type: e.event_type.clone(),
            why: "the node has no row (no node.joined before it)".into(),
        });
    }
    Ok(())
}

impl Projection for Nodes {
    fn name(&self) -> &'static str {
        "nodes"
    }
    fn tables(&self) -> &'static [TableSpec] {
        NODES_TABLES
    }
    fn handles(&self, event_type: &str) -> bool {
        NODE_STREAM_TYPES.contains(&event_type)
    }
    fn apply<'a>(
        &'a self,
        tx: &'a mut StoreTx,
        events: &'a [&'a RecordedEvent],
    ) -> BoxFuture<'a, Result<(), ProjectionError>> {
        Box::pin(async move {
            for e in events {
                match e.event_type.as_str() {
                    NodeJoined::EVENT_TYPE => {
                        let p: NodeJoined = e.decode()?;
                        let generation = to_i64(p.identity_generation, e, "nodes")?;
                        tx.execute(
                            "INSERT INTO nodes (node_id, tenant_id, site_id, pool_id, role, status, \
                             status_reason, identity_generation, attestor, node_key, token_id, \
                             hardware_key_sha256, product_uuid_sha256, macs_sha256, joined_at_us, \
                             updated_at_us, version, position) \
                             VALUES ($1, $2, $3, $4, $5, 'active', NULL, $6, $7, $8, $9, $10, $11, \
                             $12, $13, $13, $14, $15) \
                             ON CONFLICT (node_id) DO UPDATE SET status = 'active', \
                             status_reason = NULL, identity_generation = excluded.identity_generation, \
                             attestor = excluded.attestor, node_key = excluded.node_key, \
                             token_id = excluded.token_id, \
                             hardware_key_sha256 = excluded.hardware_key_sha256, \
                             product_uuid_sha256 = excluded.product_uuid_sha256, \
                             macs_sha256 = excluded.macs_sha256, updated_at_us = excluded.updated_at_us, \
                             version = excluded.version, position = excluded.position",
                            &[
                                p.node_id.into(),
                                p.tenant_id.into(),
                                p.site_id.into(),
                                p.pool_id.into(),
                                p.role.into(),
                                generation.into(),
                                p.attestor.into(),
                                p.node_key.into(),
                                p.token_id.into(),
                                bytes_or_null(&p.hardware_key_sha256),
                                bytes_or_null(&p.product_uuid_sha256),
                                bytes_or_null(&p.macs_sha256),
                                e.occurred_at_us.into(),
                                e.stream_version.into(),
                                e.position.into(),
                            ],
                        )
                        .await?;
                    }
                    NodeCertificateIssued::EVENT_TYPE => {
                        let p: NodeCertificateIssued = e.decode()?;
                        touch_node(tx, e, p.node_id, "", vec![]).await?;
                    }
                    RenewProofUsed::EVENT_TYPE => {
                        let p: RenewProofUsed = e.decode()?;
                        touch_node(tx, e, p.node_id, "", vec![]).await?;
                    }
                    NodeIdentityRevoked::EVENT_TYPE => {
                        let p: NodeIdentityRevoked = e.decode()?;
                        let generation = to_i64(p.new_identity_generation, e, "nodes")?;
                        touch_node(
                            tx,
                            e,
                            p.node_id,
                            "identity_generation = $5",
                            vec![generation.into()],
                        )
                        .await?;
                    }
                    NodeDeleted::EVENT_TYPE => {
                        let p: NodeDeleted = e.decode()?;
                        touch_node(
                            tx,
                            e,
                            p.node_id,
                            "status = 'deleted', status_reason = $5",
                            vec![p.reason.into()],
                        )
                        .await?;
                    }
                    NodeRetired::EVENT_TYPE => {
                        let p: NodeRetired = e.decode()?;
                        touch_node(
                            tx,
                            e,
                            p.node_id,
                            "status = 'retired', status_reason = $5",
                            vec![p.reason.into()],
                        )
                        .await?;
                    }
                    _ => {}
                }
            }
            Ok(())
        })
    }
}

// ---------------------------------------------------------------------------------------------
// node_certs

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
    ],
    order_by: "serial",
}];

/// Rows of certificates inserted per statement while a run of issues is applied.
const CERT_INSERT_CHUNK: usize = 200;

async fn insert_certs(
    tx: &mut StoreTx,
    rows: &mut Vec<(NodeCertificateIssued, i64)>,
) -> Result<(), ProjectionError> {
    for chunk in rows.chunks(CERT_INSERT_CHUNK) {
        let mut sql = String::from(
            "INSERT INTO node_certs (serial, node_id, identity_generation, der, not_before_us, \
             not_after_us, issued_position) VALUES ",
        );
        let mut args = Vec::with_capacity(chunk.len() * 7);
        for (i, (p, position)) in chunk.iter().enumerate() {
            let b = i * 7;
            if i > 0 {
                sql.push_str(", ");
            }
            sql.push_str(&format!(
                "(${}, ${}, ${}, ${}, ${}, ${}, ${})",
                b + 1,
                b + 2,
                b + 3,
                b + 4,
                b + 5,
                b + 6,
                b + 7
            ));
            args.push(SqlValue::Text(p.serial.clone()));
            args.push(SqlValue::Text(p.node_id.clone()));
            args.push(SqlValue::Int(
                i64::try_from(p.identity_generation).unwrap_or(i64::MAX),
            ));
            args.push(SqlValue::Bytes(p.der.clone()));
            args.push(SqlValue::Int(p.not_before_us));
            args.push(SqlValue::Int(p.not_after_us));
            args.push(SqlValue::Int(*position));
        }
        tx.execute(&sql, &args).await?;
    }
    rows.clear();
    Ok(())
}

async fn revoke_all(
    tx: &mut StoreTx,
    e: &RecordedEvent,
    node_id: String,
    reason: String,
) -> Result<(), ProjectionError> {
    tx.execute(
        "UPDATE node_certs SET revoked_at_us = $2, revoke_reason = $3, revoked_position = $4 \
         WHERE node_id = $1 AND revoked_at_us IS NULL",
        &[
            node_id.into(),
            e.occurred_at_us.into(),
            reason.into(),
            e.position.into(),
        ],
    )
    .await?;
    Ok(())
}

impl Projection for NodeCerts {
    fn name(&self) -> &'static str {
        "node_certs"
    }
    fn tables(&self) -> &'static [TableSpec] {
        NODE_CERTS_TABLES
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
                        revoke_all(tx, e, p.node_id, format!("identity revoked: {}", p.reason))
                            .await?;
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

// ---------------------------------------------------------------------------------------------
// attestation_uses

/// `attestation_uses`: single-use evidence (renew proofs here), pruned by explicit events.
pub struct AttestationUses;

const ATTESTATION_USES_TABLES: &[TableSpec] = &[TableSpec {
    name: "attestation_uses",
    columns: &[
        "attestor",
        "subject",
        "node_id",
        "used_at_us",
        "expires_at_us",
        "position",
    ],
    order_by: "attestor, subject",
}];

impl Projection for AttestationUses {
    fn name(&self) -> &'static str {
        "attestation_uses"
    }
    fn tables(&self) -> &'static [TableSpec] {
        ATTESTATION_USES_TABLES
    }
    fn handles(&self, event_type: &str) -> bool {
        event_type == RenewProofUsed::EVENT_TYPE || event_type == AttestationUsesPruned::EVENT_TYPE
    }
    fn apply<'a>(
        &'a self,
        tx: &'a mut StoreTx,
        events: &'a [&'a RecordedEvent],
    ) -> BoxFuture<'a, Result<(), ProjectionError>> {
        Box::pin(async move {
            for e in events {
                match e.event_type.as_str() {
                    RenewProofUsed::EVENT_TYPE => {
                        let p: RenewProofUsed = e.decode()?;
                        if p.subject.len() != 32 {
                            return Err(ProjectionError::Inapplicable {
                                projection: "attestation_uses",
                                position: e.position,
                                event_type: e.event_type.clone(),
                                why: "the subject is not 32 bytes".into(),
                            });
                        }
                        tx.execute(
                            "INSERT INTO attestation_uses (attestor, subject, node_id, used_at_us, \
                             expires_at_us, position) VALUES ($1, $2, $3, $4, $5, $6)",
                            &[
                                RENEW_POP_ATTESTOR.into(),
                                p.subject.into(),
                                text_or_null(&p.node_id),
                                e.occurred_at_us.into(),
                                p.expires_at_us.into(),
                                e.position.into(),
                            ],
                        )
                        .await?;
                    }
                    AttestationUsesPruned::EVENT_TYPE => {
                        let p: AttestationUsesPruned = e.decode()?;
                        for key in p.keys {
                            tx.execute(
                                "DELETE FROM attestation_uses WHERE attestor = $1 AND subject = $2",
                                &[key.attestor.into(), key.subject.into()],
                            )
                            .await?;
                        }
                    }
                    _ => {}
                }
            }
            Ok(())
        })
    }
}

// ---------------------------------------------------------------------------------------------
// refusal_counters

/// `refusal_counters`: per (kind, refusal, minute window), refusals recorded one by one and
/// refusals suppressed by the rate bound.
pub struct RefusalCounters;

const REFUSAL_COUNTERS_TABLES: &[TableSpec] = &[TableSpec {
    name: "refusal_counters",
    columns: &[
        "kind",
        "refusal",
        "window_start_us",
        "recorded",
        "suppressed",
        "position",
    ],
    order_by: "kind, refusal, window_start_us",
}];

impl Projection for RefusalCounters {
    fn name(&self) -> &'static str {
        "refusal_counters"
    }
    fn tables(&self) -> &'static [TableSpec] {
        REFUSAL_COUNTERS_TABLES
    }
    fn handles(&self, event_type: &str) -> bool {
        [
            JoinRefused::EVENT_TYPE,
            RenewRefused::EVENT_TYPE,
            RefusalsSuppressed::EVENT_TYPE,
        ]
        .contains(&event_type)
    }
    fn apply<'a>(
        &'a self,
        tx: &'a mut StoreTx,
        events: &'a [&'a RecordedEvent],
    ) -> BoxFuture<'a, Result<(), ProjectionError>> {
        Box::pin(async move {
            let max = greatest(tx);
            for e in events {
                let (kind, refusal, window, recorded, suppressed) = match e.event_type.as_str() {
                    JoinRefused::EVENT_TYPE => {
                        let p: JoinRefused = e.decode()?;
                        ("join".to_owned(), p.refusal, p.window_start_us, 1i64, 0i64)
                    }
                    RenewRefused::EVENT_TYPE => {
                        let p: RenewRefused = e.decode()?;
                        ("renew".to_owned(), p.refusal, p.window_start_us, 1, 0)
                    }
                    RefusalsSuppressed::EVENT_TYPE => {
                        let p: RefusalsSuppressed = e.decode()?;
                        let count = to_i64(p.count, e, "refusal_counters")?;
                        (p.kind, p.refusal, p.window_start_us, 0, count)
                    }
                    _ => continue,
                };
                tx.execute(
                    &format!(
                        "INSERT INTO refusal_counters (kind, refusal, window_start_us, recorded, \
                         suppressed, position) VALUES ($1, $2, $3, $4, $5, $6) \
                         ON CONFLICT (kind, refusal, window_start_us) DO UPDATE SET \
                         recorded = refusal_counters.recorded + excluded.recorded, \
                         suppressed = refusal_counters.suppressed + excluded.suppressed, \
                         position = {max}(refusal_counters.position, excluded.position)"
                    ),
                    &[
                        kind.into(),
                        refusal.into(),
                        window.into(),
                        recorded.into(),
                        suppressed.into(),
                        e.position.into(),
                    ],
                )
                .await?;
            }
            Ok(())
        })
    }
}

/// Every identity projection, in the order they are applied.
pub fn all() -> [&'static dyn Projection; 5] {
    [
        &JoinTokens,
        &Nodes,
        &NodeCerts,
        &AttestationUses,
        &RefusalCounters,
    ]
}

/// Every identity projection table, for digests.
pub fn tables() -> Vec<TableSpec> {
    all()
        .iter()
        .flat_map(|p| p.tables().iter().copied())
        .collect()
}
