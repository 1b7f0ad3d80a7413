//! `bcctl node names set|add|remove|show NODE [--dns NAME]... [--ip ADDR]...` (issue 41 item 1):
//! the DNS names and IP addresses a node may serve TLS for, changed and read through
//! [`commands::identity::NodeAdmin`] (the decision is `domain::identity::decide_node_names`).
//! Every change is one `node.names.set` event carrying the whole resulting set.

use clap::{Args, Subcommand};
use commands::identity::NodeNamesView;
use domain::identity::{ChangeNames, NamesChange};

use crate::output::print_json;
use crate::verbs::token::{print_table, to_json, IdentityArgs, IdentityCmdError};

#[derive(Subcommand)]
pub enum NamesCommand {
    /// Replace the node's names with these (none given: the node holds no names).
    Set(ShareArgs),
    /// Add names to the node's.
    Add(ShareArgs),
    /// Remove names from the node's (each must be one it holds).
    Remove(NameArgs),
    /// Show the names the node holds.
    Show(ShowArgs),
}

#[derive(Args)]
pub struct NameArgs {
    #[command(flatten)]
    pub common: IdentityArgs,
    /// The node id.
    pub node_id: String,
    /// A DNS name: lower-case letters, digits, '-' and '.', no wildcard, no trailing dot
    /// (repeatable).
    #[arg(long = "dns", value_name = "NAME")]
    pub dns: Vec<String>,
    /// An IPv4 or IPv6 address (repeatable).
    #[arg(long = "ip", value_name = "ADDR")]
    pub ips: Vec<String>,
}

#[derive(Args)]
pub struct ShareArgs {
    #[command(flatten)]
    pub names: NameArgs,
    /// Let the node hold a name another node of its tenant holds too (refused otherwise).
    #[arg(long)]
    pub allow_shared: bool,
}

#[derive(Args)]
pub struct ShowArgs {
    #[command(flatten)]
    pub common: IdentityArgs,
    /// The node id.
    pub node_id: String,
}

pub async fn run(cmd: NamesCommand) -> Result<(), IdentityCmdError> {
    match cmd {
        NamesCommand::Set(a) => change(a.names, NamesChange::Set, a.allow_shared).await,
        NamesCommand::Add(a) => change(a.names, NamesChange::Add, a.allow_shared).await,
        NamesCommand::Remove(a) => change(a, NamesChange::Remove, false).await,
        NamesCommand::Show(a) => show(a).await,
    }
}

async fn change(
    args: NameArgs,
    change: NamesChange,
    allow_shared: bool,
) -> Result<(), IdentityCmdError> {
    let admin = crate::verbs::token::open_admin(&args.common).await?;
    let view = admin
        .change_names(&ChangeNames {
            node_id: args.node_id.clone(),
            change,
            dns: args.dns,
            ips: args.ips,
            allow_shared,
        })
        .await?;
    if args.common.json {
        crate::outln!("{}", to_json(&view));
        return Ok(());
    }
    if view.changed {
        crate::outln!(
            "node {} holds {} name(s) now ({})",
            view.node_id,
            view.dns.len() + view.ips.len(),
            change.as_str()
        );
    } else {
        crate::outln!(
            "node {} holds these names already: nothing changed",
            view.node_id
        );
    }
    print_names(&view);
    Ok(())
}

async fn show(args: ShowArgs) -> Result<(), IdentityCmdError> {
    let admin = crate::verbs::token::open_admin(&args.common).await?;
    let view = admin.names_of(&args.node_id).await?;
    if args.common.json {
        print_json(&view);
    } else {
        print_names(&view);
    }
    Ok(())
}

/// The names of a node as a table (`KIND`, `NAME`), or a line saying it holds none.
pub fn print_names(view: &NodeNamesView) {
    if view.dns.is_empty() && view.ips.is_empty() {
        crate::outln!("node {} holds no names", view.node_id);
        return;
    }
    let rows: Vec<Vec<String>> = view
        .dns
        .iter()
        .map(|n| vec!["dns".to_owned(), n.clone()])
        .chain(view.ips.iter().map(|n| vec!["ip".to_owned(), n.clone()]))
        .collect();
    print_table(&["KIND", "NAME"], &rows);
}
