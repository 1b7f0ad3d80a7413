//! `bcctl cloud account add | list | remove`: the registry of cloud accounts, the
//! `cloud-account` list of the generic attestor entries (`bcctl attestor entry --list
//! cloud-account`, keys `<provider>/<account>`) under verbs and columns of its own, run by the
//! one implementation of such verbs ([`crate::verbs::attestor::run_entry_verb`]), from the
//! store alone (no key is unsealed). An entry names one (provider, account) and where its
//! instances join through `cloud-iid`; an instance of an account nobody registered is refused
//! `cloud-iid:unknown-instance`.

use clap::{Args, Subcommand};
use commands::attest::{CloudAccountView, NewEntry};
use domain::attest::cloud_iid::CLOUD_ACCOUNT_LIST;

use crate::deployment::CommonArgs;
use crate::verbs::attestor::{run_entry_verb, EntryVerb, ListVerbs, Printer};
use crate::verbs::pool::AttestCmdError;
use crate::verbs::token::fmt_us;

#[derive(Subcommand)]
pub enum CloudCommand {
    /// The registry of cloud accounts: add, list, remove.
    #[command(subcommand)]
    Account(AccountCommand),
}

#[derive(Subcommand)]
pub enum AccountCommand {
    /// Register an account: its instances join through cloud-iid at this placement.
    Add(AddArgs),
    /// List the registry, removed entries too, oldest first.
    List(ListArgs),
    /// Remove an entry: the account's instances no longer join (joined nodes stay).
    Remove(RemoveArgs),
}

#[derive(Args)]
pub struct AddArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// aws, gcp, azure or oidc.
    #[arg(long)]
    pub provider: String,
    /// The AWS account id, GCP project id, Azure subscription id or OIDC issuer.
    #[arg(long)]
    pub account: String,
    /// The tenant its instances join.
    #[arg(long)]
    pub tenant: String,
    /// Their site.
    #[arg(long)]
    pub site: String,
    /// Their pool.
    #[arg(long)]
    pub pool: String,
    /// Their role.
    #[arg(long, default_value = "node")]
    pub role: String,
}

#[derive(Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub common: CommonArgs,
}

#[derive(Args)]
pub struct RemoveArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// The entry id (cloud_...).
    pub entry_id: String,
    /// Why (recorded in the event).
    #[arg(long, default_value = "")]
    pub reason: String,
}

pub async fn run(cmd: CloudCommand) -> Result<(), AttestCmdError> {
    let CloudCommand::Account(cmd) = cmd;
    let verb = match cmd {
        AccountCommand::Add(args) => {
            let new = NewEntry {
                key: format!("{}/{}", args.provider, args.account),
                tenant_id: args.tenant,
                site_id: args.site,
                pool_id: args.pool,
                role: args.role,
                actor: crate::invocation::actor().id().to_string(),
                note: String::new(),
            };
            EntryVerb::Add(args.common, new)
        }
        AccountCommand::List(args) => EntryVerb::List(args.common),
        AccountCommand::Remove(args) => EntryVerb::Remove {
            common: args.common,
            entry_id: args.entry_id,
            reason: args.reason,
        },
    };
    run_entry_verb(&ACCOUNT_LIST, verb).await
}

/// The registry under its verbs: `added`, `removed`.
const ACCOUNT_LIST: ListVerbs<CloudAccountView> = ListVerbs {
    list: CLOUD_ACCOUNT_LIST,
    printer: &ACCOUNTS,
    view: CloudAccountView::from,
    added: "added",
    removed: "removed",
};

/// The registry's table, as it always printed.
const ACCOUNTS: Printer<CloudAccountView> = Printer {
    noun: "cloud account entry",
    header: &[
        "ID", "PROVIDER", "ACCOUNT", "TENANT", "SITE", "POOL", "ROLE", "STATUS", "UPDATED",
    ],
    cells: |e| {
        vec![
            e.entry_id.clone(),
            e.provider.clone(),
            e.account.clone(),
            e.tenant_id.clone(),
            e.site_id.clone(),
            e.pool_id.clone(),
            e.role.clone(),
            e.status.clone(),
            fmt_us(e.updated_at_us),
        ]
    },
};
