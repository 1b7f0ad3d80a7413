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

use std::collections::{BTreeMap, HashMap};

use events::schema::{
    AttestationUsesPruned, JoinRefused, JoinTokenCreated, JoinTokenRevoked, JoinTokenUsed,
    NodeCertificateIssued, NodeDeleted, NodeIdentityRevoked, NodeJoined, NodeRetired,
    RefusalsSuppressed, RenewProofUsed, RenewRefused,
};
use events::store::{push_groups, Backend, DeferredWrite, LogTx, SqlValue, StoreTx};
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

/// Rows per multi-row statement (well under both backends' parameter limits).
const BULK_ROWS: usize = 200;

/// Queues `head (..), (..), .. tail` with `rows` as the parenthesised groups, `BULK_ROWS` per
/// statement, as deferred writes to `table` ([`LogTx::defer`]: on Postgres they go out with the
/// other projections' writes in one statement). With `each_row_once`, every statement must
/// change exactly as many rows as it has groups, and `each_row_once` says what a shortfall means.
async fn bulk(
    tx: &mut StoreTx,
    table: &str,
    head: &str,
    tail: &str,
    rows: Vec<Vec<SqlValue>>,
    each_row_once: Option<&str>,
) -> Result<(), ProjectionError> {
    let mut rows = rows.into_iter().peekable();
    while rows.peek().is_some() {
        let mut sql = String::from(head);
        let mut args: Vec<SqlValue> = Vec::new();
        let chunk: Vec<Vec<SqlValue>> = rows.by_ref().take(BULK_ROWS).collect();
        let groups = chunk.len() as u64;
        push_groups(&mut sql, &mut args, chunk);
        sql.push_str(tail);
        let mut write = DeferredWrite::new(table, sql, args);
        if let Some(meaning) = each_row_once {
            write = write.expecting(groups, meaning.to_owned());
        }
        tx.defer(write).await?;
    }
    Ok(())
}

fn opt_int(v: Option<i64>) -> SqlValue {
    v.map_or(SqlValue::NullInt, SqlValue::Int)
}

