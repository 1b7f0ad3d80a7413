//! `bcctl tenant list`: the tenants the log names (what `audit prove` and `events list --tenant`
//! take), with their event counts and node counts. Read only, no key opened.

use clap::{Args, Subcommand};
use events::store::{LogStore, LogTx};
use projections::browse;
use projections::identity::operator;
use serde::Serialize;

use crate::output::print_json;
use crate::verbs::token::{print_table, IdentityArgs, IdentityCmdError};

#[derive(Subcommand)]
pub enum TenantCommand {
    /// List the tenants: events, nodes, active nodes.
    List(ListArgs),
}

#[derive(Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub common: IdentityArgs,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TenantView {
    pub tenant_id: String,
    pub events: i64,
    pub last_position: i64,
    pub nodes: i64,
    pub active_nodes: i64,
}

pub async fn run(cmd: TenantCommand) -> Result<(), IdentityCmdError> {
    let TenantCommand::List(args) = cmd;
    let store = args.common.store().await?;
    let logged = browse::log_tenants(&store).await?;
    let mut tx = store.begin().await?;
    let with_nodes = operator::tenants_with_nodes(&mut tx).await?;
    tx.rollback().await?;
    let mut out: Vec<TenantView> = logged
        .iter()
        .map(|t| {
            let n = with_nodes.iter().find(|n| n.tenant_id == t.tenant_id);
            TenantView {
                tenant_id: t.tenant_id.clone(),
                events: t.events,
                last_position: t.last_position,
                nodes: n.map_or(0, |n| n.nodes),
                active_nodes: n.map_or(0, |n| n.active_nodes),
            }
        })
        .collect();
    for n in &with_nodes {
        if !out.iter().any(|t| t.tenant_id == n.tenant_id) {
            out.push(TenantView {
                tenant_id: n.tenant_id.clone(),
                events: 0,
                last_position: 0,
                nodes: n.nodes,
                active_nodes: n.active_nodes,
            });
        }
    }
    if args.common.json {
        print_json(&out);
    } else {
        let rows: Vec<Vec<String>> = out
            .iter()
            .map(|t| {
                vec![
                    t.tenant_id.clone(),
                    t.events.to_string(),
                    t.last_position.to_string(),
                    t.nodes.to_string(),
                    t.active_nodes.to_string(),
                ]
            })
            .collect();
        print_table(
            &["TENANT", "EVENTS", "LAST POSITION", "NODES", "ACTIVE"],
            &rows,
        );
    }
    Ok(())
}
