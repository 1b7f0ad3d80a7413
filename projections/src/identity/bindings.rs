//! The `node_bindings` projection: subjects an attestor proved, bound to one node for good
//! (`node.bound`); `node.deleted` and `node.retired` drop the node's bindings (spec 001 "What a
//! result means"). The primary key on the subject is the race guard: two joins binding one
//! subject to two nodes cannot both commit. `read::binding` is the admission step's check.

use events::schema::{NodeBound, NodeDeleted, NodeRetired};
use events::store::{LogTx, SqlValue, StoreTx};
use events::{EventPayload, RecordedEvent};

use super::writes::bulk;
use crate::{BoxFuture, Projection, ProjectionError, TableSpec};

/// `node_bindings`: one row per bound subject.
pub struct NodeBindings;

const NODE_BINDINGS_TABLES: &[TableSpec] = &[TableSpec {
    name: "node_bindings",
    columns: &["subject", "attestor", "node_id", "bound_at_us", "position"],
    order_by: "subject",
}];

impl Projection for NodeBindings {
    fn name(&self) -> &'static str {
        "node_bindings"
    }
    fn tables(&self) -> &'static [TableSpec] {
        NODE_BINDINGS_TABLES
    }
    fn only_writes(&self) -> bool {
        true
    }
    fn handles(&self, event_type: &str) -> bool {
        event_type == NodeBound::EVENT_TYPE
            || event_type == NodeDeleted::EVENT_TYPE
            || event_type == NodeRetired::EVENT_TYPE
    }
    fn apply<'a>(
        &'a self,
        tx: &'a mut StoreTx,
        events: &'a [&'a RecordedEvent],
    ) -> BoxFuture<'a, Result<(), ProjectionError>> {
        Box::pin(async move {
            // Bindings go in multi-row inserts; the end of a node flushes them first (it may
            // drop one of them), then deletes the node's rows.
            let mut pending: Vec<Vec<SqlValue>> = Vec::new();
            for e in events {
                let ended = match e.event_type.as_str() {
                    NodeBound::EVENT_TYPE => {
                        let p: NodeBound = e.decode()?;
                        if p.subject.len() != 32 {
                            return Err(ProjectionError::Inapplicable {
                                projection: "node_bindings",
                                position: e.position,
                                event_type: e.event_type.clone(),
                                why: "the subject is not 32 bytes".into(),
                            });
                        }
                        pending.push(vec![
                            p.subject.into(),
                            p.attestor.into(),
                            p.node_id.into(),
                            e.occurred_at_us.into(),
                            e.position.into(),
                        ]);
                        None
                    }
                    NodeDeleted::EVENT_TYPE => Some(e.decode::<NodeDeleted>()?.node_id),
                    NodeRetired::EVENT_TYPE => Some(e.decode::<NodeRetired>()?.node_id),
                    _ => None,
                };
                if let Some(node_id) = ended {
                    insert_bindings(tx, std::mem::take(&mut pending)).await?;
                    bulk(
                        tx,
                        "node_bindings",
                        "DELETE FROM node_bindings WHERE node_id IN (VALUES ",
                        ")",
                        vec![vec![node_id.into()]],
                        None,
                    )
                    .await?;
                }
            }
            insert_bindings(tx, pending).await
        })
    }
}

async fn insert_bindings(
    tx: &mut StoreTx,
    rows: Vec<Vec<SqlValue>>,
) -> Result<(), ProjectionError> {
    let table = &NODE_BINDINGS_TABLES[0];
    tx.insert_rows(table.name, table.columns, rows).await?;
    Ok(())
}
