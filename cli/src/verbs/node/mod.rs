//! `bcctl node list | show | revoke | delete | retire | names | config | install-script`: nodes through
//! [`commands::identity::NodeAdmin`], from the store alone (no key is unsealed).
//!
//! `list` and `show` add what an operator looks for beside the node row: the SPIFFE ID, the
//! status as it really is (a node whose identity was revoked shows `revoked`, one whose newest
//! certificate ran out `expired`), the certificate's expiry, whether a session is live and when
//! the gateway last saw it. `config` and `install-script` write what a node needs before
//! `bcd join` ([`crate::verbs::node::setup`]).
//!
//! The folder: this file (the verbs on the node rows), [`claims`] (what a node said about
//! itself, shown and filtered on), [`names`] (the names it may serve) and [`setup`] (`config` and
//! `install-script`, which build their files with `crate::deployment::node_setup`). It must never
//! change a node by any road but `commands::identity::NodeAdmin`.

mod claims;
pub(crate) mod names;
pub(crate) mod setup;

use clap::{Args, Subcommand};
use commands::identity::{NodeClaimsView, NodeDetail, NodeView};
use events::store::{LogStore, LogTx};
use projections::identity::operator::{self, LatestCert, SessionRow};
use serde::Serialize;

use crate::output::{print_json, rfc3339_us};
use crate::verbs::node::claims::{cell, print_claims, ClaimFilters};
use crate::verbs::token::{fmt_us, print_table, to_json, IdentityArgs, IdentityCmdError};

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
    /// The DNS names and IP addresses a node may serve TLS for: set, add, remove, show.
    #[command(subcommand)]
    Names(crate::verbs::node::names::NamesCommand),
    /// Write bcd's configuration (config.toml, the JoinService JWKs, the serving CA) into a
    /// directory, from the PKI bundle's public half.
    Config(crate::verbs::node::setup::ConfigArgs),
    /// Print a POSIX sh script that installs bcd's configuration on a node (/etc/bcd by
    /// default) and prints the `bcd join` step.
    InstallScript(crate::verbs::node::setup::InstallScriptArgs),
}

#[derive(Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub common: IdentityArgs,
    /// Only this tenant's.
    #[arg(long)]
    pub tenant: Option<String>,
    #[command(flatten)]
    pub claims: ClaimFilters,
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
        NodeCommand::List(args) => list(args).await?,
        NodeCommand::Show(args) => show(args).await?,
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
        NodeCommand::Names(cmd) => crate::verbs::node::names::run(cmd).await?,
        NodeCommand::Config(args) => crate::verbs::node::setup::config(args).await?,
        NodeCommand::InstallScript(args) => crate::verbs::node::setup::install_script(args).await?,
    }
    Ok(())
}

enum Op {
    Revoke,
    Delete,
    Retire,
}

