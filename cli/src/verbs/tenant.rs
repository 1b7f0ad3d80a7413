//! `bcctl tenant create | list | show | delete` (issue 45 item 6): a tenant's life cycle through
//! [`TenantAdmin`]. `list` also shows every tenant the log names (what `audit prove` and
//! `events list --tenant` take) with its event counts. A deleted tenant stays listed with
//! status `deleted`; its name is never reused.

use std::collections::BTreeMap;
use std::sync::Arc;

use clap::{Args, Subcommand};
use commands::tenants::{TenantAdmin, TenantView};
use commands::DatabaseClock;
use projections::browse;
use serde::Serialize;

use crate::output::print_json;
use crate::verbs::token::{fmt_us, print_table, IdentityArgs, IdentityCmdError};

#[derive(Subcommand)]
pub enum TenantCommand {
    /// Create a tenant (refused if it exists or was deleted).
    Create(CreateArgs),
    /// List the tenants: status, events, nodes, and the nodes by status (active, revoked,
    /// expired, retired, deleted).
    List(ListArgs),
    /// Show one tenant: status, nodes, live tokens, open batches, its deletion.
    Show(ShowArgs),
    /// Delete a tenant: its tokens revoked and its open batches cancelled in the same
    /// decision; refused while it has active nodes unless --retire-nodes.
    Delete(DeleteArgs),
}

#[derive(Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub common: IdentityArgs,
}

#[derive(Args)]
pub struct CreateArgs {
    #[command(flatten)]
    pub common: IdentityArgs,
    /// The tenant id (1 to 128 of A-Z, a-z, 0-9, '.', '-', '_').
    pub tenant_id: String,
    /// What the tenant is (at most 500 characters).
    #[arg(long, default_value = "")]
    pub description: String,
}

#[derive(Args)]
pub struct ShowArgs {
    #[command(flatten)]
    pub common: IdentityArgs,
    /// The tenant id.
    pub tenant_id: String,
}

#[derive(Args)]
pub struct DeleteArgs {
    #[command(flatten)]
    pub common: IdentityArgs,
    /// The tenant id.
    pub tenant_id: String,
    /// Retire the tenant's active nodes in the same decision (without it, active nodes refuse
    /// the deletion).
    #[arg(long)]
    pub retire_nodes: bool,
    /// Why (recorded in every event of the deletion).
    #[arg(long, default_value = "deleted by operator")]
    pub reason: String,
}

/// One row of `tenant list`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TenantListRow {
    pub tenant_id: String,
    /// `active` or `deleted`.
    pub status: &'static str,
    pub events: i64,
    pub last_position: i64,
    pub nodes: usize,
    /// Nodes neither retired nor deleted, their identity not revoked, their certificate
    /// unexpired.
    pub active_nodes: usize,
    /// Nodes by the status `node list` shows (a status no node has is absent).
    pub nodes_by_status: BTreeMap<String, usize>,
    pub deleted_at_us: Option<i64>,
}

/// The node statuses `tenant list` has a column for, in its order.
const NODE_STATUSES: [&str; 5] = ["active", "revoked", "expired", "retired", "deleted"];

/// `3 (1 active, 1 revoked, 1 retired)`: the count, then each status some node has.
fn node_counts(nodes: usize, by_status: &BTreeMap<String, usize>) -> String {
    let parts: Vec<String> = NODE_STATUSES
        .iter()
        .filter_map(|s| by_status.get(*s).map(|n| format!("{n} {s}")))
        .collect();
    if parts.is_empty() {
        nodes.to_string()
    } else {
        format!("{nodes} ({})", parts.join(", "))
    }
}

async fn open(common: &IdentityArgs) -> Result<TenantAdmin, IdentityCmdError> {
    Ok(TenantAdmin::new(
        common.store().await?,
        Arc::new(DatabaseClock::system()),
    ))
}

