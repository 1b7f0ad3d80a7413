//! `bcctl node list | show | revoke | delete | retire`: nodes through
//! [`commands::identity::NodeAdmin`], from the store alone (no key is unsealed).

use clap::{Args, Subcommand};
use commands::identity::{NodeDetail, NodeView};

use crate::token_cmd::{fmt_us, open_admin, print_table, to_json, IdentityArgs, IdentityCmdError};

#[derive(Subcommand)]
pub enum NodeCommand {
    /// List nodes.
    List(ListArgs),
    /// Show a node and every certificate it was issued.
    Show(NodeArgs),
    /// Revoke a node's identity: raises its identity generation and revokes every certificate.
    Revoke(ReasonArgs),
    /// Delete a node: revokes its certificates and frees its hardware key (needs --yes).
    Delete(DeleteArgs),
    /// Retire a node: revokes its certificates; it never renews again.
    Retire(ReasonArgs),
}

#[derive(Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub common: IdentityArgs,
    /// Only this tenant's.
    #[arg(long)]
    pub tenant: Option<String>,
}

#[derive(Args)]
pub struct NodeArgs {
    #[command(flatten)]
    pub common: IdentityArgs,
    /// The node id.
    pub node_id: String,
}

#[derive(Args)]
pub struct ReasonArgs {
    #[command(flatten)]
    pub common: IdentityArgs,
    /// The node id.
    pub node_id: String,
    /// Why (recorded in the event).
    #[arg(long, default_value = "operator request")]
    pub reason: String,
}

#[derive(Args)]
pub struct DeleteArgs {
    #[command(flatten)]
    pub node: ReasonArgs,
    /// Confirms the deletion: it cannot be undone (the node never renews or re-joins as itself).
    #[arg(long)]
    pub yes: bool,
}

pub async fn run(cmd: NodeCommand) -> Result<(), IdentityCmdError> {
    match cmd {
        NodeCommand::List(args) => {
            let svc = open_admin(&args.common).await?;
            let nodes = svc.list_nodes(args.tenant.as_deref()).await?;
            if args.common.json {
                println!("{}", to_json(&nodes));
            } else {
                print_nodes(&nodes);
            }
        }
        NodeCommand::Show(args) => {
            let svc = open_admin(&args.common).await?;
            let detail = svc.show_node(&args.node_id).await?;
            if args.common.json {
                println!("{}", to_json(&detail));
            } else {
                print_detail(&detail);
            }
        }
        NodeCommand::Revoke(args) => change(args, "revoked the identity of", Op::Revoke).await?,
        NodeCommand::Delete(args) => {
            if !args.yes {
                return Err(IdentityCmdError::Invalid(format!(
                    "deleting node {} revokes every certificate it holds and cannot be undone; \
                     run again with --yes to delete it",
                    args.node.node_id
                )));
            }
            change(args.node, "deleted", Op::Delete).await?
        }
        NodeCommand::Retire(args) => change(args, "retired", Op::Retire).await?,
    }
    Ok(())
}

enum Op {
    Revoke,
    Delete,
    Retire,
}

async fn change(args: ReasonArgs, verb: &str, op: Op) -> Result<(), IdentityCmdError> {
    let svc = open_admin(&args.common).await?;
    let node = match op {
        Op::Revoke => svc.revoke_identity(&args.node_id, &args.reason).await?,
        Op::Delete => svc.delete_node(&args.node_id, &args.reason).await?,
        Op::Retire => svc.retire_node(&args.node_id, &args.reason).await?,
    };
    if args.common.json {
        println!("{}", to_json(&node));
    } else {
        println!("{verb} node {}", node.node_id);
        print_nodes(std::slice::from_ref(&node));
    }
    Ok(())
}

pub fn print_nodes(nodes: &[NodeView]) {
    let rows: Vec<Vec<String>> = nodes
        .iter()
        .map(|n| {
            vec![
                n.node_id.clone(),
                n.tenant_id.clone(),
                n.site_id.clone(),
                n.pool_id.clone(),
                n.role.clone(),
                match &n.status_reason {
                    Some(r) => format!("{} ({r})", n.status),
                    None => n.status.clone(),
                },
                n.identity_generation.to_string(),
                fmt_us(n.joined_at_us),
                n.position.to_string(),
            ]
        })
        .collect();
    print_table(
        &[
            "NODE", "TENANT", "SITE", "POOL", "ROLE", "STATUS", "GEN", "JOINED", "POSITION",
        ],
        &rows,
    );
}

pub fn print_detail(d: &NodeDetail) {
    print_nodes(std::slice::from_ref(&d.node));
    println!();
    println!("certificates:");
    let rows: Vec<Vec<String>> = d
        .certificates
        .iter()
        .map(|c| {
            vec![
                c.serial.clone(),
                c.identity_generation.to_string(),
                fmt_us(c.not_before_us),
                fmt_us(c.not_after_us),
                match (&c.revoked_at_us, &c.revoke_reason) {
                    (Some(at), Some(r)) => format!("revoked {} ({r})", fmt_us(*at)),
                    (Some(at), None) => format!("revoked {}", fmt_us(*at)),
                    _ => "valid".into(),
                },
                c.sha256.clone(),
                if c.allowed_kinds.is_empty() {
                    "(role's)".into()
                } else {
                    c.allowed_kinds.join(",")
                },
            ]
        })
        .collect();
    print_table(
        &[
            "SERIAL",
            "GEN",
            "NOT BEFORE",
            "NOT AFTER",
            "STATE",
            "SHA-256",
            "KINDS",
        ],
        &rows,
    );
}
