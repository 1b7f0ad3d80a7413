//! `bcctl site create | list | show`, `bcctl site boot add | list | remove` and `bcctl site
//! lease fence`: sites, the machines they commission and their boot lease, through
//! [`commands::site`], from the store alone (no key is unsealed). A site's agent (`bcd site`,
//! a node of role site) holds the boot lease; an operator fences it to take its vouching away.

use std::sync::Arc;

use clap::{Args, Subcommand};
use commands::site::{
    BootEntries, BootEntryView, LeaseView, NewBootEntry, NewSite, SiteError, SiteView, Sites,
};
use commands::DatabaseClock;
use events::store::EventStore;

use crate::deployment::CommonArgs;
use crate::deployment::DeploymentError;
use crate::verbs::token::{fmt_us, print_table, to_json};
use domain::duration::parse_duration;

/// Why a site command failed.
#[derive(Debug, thiserror::Error)]
pub enum SiteCmdError {
    #[error("{0}")]
    Deployment(#[from] DeploymentError),
    #[error("store: {0}")]
    Store(#[from] events::store::StoreError),
    #[error("{0}")]
    Site(#[from] SiteError),
    #[error("{0}")]
    Open(#[from] crate::deployment::OpenError),
    /// A usage error (exit 2).
    #[error("INVALID_INPUT: {0}")]
    Usage(String),
}

impl SiteCmdError {
    /// 2 for a usage error, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            SiteCmdError::Usage(_) => 2,
            _ => 1,
        }
    }
}

#[derive(Subcommand)]
pub enum SiteCommand {
    /// Create a site (its agents join with a site token of this site).
    Create(CreateArgs),
    /// List sites.
    List(ListArgs),
    /// Show a site, its boot lease and its boot entries.
    Show(ShowArgs),
    /// Boot entries: the machines the site's boot server commissions.
    #[command(subcommand)]
    Boot(BootCommand),
    /// The site's boot lease.
    #[command(subcommand)]
    Lease(LeaseCommand),
}

#[derive(Args)]
pub struct CreateArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// The site id (lower-case a-z, 0-9 and '-', at most 63).
    #[arg(long)]
    pub id: String,
    /// Its tenant.
    #[arg(long)]
    pub tenant: String,
    /// The pool its discovered machines join when their boot entry names none.
    #[arg(long = "default-pool")]
    pub default_pool: Option<String>,
    /// Free text.
    #[arg(long, default_value = "")]
    pub description: String,
}

#[derive(Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Only this tenant's sites.
    #[arg(long)]
    pub tenant: Option<String>,
}

#[derive(Args)]
pub struct ShowArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// The site id.
    pub site: String,
}

#[derive(Subcommand)]
pub enum BootCommand {
    /// Register a machine for commissioning by its MAC.
    Add(BootAddArgs),
    /// List the site's boot entries, removed and expired ones too.
    List(BootListArgs),
    /// Remove a boot entry.
    Remove(BootRemoveArgs),
}

#[derive(Args)]
pub struct BootAddArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// The site.
    #[arg(long)]
    pub site: String,
    /// The machine's MAC (any case, ':' or '-').
    #[arg(long)]
    pub mac: String,
    /// The machine's product UUID (SMBIOS), when known.
    #[arg(long = "product-uuid")]
    pub product_uuid: Option<String>,
    /// The kernel the iPXE script boots (http or https).
    #[arg(long)]
    pub kernel: String,
    /// Its initrd (http or https).
    #[arg(long)]
    pub initrd: String,
    /// Extra kernel arguments.
    #[arg(long, default_value = "")]
    pub args: String,
    /// The pool the machine joins (default: the site's default pool).
    #[arg(long)]
    pub pool: Option<String>,
    /// How long the entry serves scripts (e.g. 24h, at most 30d).
    #[arg(long = "expires-in", default_value = "24h")]
    pub expires_in: String,
    /// Replace the MAC's active entry instead of refusing.
    #[arg(long)]
    pub replace: bool,
}

#[derive(Args)]
pub struct BootListArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// The site.
    #[arg(long)]
    pub site: String,
}

#[derive(Args)]
pub struct BootRemoveArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// The entry id (boot_...).
    pub entry: String,
    /// Why (recorded in the event).
    #[arg(long, default_value = "")]
    pub reason: String,
}

#[derive(Subcommand)]
pub enum LeaseCommand {
    /// End the live holding of the site's boot lease (cause "fenced"): the agent can no longer
    /// vouch for a boot until it acquires the lease again, at a new epoch.
    Fence(FenceArgs),
}

#[derive(Args)]
pub struct FenceArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// The site.
    #[arg(long)]
    pub site: String,
}

async fn open_store(common: &CommonArgs, write: bool) -> Result<EventStore, SiteCmdError> {
    Ok(common.deployment.open_store_checked(write).await?)
}

async fn sites(common: &CommonArgs, write: bool) -> Result<Sites, SiteCmdError> {
    Ok(Sites::new(
        open_store(common, write).await?,
        Arc::new(DatabaseClock::system()),
    ))
}

