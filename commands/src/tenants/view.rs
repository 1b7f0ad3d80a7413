//! What the tenant commands answer: a tenant as `tenant show` and `tenant list` print it, and
//! what a deletion did.

use std::collections::{BTreeMap, BTreeSet};

use domain::tenant::{TenantDeletion, TenantRefusal};
use events::store::{EventStore, LogStore, LogTx, StoreTx};
use projections::identity::operator::{latest_certs, tenants_with_nodes, LatestCert};
use projections::identity::read;
use projections::quorum::open_batches_of_tenant;
use projections::tenants::{tenant_named, tenant_row, tenant_rows};
use serde::Serialize;

use super::error::TenantError;
use crate::identity::{node_status, NodeView, TokenStatus, TokenView};

/// A tenant: its standing and what it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TenantView {
    /// The tenant.
    pub tenant_id: String,
    /// `active` or `deleted`.
    pub status: &'static str,
    /// What its creator wrote (empty for a tenant nobody created explicitly).
    pub description: String,
    /// When `tenant create` created it (none: a token, node or batch named it first).
    pub created_at_us: Option<i64>,
    /// When it was deleted.
    pub deleted_at_us: Option<i64>,
    /// Why it was deleted.
    pub delete_reason: Option<String>,
    /// Its nodes, of any status.
    pub nodes: usize,
    /// Its nodes by the status `bcctl node list` shows (`active`, `revoked`, `expired`,
    /// `retired`, `deleted`; a status no node has is absent).
    pub nodes_by_status: BTreeMap<String, usize>,
    /// Its active nodes: neither retired nor deleted, their identity not revoked, their newest
    /// certificate unexpired.
    pub active_nodes: usize,
    /// Its tokens that admit joins (status `active`: not revoked, unexpired, a use left).
    pub live_tokens: usize,
    /// Its pending or approved batches.
    pub open_batches: usize,
    /// What its deletion retired, revoked and cancelled (0 while it is active).
    pub retired_nodes: i64,
    /// Tokens its deletion revoked.
    pub revoked_tokens: i64,
    /// Batches its deletion cancelled.
    pub cancelled_batches: i64,
}

/// What `tenant delete` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeletedTenant {
    /// The tenant after its deletion.
    pub tenant: TenantView,
    /// The nodes the deletion retired.
    pub retired_nodes: Vec<String>,
    /// The tokens it revoked.
    pub revoked_tokens: Vec<String>,
    /// The batches it cancelled, hex.
    pub cancelled_batches: Vec<String>,
}

impl DeletedTenant {
    pub(super) fn new(done: TenantDeletion, tenant: TenantView) -> Self {
        DeletedTenant {
            tenant,
            retired_nodes: done.retired_nodes,
            revoked_tokens: done.revoked_tokens,
            cancelled_batches: done.cancelled_batches.iter().map(|b| b.to_hex()).collect(),
        }
    }
}

/// Its nodes counted by the status each really has at `now_us`
/// ([`crate::identity::node_status`]).
fn count_nodes(
    nodes: &[read::NodeRow],
    certs: &[LatestCert],
    now_us: i64,
) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for row in nodes {
        let node = NodeView::from(row);
        let cert = certs.iter().find(|c| c.node_id == node.node_id);
        *counts.entry(node_status(&node, cert, now_us)).or_insert(0) += 1;
    }
    counts
}

async fn view_in(
    tx: &mut StoreTx,
    tenant: &str,
    certs: &[LatestCert],
    now_us: i64,
) -> Result<TenantView, TenantError> {
    let row = tenant_row(tx, tenant).await?;
    if row.is_none() && !tenant_named(tx, tenant).await? {
        return Err(TenantRefusal::Unknown(tenant.to_owned()).into());
    }
    let nodes = read::nodes_of_tenant(tx, Some(tenant)).await?;
    let tokens = read::tokens_of_tenant(tx, Some(tenant)).await?;
    let batches = open_batches_of_tenant(tx, tenant).await?;
    let deleted = row.as_ref().and_then(|r| r.deleted_at_us);
    let by_status = count_nodes(&nodes, certs, now_us);
    Ok(TenantView {
        tenant_id: tenant.to_owned(),
        status: if deleted.is_some() {
            "deleted"
        } else {
            "active"
        },
        description: row
            .as_ref()
            .map(|r| r.description.clone())
            .unwrap_or_default(),
        created_at_us: row.as_ref().and_then(|r| r.created_at_us),
        deleted_at_us: deleted,
        delete_reason: row.as_ref().and_then(|r| r.delete_reason.clone()),
        nodes: nodes.len(),
        active_nodes: by_status.get("active").copied().unwrap_or(0),
        nodes_by_status: by_status,
        live_tokens: tokens
            .iter()
            .filter(|t| TokenView::at(t, now_us).status == TokenStatus::Active)
            .count(),
        open_batches: batches.len(),
        retired_nodes: row.as_ref().map_or(0, |r| r.retired_nodes),
        revoked_tokens: row.as_ref().map_or(0, |r| r.revoked_tokens),
        cancelled_batches: row.as_ref().map_or(0, |r| r.cancelled_batches),
    })
}

/// One tenant, NOT_FOUND when nothing names it.
pub(super) async fn show(
    store: &EventStore,
    tenant: &str,
    now_us: i64,
) -> Result<TenantView, TenantError> {
    let mut tx = store.begin().await?;
    let certs = latest_certs(&mut tx).await?;
    let view = view_in(&mut tx, tenant, &certs, now_us).await;
    tx.rollback().await?;
    view
}

/// Every tenant created, deleted, or named by a node or a token, by id.
pub(super) async fn list(store: &EventStore, now_us: i64) -> Result<Vec<TenantView>, TenantError> {
    let mut tx = store.begin().await?;
    let mut ids: BTreeSet<String> = tenant_rows(&mut tx)
        .await?
        .into_iter()
        .map(|r| r.tenant_id)
        .collect();
    ids.extend(
        tenants_with_nodes(&mut tx)
            .await?
            .into_iter()
            .map(|r| r.tenant_id),
    );
    ids.extend(
        read::tokens_of_tenant(&mut tx, None)
            .await?
            .into_iter()
            .map(|t| t.tenant_id),
    );
    let certs = latest_certs(&mut tx).await?;
    let mut out = Vec::with_capacity(ids.len());
    for id in &ids {
        out.push(view_in(&mut tx, id, &certs, now_us).await?);
    }
    tx.rollback().await?;
    Ok(out)
}
