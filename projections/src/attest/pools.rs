//! `pools`: a pool's owner, description and attestor policy, from its stream's events.

use std::collections::HashMap;

use events::schema::{PoolCreated, PoolUpdated};
use events::store::{LogTx, SqlValue, StoreTx};
use events::{EventPayload, RecordedEvent};

use super::writes::{checked_updates, inapplicable};
use crate::{BoxFuture, Projection, ProjectionError, TableSpec};

/// `pools`.
pub struct Pools;

const POOLS_TABLES: &[TableSpec] = &[TableSpec {
    name: "pools",
    columns: &[
        "pool_id",
        "tenant_id",
        "description",
        "join_attestors",
        "created_at_us",
        "updated_at_us",
        "version",
        "position",
    ],
    order_by: "pool_id",
}];

/// The stored policy: the ids comma-separated in the order given, `NULL` for "any attestor".
fn attestors_column(ids: &[String]) -> SqlValue {
    if ids.is_empty() {
        SqlValue::NullText
    } else {
        SqlValue::Text(ids.join(","))
    }
}

/// A pool's row as the run leaves it.
struct PoolRow {
    pool_id: String,
    tenant_id: String,
    description: String,
    join_attestors: SqlValue,
    created_at_us: i64,
    updated_at_us: i64,
    version: i64,
    position: i64,
}

/// The last update of a pool created before the run (an update replaces the policy whole).
struct PoolChange {
    pool_id: String,
    description: String,
    join_attestors: SqlValue,
    updated_at_us: i64,
    version: i64,
    position: i64,
}

impl Projection for Pools {
    fn name(&self) -> &'static str {
        "pools"
    }
    fn tables(&self) -> &'static [TableSpec] {
        POOLS_TABLES
    }
    fn only_writes(&self) -> bool {
        true
    }
    fn handles(&self, event_type: &str) -> bool {
        event_type == PoolCreated::EVENT_TYPE || event_type == PoolUpdated::EVENT_TYPE
    }
    fn apply<'a>(
        &'a self,
        tx: &'a mut StoreTx,
        events: &'a [&'a RecordedEvent],
    ) -> BoxFuture<'a, Result<(), ProjectionError>> {
        Box::pin(async move {
            let mut created: Vec<PoolRow> = Vec::new();
            let mut created_at: HashMap<String, usize> = HashMap::new();
            let mut changes: Vec<PoolChange> = Vec::new();
            let mut change_at: HashMap<String, usize> = HashMap::new();
            for e in events {
                match e.event_type.as_str() {
                    PoolCreated::EVENT_TYPE => {
                        let p: PoolCreated = e.decode()?;
                        if created_at.contains_key(&p.pool_id) || change_at.contains_key(&p.pool_id)
                        {
                            return Err(inapplicable("pools", e, "the pool was already created"));
                        }
                        created_at.insert(p.pool_id.clone(), created.len());
                        created.push(PoolRow {
                            join_attestors: attestors_column(&p.join_attestors),
                            pool_id: p.pool_id,
                            tenant_id: p.tenant_id,
                            description: p.description,
                            created_at_us: e.occurred_at_us,
                            updated_at_us: e.occurred_at_us,
                            version: e.stream_version,
                            position: e.position,
                        });
                    }
                    PoolUpdated::EVENT_TYPE => {
                        let p: PoolUpdated = e.decode()?;
                        let attestors = attestors_column(&p.join_attestors);
                        if let Some(row) =
                            created_at.get(&p.pool_id).and_then(|&i| created.get_mut(i))
                        {
                            row.description = p.description;
                            row.join_attestors = attestors;
                            row.updated_at_us = e.occurred_at_us;
                            row.version = e.stream_version;
                            row.position = e.position;
                            continue;
                        }
                        let change = PoolChange {
                            pool_id: p.pool_id.clone(),
                            description: p.description,
                            join_attestors: attestors,
                            updated_at_us: e.occurred_at_us,
                            version: e.stream_version,
                            position: e.position,
                        };
                        match change_at.get(&p.pool_id) {
                            Some(&i) => changes[i] = change,
                            None => {
                                change_at.insert(p.pool_id, changes.len());
                                changes.push(change);
                            }
                        }
                    }
                    _ => {}
                }
            }
            let rows: Vec<Vec<SqlValue>> = created
                .into_iter()
                .map(|r| {
                    vec![
                        r.pool_id.into(),
                        r.tenant_id.into(),
                        r.description.into(),
                        r.join_attestors,
                        r.created_at_us.into(),
                        r.updated_at_us.into(),
                        r.version.into(),
                        r.position.into(),
                    ]
                })
                .collect();
            let table = &POOLS_TABLES[0];
            tx.insert_rows(table.name, table.columns, rows).await?;
            let rows: Vec<Vec<SqlValue>> = changes
                .into_iter()
                .map(|c| {
                    vec![
                        c.pool_id.into(),
                        c.description.into(),
                        c.join_attestors,
                        c.updated_at_us.into(),
                        c.version.into(),
                        c.position.into(),
                    ]
                })
                .collect();
            checked_updates(
                tx,
                "pools",
                POOL_UPDATE_HEAD,
                POOL_UPDATE_TAIL,
                rows,
                "pools updated without a pool.created before them",
            )
            .await
        })
    }
}

const POOL_UPDATE_HEAD: &str = "WITH v (pool_id, description, join_attestors, updated_at_us, \
     version, position) AS (VALUES ";
const POOL_UPDATE_TAIL: &str = ") UPDATE pools SET description = v.description, \
     join_attestors = v.join_attestors, updated_at_us = v.updated_at_us, version = v.version, \
     position = v.position FROM v WHERE pools.pool_id = v.pool_id";