async fn boots(common: &CommonArgs, write: bool) -> Result<BootEntries, SiteCmdError> {
    Ok(BootEntries::new(
        open_store(common, write).await?,
        Arc::new(DatabaseClock::system()),
    ))
}

pub async fn run(cmd: SiteCommand) -> Result<(), SiteCmdError> {
    match cmd {
        SiteCommand::Create(args) => {
            let site = sites(&args.common, true)
                .await?
                .create(&NewSite {
                    site_id: args.id,
                    tenant_id: args.tenant,
                    description: args.description,
                    default_pool_id: args.default_pool,
                    actor: crate::invocation::actor().id().to_string(),
                })
                .await?;
            if args.common.json {
                crate::outln!("{}", to_json(&site));
            } else {
                crate::outln!("created site {}", site.site_id);
                print_sites(std::slice::from_ref(&site));
            }
        }
        SiteCommand::List(args) => {
            let list = sites(&args.common, false)
                .await?
                .list(args.tenant.as_deref())
                .await?;
            if args.common.json {
                crate::outln!("{}", to_json(&list));
            } else {
                print_sites(&list);
            }
        }
        SiteCommand::Show(args) => {
            let detail = sites(&args.common, false).await?.show(&args.site).await?;
            if args.common.json {
                crate::outln!("{}", to_json(&detail));
            } else {
                print_sites(std::slice::from_ref(&detail.site));
                match &detail.lease {
                    Some(l) => print_lease(l),
                    None => crate::outln!("boot lease: never held"),
                }
                print_entries(&detail.boot_entries);
            }
        }
        SiteCommand::Boot(BootCommand::Add(args)) => {
            let ttl = parse_duration(&args.expires_in)
                .map_err(|e| SiteCmdError::Usage(format!("--expires-in: {e}")))?;
            let expires_in_us = i64::try_from(ttl.as_micros())
                .map_err(|_| SiteCmdError::Usage("--expires-in is too long".into()))?;
            let entry = boots(&args.common, true)
                .await?
                .add(&NewBootEntry {
                    site_id: args.site,
                    mac: args.mac,
                    product_uuid: args.product_uuid,
                    kernel_url: args.kernel,
                    initrd_url: args.initrd,
                    kernel_args: args.args,
                    pool_id: args.pool,
                    expires_in_us: Some(expires_in_us),
                    replace: args.replace,
                    actor: crate::invocation::actor().id().to_string(),
                })
                .await?;
            print_entry(&entry, args.common.json, "added");
        }
        SiteCommand::Boot(BootCommand::List(args)) => {
            let list = boots(&args.common, false).await?.list(&args.site).await?;
            if args.common.json {
                crate::outln!("{}", to_json(&list));
            } else {
                print_entries(&list);
            }
        }
        SiteCommand::Boot(BootCommand::Remove(args)) => {
            let entry = boots(&args.common, true)
                .await?
                .remove(&args.entry, crate::invocation::actor().id(), &args.reason)
                .await?;
            print_entry(&entry, args.common.json, "removed");
        }
        SiteCommand::Lease(LeaseCommand::Fence(args)) => {
            let lease = sites(&args.common, true)
                .await?
                .fence(&args.site, crate::invocation::actor().id())
                .await?;
            if args.common.json {
                crate::outln!("{}", to_json(&lease));
            } else {
                crate::outln!("fenced the boot lease of site {}", args.site);
                print_lease(&lease);
            }
        }
    }
    Ok(())
}

fn print_sites(list: &[SiteView]) {
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|s| {
            vec![
                s.site_id.clone(),
                s.tenant_id.clone(),
                s.default_pool_id.clone().unwrap_or_else(|| "-".into()),
                fmt_us(s.created_at_us),
                s.description.clone(),
            ]
        })
        .collect();
    print_table(
        &["SITE", "TENANT", "DEFAULT POOL", "CREATED", "DESCRIPTION"],
        &rows,
    );
}

fn print_lease(l: &LeaseView) {
    match &l.holder_node_id {
        Some(holder) => crate::outln!(
            "boot lease {}: held by {holder} at epoch {}, until {}",
            l.lease,
            l.epoch,
            fmt_us(l.expires_at_us)
        ),
        None => crate::outln!(
            "boot lease {}: free (last holder {} at epoch {}{})",
            l.lease,
            l.last_holder_node_id,
            l.epoch,
            l.release_cause
                .as_deref()
                .map_or_else(|| ", lapsed".to_string(), |c| format!(", {c}"))
        ),
    }
}

fn print_entry(entry: &BootEntryView, json: bool, verb: &str) {
    if json {
        crate::outln!("{}", to_json(entry));
        return;
    }
    crate::outln!("{verb} boot entry {}", entry.entry_id);
    print_entries(std::slice::from_ref(entry));
}

fn print_entries(list: &[BootEntryView]) {
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|e| {
            vec![
                e.entry_id.clone(),
                e.mac.clone(),
                e.pool_id.clone(),
                e.status.clone(),
                fmt_us(e.not_after_us),
                e.kernel_url.clone(),
            ]
        })
        .collect();
    print_table(
        &["ENTRY", "MAC", "POOL", "STATUS", "NOT AFTER", "KERNEL"],
        &rows,
    );
}