fn opt_text(v: Option<String>) -> SqlValue {
    v.map_or(SqlValue::NullText, SqlValue::Text)
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
            // A run of events becomes three statements (per BULK_ROWS rows): the tokens created
            // in it (with every later change of theirs folded in), their uses, and one update per
            // older token carrying its last state. Each token's row ends as the events in order
            // would leave it.
            let mut created: Vec<NewTokenRow> = Vec::new();
            let mut uses: Vec<Vec<SqlValue>> = Vec::new();
            let mut created_at: HashMap<String, usize> = HashMap::new();
            let mut updates: Vec<(String, TokenUpdate)> = Vec::new();
            let mut update_at: HashMap<String, usize> = HashMap::new();
            for e in events {
                match e.event_type.as_str() {
                    JoinTokenCreated::EVENT_TYPE => {
                        let p: JoinTokenCreated = e.decode()?;
                        created_at.insert(p.token_id.clone(), created.len());
                        created.push(NewTokenRow {
                            uses_left: i64::from(p.uses),
                            created_at_us: e.occurred_at_us,
                            revoked: None,
                            version: e.stream_version,
                            position: e.position,
                            p,
                        });
                    }
                    JoinTokenRevoked::EVENT_TYPE => {
                        let p: JoinTokenRevoked = e.decode()?;
                        let revoked = Some((e.occurred_at_us, p.reason));
                        match created_at
                            .get(&p.token_id)
                            .and_then(|&i| created.get_mut(i))
                        {
                            Some(row) => {
                                row.revoked = revoked;
                                row.version = e.stream_version;
                                row.position = e.position;
                            }
                            None => {
                                let u = token_update(&mut updates, &mut update_at, p.token_id);
                                u.revoked = revoked;
                                u.version = e.stream_version;
                                u.position = e.position;
                            }
                        }
                    }
                    JoinTokenUsed::EVENT_TYPE => {
                        let p: JoinTokenUsed = e.decode()?;
                        uses.push(vec![
                            p.token_id.clone().into(),
                            i64::from(p.use_number).into(),
                            p.node_id.into(),
                            e.occurred_at_us.into(),
                            e.position.into(),
                        ]);
                        let left = i64::from(p.uses_left);
                        match created_at
                            .get(&p.token_id)
                            .and_then(|&i| created.get_mut(i))
                        {
                            Some(row) => {
                                row.uses_left = left;
                                row.version = e.stream_version;
                                row.position = e.position;
                            }
                            None => {
                                let u = token_update(&mut updates, &mut update_at, p.token_id);
                                u.uses_left = Some(left);
                                u.version = e.stream_version;
                                u.position = e.position;
                            }
                        }
                    }
                    _ => {}
                }
            }
            let rows = created
                .into_iter()
                .map(|r| {
                    let (revoked_at, reason) = match r.revoked {
                        Some((at, reason)) => (Some(at), Some(reason)),
                        None => (None, None),
                    };
                    vec![
                        r.p.token_id.into(),
                        r.p.tenant_id.into(),
                        r.p.site_id.into(),
                        r.p.pool_id.into(),
                        r.p.role.into(),
                        r.p.secret_sha256.into(),
                        i64::from(r.p.uses).into(),
                        r.uses_left.into(),
                        r.p.expires_at_us.into(),
                        text_or_null(&r.p.expect_product_uuid),
                        text_or_null(&r.p.expect_mac),
                        r.p.allow_reclaim.into(),
                        r.created_at_us.into(),
                        opt_int(revoked_at),
                        opt_text(reason),
                        r.version.into(),
                        r.position.into(),
                    ]
                })
                .collect();
            bulk(
                tx,
                "join_tokens",
                "INSERT INTO join_tokens (token_id, tenant_id, site_id, pool_id, role, \
                 secret_sha256, uses_total, uses_left, expires_at_us, expect_product_uuid, \
                 expect_mac, allow_reclaim, created_at_us, revoked_at_us, revoke_reason, version, \
                 position) VALUES ",
                "",
                rows,
                None,
            )
            .await?;
            let rows: Vec<Vec<SqlValue>> = updates
                .into_iter()
                .map(|(id, u)| {
                    let (revoked_at, reason) = match u.revoked {
                        Some((at, reason)) => (Some(at), Some(reason)),
                        None => (None, None),
                    };
                    vec![
                        id.into(),
                        opt_int(u.uses_left),
                        opt_int(revoked_at),
                        opt_text(reason),
                        u.version.into(),
                        u.position.into(),
                    ]
                })
                .collect();
            // A join's token use and the token's new state go out, on Postgres, in the
            // statement that carries the join's other projection writes (deferred writes).
            tx.insert_rows(
                "join_token_uses",
                &[
                    "token_id",
                    "use_number",
                    "node_id",
                    "used_at_us",
                    "position",
                ],
                &uses,
            )
            .await?;
            bulk(
                tx,
                "join_tokens",
                TOKEN_UPDATE_HEAD,
                TOKEN_UPDATE_TAIL,
                rows,
                None,
            )
            .await?;
            Ok(())
        })
    }
}

const TOKEN_UPDATE_HEAD: &str =
    "WITH v (token_id, uses_left, revoked_at_us, revoke_reason, version, position) AS (VALUES ";
const TOKEN_UPDATE_TAIL: &str = ") UPDATE join_tokens SET \
     uses_left = COALESCE(v.uses_left, join_tokens.uses_left), \
     revoked_at_us = COALESCE(v.revoked_at_us, join_tokens.revoked_at_us), \
     revoke_reason = CASE WHEN v.revoked_at_us IS NULL \
     THEN join_tokens.revoke_reason ELSE v.revoke_reason END, \
     version = v.version, position = v.position \
     FROM v WHERE join_tokens.token_id = v.token_id";

/// A token created in the run being applied, with its later changes folded in.
struct NewTokenRow {
    p: JoinTokenCreated,
    uses_left: i64,
    created_at_us: i64,
    revoked: Option<(i64, String)>,
    version: i64,
    position: i64,
}

/// The last state of a token created before the run.
#[derive(Default)]
struct TokenUpdate {
    uses_left: Option<i64>,
    revoked: Option<(i64, String)>,
    version: i64,
    position: i64,
}

fn token_update<'u>(
    updates: &'u mut Vec<(String, TokenUpdate)>,
    index: &mut HashMap<String, usize>,
    token_id: String,
) -> &'u mut TokenUpdate {
    let i = *index.entry(token_id.clone()).or_insert_with(|| {
        updates.push((token_id, TokenUpdate::default()));
        updates.len() - 1
    });
    &mut updates[i].1
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

