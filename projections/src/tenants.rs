//! `tenants` (issue 45 item 6): a tenant's life cycle, from the `tenant/<id>` streams'
//! `tenant.created` and `tenant.deleted` (`events/proto/bc/events/v1/tenants.proto`), and the
//! reads of it. Applied inline by `commands::tenants` and by every rebuild
//! (`commands::every_projection`).
//!
//! A tenant the log names only through its tokens, nodes or batches has no row until it is
//! deleted; a deleted tenant keeps its row (its name is never reused). Tenant events are rare
//! (an operator's command each), so each is one statement, its row count checked: a second
//! creation or deletion is inapplicable (the command layer never writes either).

use events::schema::{TenantCreated, TenantDeleted};
use events::store::{Backend, LogTx, SqlValue, StoreError, StoreTx};
use events::{EventPayload, RecordedEvent};

use crate::{BoxFuture, Projection, ProjectionError, TableSpec};

/// `tenants`.
pub struct Tenants;

const NAME: &str = "tenants";

const TENANTS_TABLES: &[TableSpec] = &[TableSpec {
    name: NAME,
    columns: &[
        "tenant_id",
        "description",
        "created_at_us",
        "deleted_at_us",
        "delete_reason",
        "retired_nodes",
        "revoked_tokens",
        "cancelled_batches",
        "version",
        "position",
    ],
    order_by: "tenant_id",
}];

fn inapplicable(e: &RecordedEvent, why: &str) -> ProjectionError {
    ProjectionError::Inapplicable {
        projection: NAME,
        position: e.position,
        event_type: e.event_type.clone(),
        why: why.to_owned(),
    }
}

const CREATE: &str = "INSERT INTO tenants (tenant_id, description, created_at_us, \
     deleted_at_us, delete_reason, retired_nodes, revoked_tokens, cancelled_batches, version, \
     position) VALUES ($1, $2, $3, NULL, NULL, 0, 0, 0, $4, $5) ON CONFLICT (tenant_id) DO NOTHING";

/// A deletion: the created row marked, or a row of its own for a tenant only the log named.
const DELETE: &str = "INSERT INTO tenants (tenant_id, description, created_at_us, \
     deleted_at_us, delete_reason, retired_nodes, revoked_tokens, cancelled_batches, version, \
     position) VALUES ($1, '', NULL, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (tenant_id) DO UPDATE \
     SET deleted_at_us = excluded.deleted_at_us, delete_reason = excluded.delete_reason, \
     retired_nodes = excluded.retired_nodes, revoked_tokens = excluded.revoked_tokens, \
     cancelled_batches = excluded.cancelled_batches, version = excluded.version, \
     position = excluded.position WHERE tenants.deleted_at_us IS NULL";

fn count(n: usize) -> SqlValue {
    SqlValue::Int(i64::try_from(n).unwrap_or(i64::MAX))
}

async fn apply_one(tx: &mut StoreTx, e: &RecordedEvent) -> Result<(), ProjectionError> {
    let changed = match e.event_type.as_str() {
        TenantCreated::EVENT_TYPE => {
            let p: TenantCreated = e.decode()?;
            let args = [
                p.tenant_id.into(),
                p.description.into(),
                e.occurred_at_us.into(),
                e.stream_version.into(),
                e.position.into(),
            ];
            if tx.execute(CREATE, &args).await? != 1 {
                return Err(inapplicable(e, "the tenant was already created"));
            }
            return Ok(());
        }
        TenantDeleted::EVENT_TYPE => {
            let p: TenantDeleted = e.decode()?;
            let args = [
                p.tenant_id.into(),
                e.occurred_at_us.into(),
                p.reason.into(),
                count(p.retired_node_ids.len()),
                count(p.revoked_token_ids.len()),
                count(p.cancelled_batch_ids.len()),
                e.stream_version.into(),
                e.position.into(),
            ];
            tx.execute(DELETE, &args).await?
        }
        _ => return Ok(()),
    };
    if changed != 1 {
        return Err(inapplicable(e, "the tenant was already deleted"));
    }
    Ok(())
}

impl Projection for Tenants {
    fn name(&self) -> &'static str {
        NAME
    }
    fn tables(&self) -> &'static [TableSpec] {
        TENANTS_TABLES
    }
    // Not only writes: each statement's row count is read (a second creation or deletion).
    fn handles(&self, event_type: &str) -> bool {
        event_type == TenantCreated::EVENT_TYPE || event_type == TenantDeleted::EVENT_TYPE
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
    /// A `tenants` row.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct TenantRow {
        pub tenant_id: String,
        pub description: String,
        pub created_at_us: Option<i64>,
        pub deleted_at_us: Option<i64>,
        pub delete_reason: Option<String>,
        pub retired_nodes: i64,
        pub revoked_tokens: i64,
        pub cancelled_batches: i64,
        pub version: i64,
        pub position: i64,
    }
}

const COLUMNS: &str = "tenant_id, description, created_at_us, deleted_at_us, delete_reason, \
     retired_nodes, revoked_tokens, cancelled_batches, version, position";

/// The row of `tenant`, if it was created or deleted.
pub async fn tenant_row(tx: &mut StoreTx, tenant: &str) -> Result<Option<TenantRow>, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM tenants WHERE tenant_id = $1");
    tx.fetch_optional(&sql, &[tenant.into()]).await
}

/// Every row, by id.
pub async fn tenant_rows(tx: &mut StoreTx) -> Result<Vec<TenantRow>, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM tenants ORDER BY tenant_id");
    tx.fetch_all(&sql, &[]).await
}

/// Whether a token, a node or a batch names `tenant` (how a tenant from before tenant
/// creation, or one only `token create` named, is known).
pub async fn tenant_named(tx: &mut StoreTx, tenant: &str) -> Result<bool, StoreError> {
    let row: Option<(i64,)> = tx
        .fetch_optional(
            "SELECT CAST(1 AS BIGINT) WHERE EXISTS (SELECT 1 FROM join_tokens WHERE tenant_id = $1) \
             OR EXISTS (SELECT 1 FROM nodes WHERE tenant_id = $1) \
             OR EXISTS (SELECT 1 FROM command_batches WHERE tenant_id = $1)",
            &[tenant.into()],
        )
        .await?;
    Ok(row.is_some())
}

/// How a transaction holds a tenant until it ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TenantHold {
    /// Beside other shared holders (a token created for the tenant): excludes only a
    /// [`TenantHold::Exclusive`] one.
    Shared,
    /// Alone (the tenant's creation or deletion).
    Exclusive,
}

/// Holds `tenant` until the transaction ends, so that what a tenant's deletion reads (its
/// tokens) cannot change under it: a token created for the tenant holds it shared, a deletion
/// exclusive. On Postgres a transaction-scoped advisory lock on the tenant's stream name; SQLite
/// has one writer at a time already.
pub async fn hold_tenant(
    tx: &mut StoreTx,
    tenant: &str,
    hold: TenantHold,
) -> Result<(), StoreError> {
    if tx.backend() != Backend::Postgres {
        return Ok(());
    }
    let sql = match hold {
        TenantHold::Shared => "SELECT pg_advisory_xact_lock_shared(25188, hashtext($1))",
        TenantHold::Exclusive => "SELECT pg_advisory_xact_lock(25188, hashtext($1))",
    };
    tx.execute(sql, &[events::schema::tenant_stream(tenant).into()])
        .await?;
    Ok(())
}
