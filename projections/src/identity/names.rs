//! `node_names` (issue 41 item 1, migration 0022): the DNS names and IP addresses a node may
//! serve TLS for, from the node streams' `node.names.set` (each carries the node's whole set and
//! replaces its rows); `node.retired` and `node.deleted` drop the node's rows (it serves nothing
//! any more, and its names are free for another node). And the reads of it.

use events::schema::{NodeDeleted, NodeNamesSet, NodeRetired};
use events::store::{Backend, DeferredWrite, LogTx, SqlValue, StoreError, StoreTx};
use events::{EventPayload, RecordedEvent};

use crate::{BoxFuture, Projection, ProjectionError, TableSpec};

/// `node_names`.
pub struct NodeNamesTable;

const NAME: &str = "node_names";

const TABLES: &[TableSpec] = &[TableSpec {
    name: NAME,
    columns: &["node_id", "tenant_id", "kind", "name", "position"],
    order_by: "node_id, kind, name",
}];

const DROP_NODE: &str = "DELETE FROM node_names WHERE node_id = $1";

fn drop_node(node_id: String) -> DeferredWrite {
    DeferredWrite::new(NAME, DROP_NODE.to_owned(), vec![node_id.into()])
}

/// The rows of one `node.names.set`, as one multi-row `INSERT` (none for an empty set).
fn insert_names(e: &RecordedEvent, p: NodeNamesSet) -> Option<DeferredWrite> {
    let rows: Vec<(&str, String)> = p
        .dns_names
        .into_iter()
        .map(|n| ("dns", n))
        .chain(p.ip_addresses.into_iter().map(|n| ("ip", n)))
        .collect();
    if rows.is_empty() {
        return None;
    }
    let mut args: Vec<SqlValue> = Vec::with_capacity(rows.len() * 5);
    let mut values = Vec::with_capacity(rows.len());
    for (i, (kind, name)) in rows.into_iter().enumerate() {
        let b = i * 5;
        values.push(format!(
            "(${}, ${}, ${}, ${}, ${})",
            b + 1,
            b + 2,
            b + 3,
            b + 4,
            b + 5
        ));
        args.extend([
            p.node_id.clone().into(),
            e.tenant_id.clone().into(),
            kind.into(),
            name.into(),
            e.position.into(),
        ]);
    }
    let sql = format!(
        "INSERT INTO node_names (node_id, tenant_id, kind, name, position) VALUES {}",
        values.join(", ")
    );
    Some(DeferredWrite::new(NAME, sql, args))
}

async fn apply_one(tx: &mut StoreTx, e: &RecordedEvent) -> Result<(), ProjectionError> {
    match e.event_type.as_str() {
        NodeNamesSet::EVENT_TYPE => {
            let p: NodeNamesSet = e.decode()?;
            tx.defer(drop_node(p.node_id.clone())).await?;
            if let Some(insert) = insert_names(e, p) {
                tx.defer(insert).await?;
            }
        }
        NodeRetired::EVENT_TYPE => {
            let p: NodeRetired = e.decode()?;
            tx.defer(drop_node(p.node_id)).await?;
        }
        NodeDeleted::EVENT_TYPE => {
            let p: NodeDeleted = e.decode()?;
            tx.defer(drop_node(p.node_id)).await?;
        }
        _ => {}
    }
    Ok(())
}

impl Projection for NodeNamesTable {
    fn name(&self) -> &'static str {
        NAME
    }
    fn tables(&self) -> &'static [TableSpec] {
        TABLES
    }
    fn handles(&self, event_type: &str) -> bool {
        event_type == NodeNamesSet::EVENT_TYPE
            || event_type == NodeRetired::EVENT_TYPE
            || event_type == NodeDeleted::EVENT_TYPE
    }
    // Only deferred writes (a rebuild records them and replays them in order).
    fn only_writes(&self) -> bool {
        true
    }
    fn apply<'a>(
        &'a self,
        tx: &'a mut StoreTx,
        events: &'a [&'a RecordedEvent],
    ) -> BoxFuture<'a, Result<(), ProjectionError>> {
        Box::pin(async move {
            for e in events {
                apply_one(tx, e).await?;
            }
            Ok(())
        })
    }
}

crate::from_row! {
    /// A `node_names` row.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct NodeNameRow {
        pub node_id: String,
        pub tenant_id: String,
        /// `dns` or `ip`.
        pub kind: String,
        pub name: String,
        pub position: i64,
    }
}

const COLUMNS: &str = "node_id, tenant_id, kind, name, position";

/// The names `node_id` holds, DNS names first, each kind sorted.
pub async fn names_of_node(
    tx: &mut StoreTx,
    node_id: &str,
) -> Result<Vec<NodeNameRow>, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM node_names WHERE node_id = $1 ORDER BY kind, name");
    tx.fetch_all(&sql, &[node_id.into()]).await
}

/// Every held name of `tenant`'s nodes (of every node, when `None`), by node, kind and name.
pub async fn names_of_nodes(
    tx: &mut StoreTx,
    tenant: Option<&str>,
) -> Result<Vec<NodeNameRow>, StoreError> {
    match tenant {
        Some(t) => {
            let sql = format!(
                "SELECT {COLUMNS} FROM node_names WHERE tenant_id = $1 ORDER BY node_id, kind, name"
            );
            tx.fetch_all(&sql, &[t.into()]).await
        }
        None => {
            let sql = format!("SELECT {COLUMNS} FROM node_names ORDER BY node_id, kind, name");
            tx.fetch_all(&sql, &[]).await
        }
    }
}

/// The rows of nodes of `tenant` other than `except_node` holding any of `names` of `kind`
/// (`dns` or `ip`), by kind, name and node.
pub async fn holders_in_tenant(
    tx: &mut StoreTx,
    tenant: &str,
    except_node: &str,
    kind: &str,
    names: &[String],
) -> Result<Vec<NodeNameRow>, StoreError> {
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let marks: Vec<String> = (0..names.len()).map(|i| format!("${}", i + 4)).collect();
    let sql = format!(
        "SELECT {COLUMNS} FROM node_names WHERE tenant_id = $1 AND node_id <> $2 AND kind = $3 \
         AND name IN ({}) ORDER BY kind, name, node_id",
        marks.join(", ")
    );
    let mut args: Vec<SqlValue> = vec![tenant.into(), except_node.into(), kind.into()];
    args.extend(names.iter().map(|n| SqlValue::from(n.clone())));
    tx.fetch_all(&sql, &args).await
}

/// Holds the names of `tenant` until the transaction ends, so that two changes of names in one
/// tenant take turns: the second reads what the first committed (read committed) and so sees
/// a name the first gave away. On Postgres a transaction-scoped advisory lock; SQLite has one
/// writer at a time already.
pub async fn hold_tenant_names(tx: &mut StoreTx, tenant: &str) -> Result<(), StoreError> {
    if tx.backend() != Backend::Postgres {
        return Ok(());
    }
    tx.execute(
        "SELECT pg_advisory_xact_lock(25189, hashtext($1))",
        &[format!("names/{tenant}").into()],
    )
    .await?;
    Ok(())
}
