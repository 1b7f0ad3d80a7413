//! `bcctl pool create | show | list | update`: pools and their attestor policy through
//! [`commands::attest::Pools`], from the store alone (no key is unsealed).
//!
//! A policy names the attestors that may admit a machine into the pool
//! (`--join-attestors x509pop,join-token`); without one, any attestor the control plane runs
//! may. The ids are checked against the attestors the control plane runs: the built-ins
//! (`join-token`, `x509pop`, `provisioned`, `tpm`) and the ids given with `--external-attestor`
//! (repeatable: the external attestors of the serving configuration). A token may name a pool
//! that does not exist: it then has no policy (docs/DECISIONS.md).

use std::sync::Arc;

use clap::{Args, Subcommand};
use commands::attest::{AttestError, NewPool, PoolView, Pools, BUILTIN_ATTESTORS};
use commands::DatabaseClock;
use domain::attest::{AttestorPolicy, UpdatePool};
use events::store::{EventStore, StoreError};

use crate::deployment::CommonArgs;
use crate::deployment::DeploymentError;
use crate::verbs::token::{fmt_us, print_table, to_json};

/// Errors of `pool` and `join-request`.
#[derive(Debug, thiserror::Error)]
pub enum AttestCmdError {
    #[error("{0}")]
    Deployment(#[from] DeploymentError),
    #[error("store: {0}")]
    Store(#[from] StoreError),
    #[error("{0}")]
    Attest(#[from] AttestError),
    #[error("{0}")]
    Open(#[from] crate::deployment::OpenError),
}

/// Opens the deployment's store (docs/CLI.md "Finding the deployment"): the PKI bundle must
/// exist and parse (it names the deployment) and is read for its public half only.
/// A verb that writes (`write`) may create a SQLite store; one that reads never does.
pub async fn open_store(args: &CommonArgs, write: bool) -> Result<EventStore, AttestCmdError> {
    Ok(args.deployment.open_store_checked(write).await?)
}

#[derive(Subcommand)]
pub enum PoolCommand {
    /// Create a pool, with the attestors that may admit a machine into it.
    Create(CreateArgs),
    /// Show a pool.
    Show(ShowArgs),
    /// List pools.
    List(ListArgs),
    /// Replace a pool's description or attestor policy.
    Update(UpdateArgs),
}

/// The attestor ids a policy may name beyond the built-ins.
#[derive(Args, Clone, Debug)]
pub struct KnownArgs {
    /// An external attestor id the control plane runs (repeatable): a policy may name it.
    #[arg(long = "external-attestor", value_name = "ID")]
    pub external: Vec<String>,
}

impl KnownArgs {
    fn known(&self) -> Vec<String> {
        BUILTIN_ATTESTORS
            .iter()
            .map(|s| s.to_string())
            .chain(self.external.iter().cloned())
            .collect()
    }
}

#[derive(Args)]
pub struct CreateArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    #[command(flatten)]
    pub known: KnownArgs,
    /// The pool id.
    pub pool_id: String,
    /// The owning tenant.
    #[arg(long)]
    pub tenant: String,
    /// Free text.
    #[arg(long, default_value = "")]
    pub description: String,
    /// The attestors that may admit a machine, comma-separated (default: any).
    #[arg(long, value_name = "IDS")]
    pub join_attestors: Option<String>,
}

#[derive(Args)]
pub struct ShowArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// The pool id.
    pub pool_id: String,
}

#[derive(Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Only this tenant's.
    #[arg(long)]
    pub tenant: Option<String>,
}

#[derive(Args)]
pub struct UpdateArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    #[command(flatten)]
    pub known: KnownArgs,
    /// The pool id.
    pub pool_id: String,
    /// A new description.
    #[arg(long)]
    pub description: Option<String>,
    /// The attestors that may admit a machine from now on, comma-separated.
    #[arg(long, value_name = "IDS", conflicts_with = "any_attestor")]
    pub join_attestors: Option<String>,
    /// Drop the policy: any attestor the control plane runs may admit.
    #[arg(long)]
    pub any_attestor: bool,
}

/// `a,b` into the ids (`--join-attestors ""` is an empty list, which the decision refuses).
fn policy(ids: &str) -> AttestorPolicy {
    AttestorPolicy::Only(
        ids.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect(),
    )
}

fn pools(store: EventStore, known: Vec<String>) -> Pools {
    Pools::new(store, Arc::new(DatabaseClock::system()), known)
}

pub async fn run(cmd: PoolCommand) -> Result<(), AttestCmdError> {
    match cmd {
        PoolCommand::Create(args) => {
            let svc = pools(open_store(&args.common, true).await?, args.known.known());
            let pool = svc
                .create(&NewPool {
                    pool_id: args.pool_id,
                    tenant_id: args.tenant,
                    description: args.description,
                    join_attestors: args
                        .join_attestors
                        .as_deref()
                        .map_or(AttestorPolicy::Any, policy),
                })
                .await?;
            print_one(&pool, args.common.json, "created");
        }
        PoolCommand::Show(args) => {
            let svc = pools(open_store(&args.common, false).await?, Vec::new());
            let pool = svc.show(&args.pool_id).await?;
            print_one(&pool, args.common.json, "");
        }
        PoolCommand::List(args) => {
            let svc = pools(open_store(&args.common, false).await?, Vec::new());
            let list = svc.list(args.tenant.as_deref()).await?;
            if args.common.json {
                crate::outln!("{}", to_json(&list));
            } else {
                print_pools(&list);
            }
        }
        PoolCommand::Update(args) => {
            let join_attestors = match (&args.join_attestors, args.any_attestor) {
                (Some(ids), _) => Some(policy(ids)),
                (None, true) => Some(AttestorPolicy::Any),
                (None, false) => None,
            };
            let svc = pools(open_store(&args.common, true).await?, args.known.known());
            let pool = svc
                .update(&UpdatePool {
                    pool_id: args.pool_id,
                    description: args.description,
                    join_attestors,
                })
                .await?;
            print_one(&pool, args.common.json, "updated");
        }
    }
    Ok(())
}

fn print_one(pool: &PoolView, json: bool, verb: &str) {
    if json {
        crate::outln!("{}", to_json(pool));
        return;
    }
    if !verb.is_empty() {
        crate::outln!("{verb} pool {}", pool.pool_id);
    }
    print_pools(std::slice::from_ref(pool));
}

pub fn print_pools(pools: &[PoolView]) {
    let rows: Vec<Vec<String>> = pools
        .iter()
        .map(|p| {
            vec![
                p.pool_id.clone(),
                p.tenant_id.clone(),
                p.join_attestors
                    .as_ref()
                    .map_or_else(|| "(any)".to_owned(), |ids| ids.join(",")),
                fmt_us(p.updated_at_us),
                p.description.clone(),
            ]
        })
        .collect();
    print_table(
        &["POOL", "TENANT", "JOIN ATTESTORS", "UPDATED", "DESCRIPTION"],
        &rows,
    );
}