async fn change(args: ReasonArgs, verb: &str, op: Op) -> Result<(), IdentityCmdError> {
    let store = args.common.store().await?;
    let svc = admin(&store);
    let mut node = match op {
        // Whether the identity is revoked already is the domain's to decide, in the revoke's
        // own transaction (`domain::identity::decide_revoke_identity`).
        Op::Revoke => {
            let change = svc
                .revoke_identity_once(&args.node_id, &args.reason)
                .await?;
            let mut node = change.node;
            node.status = status_now(&store, &node).await?;
            if change.already_revoked {
                print_already_revoked(&args, &node);
                return Ok(());
            }
            node
        }
        Op::Delete => svc.delete_node(&args.node_id, &args.reason).await?,
        Op::Retire => svc.retire_node(&args.node_id, &args.reason).await?,
    };
    // What the node is after the change, as `node show` says it: a revoked identity leaves the
    // row `active` (the generation raised, the certificates revoked), and reads `revoked`.
    node.status = status_now(&store, &node).await?;
    if args.common.json {
        crate::outln!("{}", to_json(&node));
    } else {
        crate::outln!("{verb} node {}", node.node_id);
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

fn print_detail_certs(d: &NodeDetail) {
    crate::outln!("certificates:");
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

/// The node's status as `node show` prints it ([`commands::identity::node_status`]), read now.
async fn status_now(
    store: &events::store::EventStore,
    node: &NodeView,
) -> Result<String, IdentityCmdError> {
    let mut tx = store.begin().await?;
    let cert = operator::latest_cert_of(&mut tx, &node.node_id).await?;
    tx.rollback().await?;
    Ok(commands::identity::node_status(
        node,
        cert.as_ref(),
        now_us(),
    ))
}

fn admin(store: &events::store::EventStore) -> commands::identity::NodeAdmin {
    commands::identity::NodeAdmin::new(
        store.clone(),
        std::sync::Arc::new(commands::DatabaseClock::system()),
    )
}

fn now_us() -> i64 {
    let now = time::OffsetDateTime::now_utc();
    i64::try_from(now.unix_timestamp_nanos() / 1_000).unwrap_or(i64::MAX)
}

/// What `node revoke` says when the identity was revoked already (nothing changed).
fn print_already_revoked(args: &ReasonArgs, node: &NodeView) {
    if args.common.json {
        print_json(&serde_json::json!({
            "node": node,
            "alreadyRevoked": true,
        }));
    } else {
        crate::outln!(
            "node {} is already revoked: it holds no valid certificate of its identity generation {}; nothing changed",
            args.node_id, node.identity_generation
        );
    }
}

/// A node as an operator looks at it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatus {
    pub node_id: String,
    pub spiffe_id: String,
    pub tenant_id: String,
    pub site_id: String,
    pub pool_id: String,
    pub role: String,
    /// active, revoked (its identity was revoked), expired (its newest certificate ran out),
    /// retired or deleted.
    pub status: String,
    pub status_reason: Option<String>,
    pub identity_generation: i64,
    pub attestor: String,
    /// The newest certificate's serial and expiry.
    pub certificate_serial: Option<String>,
    pub certificate_expires_at: Option<String>,
    /// A session is live: open at the last report and seen within the last two minutes.
    pub connected: bool,
    pub last_seen_at: Option<String>,
    pub joined_at: String,
    pub position: i64,
    /// What the node said about itself at its last join (hostname, serials, bcd version, boot
    /// id): claims, never verified.
    pub claims: NodeClaimsView,
}

fn node_status(
    trust_domain: &str,
    node: &NodeView,
    cert: Option<&LatestCert>,
    session: Option<&SessionRow>,
    now_us: i64,
) -> NodeStatus {
    let window = domain::trust_bundle::CONNECTED_WINDOW_US;
    NodeStatus {
        node_id: node.node_id.clone(),
        spiffe_id: format!(
            "spiffe://{trust_domain}/site/{}/node/{}",
            node.site_id, node.node_id
        ),
        tenant_id: node.tenant_id.clone(),
        site_id: node.site_id.clone(),
        pool_id: node.pool_id.clone(),
        role: node.role.clone(),
        status: commands::identity::node_status(node, cert, now_us),
        status_reason: node.status_reason.clone(),
        identity_generation: node.identity_generation,
        attestor: node.attestor.clone(),
        certificate_serial: cert.map(|c| c.serial.clone()),
        certificate_expires_at: cert.map(|c| rfc3339_us(c.not_after_us)),
        connected: session
            .is_some_and(|s| s.connected && s.last_seen_us >= now_us.saturating_sub(window)),
        last_seen_at: session.map(|s| rfc3339_us(s.last_seen_us)),
        joined_at: rfc3339_us(node.joined_at_us),
        position: node.position,
        claims: node.claims.clone(),
    }
}

async fn list(args: ListArgs) -> Result<(), IdentityCmdError> {
    let located = args.common.located()?;
    let td = located
        .deployment
        .public_half()?
        .public
        .trust_domain
        .to_string();
    let store = args.common.store().await?;
    let nodes = admin(&store).list_nodes(args.tenant.as_deref()).await?;
    let mut tx = store.begin().await?;
    let certs = operator::latest_certs(&mut tx).await?;
    let sessions = operator::sessions(&mut tx).await?;
    tx.rollback().await?;
    let now = now_us();
    let out: Vec<NodeStatus> = nodes
        .iter()
        .filter(|n| args.claims.admits(&n.claims))
        .map(|n| {
            let cert = certs.iter().find(|c| c.node_id == n.node_id);
            let session = sessions.iter().find(|s| s.node_id == n.node_id);
            node_status(&td, n, cert, session, now)
        })
        .collect();
    if args.common.json {
        print_json(&out);
    } else {
        print_statuses(&out);
    }
    Ok(())
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ShownNode<'a> {
    #[serde(flatten)]
    status: &'a NodeStatus,
    /// The node row as stored (what `node show --json` printed before issue 22).
    node: &'a NodeView,
    certificates: &'a [commands::identity::CertView],
    /// The DNS names and IP addresses it may serve TLS for (`node names`).
    names: ShownNames<'a>,
}

#[derive(Serialize)]
struct ShownNames<'a> {
    dns: &'a [String],
    ips: &'a [String],
}

async fn show(args: NodeArgs) -> Result<(), IdentityCmdError> {
    let located = args.common.located()?;
    let td = located
        .deployment
        .public_half()?
        .public
        .trust_domain
        .to_string();
    let store = args.common.store().await?;
    let detail = admin(&store).show_node(&args.node_id).await?;
    let names = admin(&store).names_of(&args.node_id).await?;
    let mut tx = store.begin().await?;
    let cert = operator::latest_cert_of(&mut tx, &args.node_id).await?;
    let session = operator::session_of(&mut tx, &args.node_id).await?;
    tx.rollback().await?;
    let status = node_status(&td, &detail.node, cert.as_ref(), session.as_ref(), now_us());
    if args.common.json {
        print_json(&ShownNode {
            status: &status,
            node: &detail.node,
            certificates: &detail.certificates,
            names: ShownNames {
                dns: &names.dns,
                ips: &names.ips,
            },
        });
    } else {
        print_statuses(std::slice::from_ref(&status));
        crate::outln!();
        print_claims(&status.claims);
        crate::outln!();
        crate::outln!("names:");
        crate::verbs::node::names::print_names(&names);
        crate::outln!();
        print_detail_certs(&detail);
    }
    Ok(())
}

/// The node list an operator reads.
pub fn print_statuses(nodes: &[NodeStatus]) {
    let rows: Vec<Vec<String>> = nodes
        .iter()
        .map(|n| {
            vec![
                n.node_id.clone(),
                n.spiffe_id.clone(),
                n.tenant_id.clone(),
                match &n.status_reason {
                    Some(r) if n.status != "active" => format!("{} ({r})", n.status),
                    _ => n.status.clone(),
                },
                n.certificate_expires_at
                    .clone()
                    .unwrap_or_else(|| "-".into()),
                if n.connected { "yes" } else { "no" }.into(),
                n.last_seen_at.clone().unwrap_or_else(|| "never".into()),
                cell(&n.claims.hostname),
                cell(&n.claims.product_serial),
                cell(&n.claims.bcd_version),
            ]
        })
        .collect();
    print_table(
        &[
            "NODE",
            "SPIFFE ID",
            "TENANT",
            "STATUS",
            "CERT EXPIRES",
            "CONNECTED",
            "LAST SEEN",
            "HOSTNAME",
            "SERIAL",
            "BCD",
        ],
        &rows,
    );
}