/// A node joined in the run being applied, with its later changes folded in: one row of the
/// `INSERT … ON CONFLICT` that writes it.
struct JoinedRow {
    node_id: String,
    tenant_id: String,
    site_id: String,
    pool_id: String,
    role: String,
    status: &'static str,
    status_reason: Option<String>,
    identity_generation: i64,
    attestor: String,
    node_key: String,
    token_id: String,
    hardware_key_sha256: Vec<u8>,
    product_uuid_sha256: Vec<u8>,
    macs_sha256: Vec<u8>,
    joined_at_us: i64,
    updated_at_us: i64,
    version: i64,
    position: i64,
}

/// The last state of a node that joined before the run.
struct NodeUpdate {
    updated_at_us: i64,
    version: i64,
    position: i64,
    identity_generation: Option<i64>,
    status: Option<(&'static str, String)>,
    first_position: i64,
}

/// What a node event changes besides `updated_at_us`, `version` and `position`.
enum Touch {
    Plain,
    Generation(i64),
    Status(&'static str, String),
}

#[derive(Default)]
struct NodeBatch {
    joined: Vec<JoinedRow>,
    joined_at: HashMap<String, usize>,
    updates: Vec<(String, NodeUpdate)>,
    update_at: HashMap<String, usize>,
    status_changes: bool,
}

impl NodeBatch {
    fn is_empty(&self) -> bool {
        self.joined.is_empty() && self.updates.is_empty()
    }

    fn touch(&mut self, e: &RecordedEvent, node_id: String, touch: Touch) {
        if let Some(row) = self
            .joined_at
            .get(&node_id)
            .and_then(|&i| self.joined.get_mut(i))
        {
            row.updated_at_us = e.occurred_at_us;
            row.version = e.stream_version;
            row.position = e.position;
            match touch {
                Touch::Plain => {}
                Touch::Generation(g) => row.identity_generation = g,
                Touch::Status(status, reason) => {
                    row.status = status;
                    row.status_reason = Some(reason);
                }
            }
            return;
        }
        let updates = &mut self.updates;
        let i = *self.update_at.entry(node_id.clone()).or_insert_with(|| {
            updates.push((
                node_id,
                NodeUpdate {
                    updated_at_us: 0,
                    version: 0,
                    position: 0,
                    identity_generation: None,
                    status: None,
                    first_position: e.position,
                },
            ));
            updates.len() - 1
        });
        let u = &mut self.updates[i].1;
        u.updated_at_us = e.occurred_at_us;
        u.version = e.stream_version;
        u.position = e.position;
        match touch {
            Touch::Plain => {}
            Touch::Generation(g) => u.identity_generation = Some(g),
            Touch::Status(status, reason) => {
                u.status = Some((status, reason));
                self.status_changes = true;
            }
        }
    }