pub async fn run(cmd: TenantCommand) -> Result<(), IdentityCmdError> {
    match cmd {
        TenantCommand::List(args) => list(args).await,
        TenantCommand::Create(args) => {
            let view = open(&args.common)
                .await?
                .create(&args.tenant_id, &args.description)
                .await?;
            print_view(&view, args.common.json);
            Ok(())
        }
        TenantCommand::Show(args) => {
            let view = open(&args.common).await?.show(&args.tenant_id).await?;
            print_view(&view, args.common.json);
            Ok(())
        }
        TenantCommand::Delete(args) => {
            let done = open(&args.common)
                .await?
                .delete(&args.tenant_id, &args.reason, args.retire_nodes)
                .await?;
            if args.common.json {
                print_json(&done);
            } else {
                crate::outln!(
                    "tenant {} deleted: {} node(s) retired, {} token(s) revoked, {} batch(es) cancelled",
                    args.tenant_id,
                    done.retired_nodes.len(),
                    done.revoked_tokens.len(),
                    done.cancelled_batches.len()
                );
            }
            Ok(())
        }
    }
}

fn print_view(t: &TenantView, json: bool) {
    if json {
        print_json(t);
        return;
    }
    let opt = |v: Option<i64>| v.map_or_else(|| "-".to_string(), fmt_us);
    let rows = [
        ("tenant", t.tenant_id.clone()),
        ("status", t.status.to_string()),
        ("description", t.description.clone()),
        ("created", opt(t.created_at_us)),
        ("nodes", node_counts(t.nodes, &t.nodes_by_status)),
        ("live tokens", t.live_tokens.to_string()),
        ("open batches", t.open_batches.to_string()),
        ("deleted", opt(t.deleted_at_us)),
    ];
    for (k, v) in rows {
        crate::outln!("{k:<13} {v}");
    }
    if let Some(reason) = &t.delete_reason {
        crate::outln!("{:<13} {reason}", "reason");
        crate::outln!(
            "{:<13} {} node(s) retired, {} token(s) revoked, {} batch(es) cancelled",
            "deletion",
            t.retired_nodes,
            t.revoked_tokens,
            t.cancelled_batches
        );
    }
}

async fn list(args: ListArgs) -> Result<(), IdentityCmdError> {
    let store = args.common.store().await?;
    let logged = browse::log_tenants(&store).await?;
    let known = TenantAdmin::new(store, Arc::new(DatabaseClock::system()))
        .list()
        .await?;
    let mut out: Vec<TenantListRow> = logged
        .iter()
        .map(|t| {
            let k = known.iter().find(|k| k.tenant_id == t.tenant_id);
            TenantListRow {
                tenant_id: t.tenant_id.clone(),
                status: k.map_or("active", |k| k.status),
                events: t.events,
                last_position: t.last_position,
                nodes: k.map_or(0, |k| k.nodes),
                active_nodes: k.map_or(0, |k| k.active_nodes),
                nodes_by_status: k.map(|k| k.nodes_by_status.clone()).unwrap_or_default(),
                deleted_at_us: k.and_then(|k| k.deleted_at_us),
            }
        })
        .collect();
    for k in &known {
        if !out.iter().any(|t| t.tenant_id == k.tenant_id) {
            out.push(TenantListRow {
                tenant_id: k.tenant_id.clone(),
                status: k.status,
                events: 0,
                last_position: 0,
                nodes: k.nodes,
                active_nodes: k.active_nodes,
                nodes_by_status: k.nodes_by_status.clone(),
                deleted_at_us: k.deleted_at_us,
            });
        }
    }
    if args.common.json {
        print_json(&out);
    } else {
        let rows: Vec<Vec<String>> = out
            .iter()
            .map(|t| {
                let mut row = vec![
                    t.tenant_id.clone(),
                    t.status.to_string(),
                    t.events.to_string(),
                    t.last_position.to_string(),
                    t.nodes.to_string(),
                ];
                row.extend(
                    NODE_STATUSES
                        .iter()
                        .map(|s| t.nodes_by_status.get(*s).copied().unwrap_or(0).to_string()),
                );
                row
            })
            .collect();
        print_table(
            &[
                "TENANT",
                "STATUS",
                "EVENTS",
                "LAST POSITION",
                "NODES",
                "ACTIVE",
                "REVOKED",
                "EXPIRED",
                "RETIRED",
                "DELETED",
            ],
            &rows,
        );
    }
    Ok(())
}
