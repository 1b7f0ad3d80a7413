//! `bcctl attestor entry add | list | remove`: every operator-managed attestor list through
//! [`commands::attest::AttestorEntries`], from the store alone (no key is unsealed). A list an
//! attestor declares (`commands::identity::attestors::FACTORIES`) keeps its own key and role
//! rules; any other name (an attestor built elsewhere, such as `examples/acme-asset`) gets the
//! generic ones ([`domain::attest::EntryList::generic`]). Also the printing the two lists with
//! verbs of their own share (`bcctl tpm …`, `bcctl cloud account …`).

use std::sync::Arc;

use clap::{Args, Subcommand};
use commands::attest::{AttestorEntries, EntryView, NewEntry};
use commands::identity::attestors::FACTORIES;
use commands::DatabaseClock;
use domain::attest::{entry_list, EntryList};
use serde::Serialize;

use crate::deployment::CommonArgs;
use crate::verbs::pool::{open_store, AttestCmdError};
use crate::verbs::token::{fmt_us, print_table, to_json};

#[derive(Subcommand)]
pub enum AttestorCommand {
    /// The entries of an attestor's operator-managed list: add, list, remove.
    #[command(subcommand)]
    Entry(EntryCommand),
}

#[derive(Subcommand)]
pub enum EntryCommand {
    /// Add an entry: a machine proving its key joins at this placement.
    Add(AddArgs),
    /// List a list's entries, removed ones too, oldest first.
    List(ListArgs),
    /// Remove an entry: its key no longer joins through it (joined nodes stay).
    Remove(RemoveArgs),
}

#[derive(Args)]
pub struct AddArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// The list (`tpm-allow`, `cloud-account`, or an attestor's own).
    #[arg(long)]
    pub list: String,
    /// The key the attestor looks the entry up by.
    #[arg(long)]
    pub key: String,
    /// The tenant the machine joins.
    #[arg(long)]
    pub tenant: String,
    /// Its site.
    #[arg(long)]
    pub site: String,
    /// Its pool.
    #[arg(long)]
    pub pool: String,
    /// The role it joins as, when the list names one.
    #[arg(long, default_value = "")]
    pub role: String,
    /// Free text (recorded in the event).
    #[arg(long, default_value = "")]
    pub note: String,
}

#[derive(Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// The list.
    #[arg(long)]
    pub list: String,
}

#[derive(Args)]
pub struct RemoveArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// The list.
    #[arg(long)]
    pub list: String,
    /// The entry id.
    pub entry_id: String,
    /// Why (recorded in the event).
    #[arg(long, default_value = "")]
    pub reason: String,
}

/// The attestor lists of the deployment's store.
pub async fn entries(common: &CommonArgs, write: bool) -> Result<AttestorEntries, AttestCmdError> {
    Ok(AttestorEntries::new(
        open_store(common, write).await?,
        Arc::new(DatabaseClock::system()),
    ))
}

/// The list named `name`: its attestor's rules, else the generic ones. The name lives for the
/// rest of this one-shot process.
fn list_named(name: &str) -> EntryList {
    entry_list(FACTORIES, Box::leak(name.to_owned().into_boxed_str()))
}

pub async fn run(cmd: AttestorCommand) -> Result<(), AttestCmdError> {
    let AttestorCommand::Entry(cmd) = cmd;
    match cmd {
        EntryCommand::Add(args) => {
            let list = list_named(&args.list);
            let new = NewEntry {
                key: args.key,
                tenant_id: args.tenant,
                site_id: args.site,
                pool_id: args.pool,
                role: args.role,
                actor: crate::invocation::actor().id().to_string(),
                note: args.note,
            };
            let entry = entries(&args.common, true).await?.add(&list, &new).await?;
            print_one(&ENTRIES, &entry, args.common.json, "added", &entry.entry_id);
        }
        EntryCommand::List(args) => {
            let list = list_named(&args.list);
            let all = entries(&args.common, false).await?.list(&list).await?;
            print_list(&ENTRIES, &all, args.common.json);
        }
        EntryCommand::Remove(args) => {
            let list = list_named(&args.list);
            let actor = crate::invocation::actor();
            let svc = entries(&args.common, true).await?;
            let entry = svc
                .remove(&list, &args.entry_id, actor.id(), &args.reason)
                .await?;
            print_one(
                &ENTRIES,
                &entry,
                args.common.json,
                "removed",
                &entry.entry_id,
            );
        }
    }
    Ok(())
}

/// How a list's entries print: what one is called, the table's header, an entry's cells.
pub struct Printer<V> {
    /// `tpm allow-list entry`, `attestor entry`.
    pub noun: &'static str,
    /// The table's header.
    pub header: &'static [&'static str],
    /// An entry's cells, in the header's order.
    pub cells: fn(&V) -> Vec<String>,
}

/// One entry after a change: `--json`, or `<verb> <noun> <id>` and its table row.
pub fn print_one<V: Serialize>(p: &Printer<V>, entry: &V, json: bool, verb: &str, id: &str) {
    if json {
        crate::outln!("{}", to_json(entry));
        return;
    }
    crate::outln!("{verb} {} {id}", p.noun);
    print_table(p.header, &[(p.cells)(entry)]);
}

/// A list: `--json`, or its table.
pub fn print_list<V: Serialize>(p: &Printer<V>, list: &[V], json: bool) {
    if json {
        crate::outln!("{}", to_json(&list));
        return;
    }
    let rows: Vec<Vec<String>> = list.iter().map(p.cells).collect();
    print_table(p.header, &rows);
}

const ENTRIES: Printer<EntryView> = Printer {
    noun: "attestor entry",
    header: &[
        "ID", "LIST", "KEY", "TENANT", "SITE", "POOL", "ROLE", "STATUS", "UPDATED", "NOTE",
    ],
    cells: |e| {
        vec![
            e.entry_id.clone(),
            e.list.clone(),
            e.key.clone(),
            e.tenant_id.clone(),
            e.site_id.clone(),
            e.pool_id.clone(),
            e.role.clone().unwrap_or_default(),
            e.status.clone(),
            fmt_us(e.updated_at_us),
            e.note.clone(),
        ]
    },
};
