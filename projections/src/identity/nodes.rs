//! The `nodes` projection. A run of events becomes multi-row upserts for the nodes that joined
//! in it, with their later events folded in, and one update per older node carrying its last
//! state; that update must find every node it names.

use std::collections::HashMap;

use events::schema::{
    EvidenceUsed, NodeBound, NodeCertificateIssued, NodeDeleted, NodeIdentityRevoked, NodeJoined,
    NodeNamesSet, NodeRetired, NodeRuntimeReported, RenewProofUsed, SelfReport,
};
use events::store::{DeferredWrite, LogTx, SqlValue, StoreTx};
use events::{EventPayload, RecordedEvent};

use super::writes::{bulk, bytes_or_null, opt_int, opt_text, text_or_null, to_i64};
use crate::{BoxFuture, Projection, ProjectionError, TableSpec};

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
        "node_key_uri",
        "allowed_kinds",
        "join_csr_sha256",
        "hostname",
        "product_serial",
        "board_serial",
        "chassis_serial",
        "gpu_uuids",
        "bcd_version",
        "last_boot_id",
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
    EvidenceUsed::EVENT_TYPE,
    NodeBound::EVENT_TYPE,
    NodeRuntimeReported::EVENT_TYPE,
    NodeNamesSet::EVENT_TYPE,
];

/// `node.joined`'s allowed kinds as stored: comma-joined, NULL for none (every kind the role
/// allows).
fn allowed_kinds(kinds: &[String]) -> Option<String> {
    (!kinds.is_empty()).then(|| kinds.join(","))
}

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
    node_key_uri: String,
    allowed_kinds: Option<String>,
    join_csr_sha256: Vec<u8>,
    report: SelfReport,
    joined_at_us: i64,
    updated_at_us: i64,
    version: i64,
    position: i64,
}

impl JoinedRow {
    /// The row `node.joined` (`p`, recorded as `e`) writes.
    fn joined(p: NodeJoined, generation: i64, e: &RecordedEvent) -> JoinedRow {
        JoinedRow {
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
            node_key_uri: p.node_key_uri,
            allowed_kinds: allowed_kinds(&p.allowed_kinds),
            join_csr_sha256: p.csr_sha256,
            report: p.report.map(|r| *r).unwrap_or_default(),
            joined_at_us: e.occurred_at_us,
            updated_at_us: e.occurred_at_us,
            version: e.stream_version,
            position: e.position,
        }
    }

    /// The upsert's conflict rule applied to a row pending in the run: a re-join (reclaim)
    /// keeps the node's tenant, site, pool, role and join time.
    fn rejoined(&mut self, next: JoinedRow) {
        let kept = std::mem::replace(self, next);
        self.tenant_id = kept.tenant_id;
        self.site_id = kept.site_id;
        self.pool_id = kept.pool_id;
        self.role = kept.role;
        self.joined_at_us = kept.joined_at_us;
    }
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
                    text_or_null(&r.node_key_uri),
                    opt_text(r.allowed_kinds),
                    bytes_or_null(&r.join_csr_sha256),
                    text_or_null(&r.report.hostname),
                    text_or_null(&r.report.product_serial),
                    text_or_null(&r.report.board_serial),
                    text_or_null(&r.report.chassis_serial),
                    text_or_null(&r.report.gpu_uuids.join(",")),
                    text_or_null(&r.report.agent_version),
                    text_or_null(&r.report.boot_id),
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
             hardware_key_sha256, product_uuid_sha256, macs_sha256, node_key_uri, allowed_kinds, \
             join_csr_sha256, hostname, product_serial, board_serial, chassis_serial, gpu_uuids, \
             bcd_version, last_boot_id, joined_at_us, updated_at_us, version, position) VALUES ",
            " ON CONFLICT (node_id) DO UPDATE SET status = excluded.status, \
             status_reason = excluded.status_reason, \
             identity_generation = excluded.identity_generation, attestor = excluded.attestor, \
             node_key = excluded.node_key, token_id = excluded.token_id, \
             hardware_key_sha256 = excluded.hardware_key_sha256, \
             product_uuid_sha256 = excluded.product_uuid_sha256, \
             macs_sha256 = excluded.macs_sha256, node_key_uri = excluded.node_key_uri, \
             allowed_kinds = excluded.allowed_kinds, \
             join_csr_sha256 = excluded.join_csr_sha256, hostname = excluded.hostname, \
             product_serial = excluded.product_serial, board_serial = excluded.board_serial, \
             chassis_serial = excluded.chassis_serial, gpu_uuids = excluded.gpu_uuids, \
             bcd_version = excluded.bcd_version, last_boot_id = excluded.last_boot_id, \
             updated_at_us = excluded.updated_at_us, \
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
    fn only_writes(&self) -> bool {
        true
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
                        let row = JoinedRow::joined(p, generation, e);
                        match batch.joined_at.get(&row.node_id) {
                            Some(&i) => batch.joined[i].rejoined(row),
                            None => {
                                batch
                                    .joined_at
                                    .insert(row.node_id.clone(), batch.joined.len());
                                batch.joined.push(row);
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
                    // On the node's stream too: the row's version follows them.
                    EvidenceUsed::EVENT_TYPE => {
                        let p: EvidenceUsed = e.decode()?;
                        batch.touch(e, p.node_id, Touch::Plain);
                    }
                    NodeBound::EVENT_TYPE => {
                        let p: NodeBound = e.decode()?;
                        batch.touch(e, p.node_id, Touch::Plain);
                    }
                    NodeNamesSet::EVENT_TYPE => {
                        let p: NodeNamesSet = e.decode()?;
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
                    // On its own stream (`node-runtime/<id>`): the row's version and position
                    // stay the node stream's. Rare (a change of version or boot), so the pending
                    // rows are written first and the update follows in log order.
                    NodeRuntimeReported::EVENT_TYPE => {
                        let p: NodeRuntimeReported = e.decode()?;
                        if !batch.is_empty() {
                            batch.flush(tx).await?;
                        }
                        runtime_reported(tx, &p).await?;
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

/// `node.runtime.reported`: the node's bcd version and boot id as its session reported them;
/// an empty field was not reported and keeps the row's value.
async fn runtime_reported(
    tx: &mut StoreTx,
    p: &NodeRuntimeReported,
) -> Result<(), ProjectionError> {
    let mut sets = Vec::new();
    let mut args: Vec<SqlValue> = vec![p.node_id.clone().into()];
    for (column, value) in [
        ("bcd_version", &p.agent_version),
        ("last_boot_id", &p.boot_id),
    ] {
        if !value.is_empty() {
            args.push(value.clone().into());
            sets.push(format!("{column} = ${}", args.len()));
        }
    }
    if sets.is_empty() {
        return Ok(());
    }
    let sql = format!("UPDATE nodes SET {} WHERE node_id = $1", sets.join(", "));
    tx.defer(DeferredWrite::new("nodes", sql, args)).await?;
    Ok(())
}