    async fn flush(&mut self, tx: &mut StoreTx) -> Result<(), ProjectionError> {
        let batch = std::mem::take(self);
        let rows = batch
            .joined
            .into_iter()
            .map(|r| {
                vec![
                    r.node_id.into(),
                    r.tenant_id.into(),
                    r.site_id.into(),
                    r.pool_id.into(),
                    r.role.into(),
                    r.status.into(),
                    opt_text(r.status_reason),
                    r.identity_generation.into(),
                    r.attestor.into(),
                    r.node_key.into(),
                    r.token_id.into(),
                    bytes_or_null(&r.hardware_key_sha256),
                    bytes_or_null(&r.product_uuid_sha256),
                    bytes_or_null(&r.macs_sha256),
                    r.joined_at_us.into(),
                    r.updated_at_us.into(),
                    r.version.into(),
                    r.position.into(),
                ]
            })
            .collect();
        // A re-join (reclaim) keeps the node's tenant, site, pool, role and join time.
        bulk(
            tx,
            "nodes",
            "INSERT INTO nodes (node_id, tenant_id, site_id, pool_id, role, status, \
             status_reason, identity_generation, attestor, node_key, token_id, \
             hardware_key_sha256, product_uuid_sha256, macs_sha256, joined_at_us, updated_at_us, \
             version, position) VALUES ",
            " ON CONFLICT (node_id) DO UPDATE SET status = excluded.status, \
             status_reason = excluded.status_reason, \
             identity_generation = excluded.identity_generation, attestor = excluded.attestor, \
             node_key = excluded.node_key, token_id = excluded.token_id, \
             hardware_key_sha256 = excluded.hardware_key_sha256, \
             product_uuid_sha256 = excluded.product_uuid_sha256, \
             macs_sha256 = excluded.macs_sha256, updated_at_us = excluded.updated_at_us, \
             version = excluded.version, position = excluded.position",
            rows,
            None,
        )
        .await?;
        let first = batch.updates.iter().map(|(_, u)| u.first_position).min();
        let rows = batch
            .updates
            .into_iter()
            .map(|(id, u)| {
                let (status, reason) = match u.status {
                    Some((s, r)) => (Some(s.to_owned()), Some(r)),
                    None => (None, None),
                };
                vec![
                    id.into(),
                    u.updated_at_us.into(),
                    u.version.into(),
                    u.position.into(),
                    opt_int(u.identity_generation),
                    opt_text(status),
                    opt_text(reason),
                ]
            })
            .collect();
        let meaning = format!(
            "nodes changed from position {} on have no row (no node.joined before them)",
            first.unwrap_or(0)
        );
        bulk(
            tx,
            "nodes",
            "WITH v (node_id, updated_at_us, version, position, identity_generation, status, \
             status_reason) AS (VALUES ",
            ") UPDATE nodes SET updated_at_us = v.updated_at_us, version = v.version, \
             position = v.position, \
             identity_generation = COALESCE(v.identity_generation, nodes.identity_generation), \
             status = COALESCE(v.status, nodes.status), \
             status_reason = CASE WHEN v.status IS NULL THEN nodes.status_reason \
             ELSE v.status_reason END \
             FROM v WHERE nodes.node_id = v.node_id",
            rows,
            Some(&meaning),
        )
        .await
    }
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
            // Joins become multi-row upserts with the node's later events folded in; events of
            // older nodes become one update per node with its last state. A join flushes first
            // when the order of rows matters: the node already has a pending update, or a node
            // left the active set (its hardware key may be the one now joining).
            let mut batch = NodeBatch::default();
            for e in events {
                match e.event_type.as_str() {
                    NodeJoined::EVENT_TYPE => {
                        let p: NodeJoined = e.decode()?;
                        let generation = to_i64(p.identity_generation, e, "nodes")?;
                        if batch.status_changes || batch.update_at.contains_key(&p.node_id) {
                            batch.flush(tx).await?;
                        }
                        let existing = batch
                            .joined_at
                            .get(&p.node_id)
                            .and_then(|&i| batch.joined.get_mut(i));
                        match existing {
                            Some(row) => {
                                // The same upsert, applied to the pending row.
                                row.status = "active";
                                row.status_reason = None;
                                row.identity_generation = generation;
                                row.attestor = p.attestor;
                                row.node_key = p.node_key;
                                row.token_id = p.token_id;
                                row.hardware_key_sha256 = p.hardware_key_sha256;
                                row.product_uuid_sha256 = p.product_uuid_sha256;
                                row.macs_sha256 = p.macs_sha256;
                                row.updated_at_us = e.occurred_at_us;
                                row.version = e.stream_version;
                                row.position = e.position;
                            }
                            None => {
                                batch
                                    .joined_at
                                    .insert(p.node_id.clone(), batch.joined.len());
                                batch.joined.push(JoinedRow {
                                    node_id: p.node_id,
                                    tenant_id: p.tenant_id,
                                    site_id: p.site_id,
                                    pool_id: p.pool_id,
                                    role: p.role,
                                    status: "active",
                                    status_reason: None,
                                    identity_generation: generation,
                                    attestor: p.attestor,
                                    node_key: p.node_key,
                                    token_id: p.token_id,
                                    hardware_key_sha256: p.hardware_key_sha256,
                                    product_uuid_sha256: p.product_uuid_sha256,
                                    macs_sha256: p.macs_sha256,
                                    joined_at_us: e.occurred_at_us,
                                    updated_at_us: e.occurred_at_us,
                                    version: e.stream_version,
                                    position: e.position,
                                });
                            }
                        }
                    }
                    NodeCertificateIssued::EVENT_TYPE => {
                        let p: NodeCertificateIssued = e.decode()?;
                        batch.touch(e, p.node_id, Touch::Plain);
                    }
                    RenewProofUsed::EVENT_TYPE => {
                        let p: RenewProofUsed = e.decode()?;
                        batch.touch(e, p.node_id, Touch::Plain);
                    }
                    NodeIdentityRevoked::EVENT_TYPE => {
                        let p: NodeIdentityRevoked = e.decode()?;
                        let generation = to_i64(p.new_identity_generation, e, "nodes")?;
                        batch.touch(e, p.node_id, Touch::Generation(generation));
                    }
                    NodeDeleted::EVENT_TYPE => {
                        let p: NodeDeleted = e.decode()?;
                        batch.touch(e, p.node_id, Touch::Status("deleted", p.reason));
                    }
                    NodeRetired::EVENT_TYPE => {
                        let p: NodeRetired = e.decode()?;
                        batch.touch(e, p.node_id, Touch::Status("retired", p.reason));
                    }
                    _ => {}
                }
            }
            if !batch.is_empty() {
                batch.flush(tx).await?;
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

/// The columns a certificate's issue writes, in the order of [`insert_certs`]' rows.
const CERT_COLUMNS: &[&str] = &[
    "serial",
    "node_id",
    "identity_generation",
    "der",
    "not_before_us",
    "not_after_us",
    "issued_position",
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
            ]
        })
        .collect();
    tx.insert_rows("node_certs", CERT_COLUMNS, &values).await?;
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
            // Uses go in multi-row inserts; a prune flushes them first (it may name one of
            // them), then deletes its keys in multi-row statements.
            let mut pending: Vec<Vec<SqlValue>> = Vec::new();
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
                        pending.push(vec![
                            RENEW_POP_ATTESTOR.into(),
                            p.subject.into(),
                            text_or_null(&p.node_id),
                            e.occurred_at_us.into(),
                            p.expires_at_us.into(),
                            e.position.into(),
                        ]);
                    }
                    AttestationUsesPruned::EVENT_TYPE => {
                        let p: AttestationUsesPruned = e.decode()?;
                        insert_uses(tx, std::mem::take(&mut pending)).await?;
                        let keys = p
                            .keys
                            .into_iter()
                            .map(|k| vec![k.attestor.into(), k.subject.into()])
                            .collect();
                        bulk(
                            tx,
                            "attestation_uses",
                            "DELETE FROM attestation_uses WHERE (attestor, subject) IN (VALUES ",
                            ")",
                            keys,
                            None,
                        )
                        .await?;
                    }
                    _ => {}
                }
            }
            insert_uses(tx, pending).await
        })
    }
}

async fn insert_uses(tx: &mut StoreTx, rows: Vec<Vec<SqlValue>>) -> Result<(), ProjectionError> {
    tx.insert_rows(
        "attestation_uses",
        &[
            "attestor",
            "subject",
            "node_id",
            "used_at_us",
            "expires_at_us",
            "position",
        ],
        &rows,
    )
    .await?;
    Ok(())
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
            // Counts add up and the position is a maximum, so a run folds into one upsert per
            // (kind, refusal, window) with the same result as applying its events one by one.
            let max = greatest(tx);
            let mut sums: BTreeMap<(String, String, i64), (i64, i64, i64)> = BTreeMap::new();
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
                let sum = sums
                    .entry((kind, refusal, window))
                    .or_insert((0, 0, e.position));
                sum.0 = sum.0.saturating_add(recorded);
                sum.1 = sum.1.saturating_add(suppressed);
                sum.2 = sum.2.max(e.position);
            }
            let rows = sums
                .into_iter()
                .map(
                    |((kind, refusal, window), (recorded, suppressed, position))| {
                        vec![
                            kind.into(),
                            refusal.into(),
                            window.into(),
                            recorded.into(),
                            suppressed.into(),
                            position.into(),
                        ]
                    },
                )
                .collect();
            bulk(
                tx,
                "refusal_counters",
                "INSERT INTO refusal_counters (kind, refusal, window_start_us, recorded, \
                 suppressed, position) VALUES ",
                &format!(
                    " ON CONFLICT (kind, refusal, window_start_us) DO UPDATE SET \
                     recorded = refusal_counters.recorded + excluded.recorded, \
                     suppressed = refusal_counters.suppressed + excluded.suppressed, \
                     position = {max}(refusal_counters.position, excluded.position)"
                ),
                rows,
                None,
            )
            .await?;
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
