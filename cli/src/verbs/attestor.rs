//! `bcctl attestor entry add | list | remove`: every operator-managed attestor list through
//! [`commands::attest::AttestorEntries`], from the store alone (no key is unsealed). A list an
//! attestor declares (`commands::identity::attestors::FACTORIES`) keeps its own key and role
//! rules; any other name (an attestor built elsewhere, such as `examples/acme-asset`) gets the
//! generic ones ([`domain::attest::EntryList::generic`]). Also the one implementation of the
//! lists with verbs of their own (`bcctl tpm …`, `bcctl cloud account …`): [`ListVerbs`] names
//! the list, its printing and its words, and [`run_entry_verb`] adds, lists or removes.

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
    let (name, verb) = match cmd {
        EntryCommand::Add(args) => {
            let new = NewEntry {
                key: args.key,
                tenant_id: args.tenant,
                site_id: args.site,
                pool_id: args.pool,
                role: args.role,
                actor: crate::invocation::actor().id().to_string(),
                note: args.note,
            };
            (args.list, EntryVerb::Add(args.common, new))
        }
        EntryCommand::List(args) => (args.list, EntryVerb::List(args.common)),
        EntryCommand::Remove(args) => {
            let verb = EntryVerb::Remove {
                common: args.common,
                entry_id: args.entry_id,
                reason: args.reason,
            };
            (args.list, verb)
        }
    };
    let verbs = ListVerbs {
        list: list_named(&name),
        printer: &ENTRIES,
        view: |e| e,
        added: "added",
        removed: "removed",
    };
    run_entry_verb(&verbs, verb).await
}

/// One operator-managed list under verbs: the list, how its entries print, and the words its
/// changes print with (`allowed` / `revoked`, `added` / `removed`).
pub struct ListVerbs<V: 'static> {
    /// The list.
    pub list: EntryList,
    /// Its table.
    pub printer: &'static Printer<V>,
    /// An entry as these verbs show it.
    pub view: fn(EntryView) -> V,
    /// The word an added entry prints with.
    pub added: &'static str,
    /// The word a removed entry prints with.
    pub removed: &'static str,
}

/// What one verb of a list asks, its arguments read.
pub enum EntryVerb {
    /// Add an entry.
    Add(CommonArgs, NewEntry),
    /// List the entries, removed ones too.
    List(CommonArgs),
    /// Remove an entry (the actor is the invocation's).
    Remove {
        common: CommonArgs,
        entry_id: String,
        reason: String,
    },
}

/// Runs `verb` on the list of `verbs`, from the store alone, and prints the outcome.
pub async fn run_entry_verb<V: Serialize>(
    verbs: &ListVerbs<V>,
    verb: EntryVerb,
) -> Result<(), AttestCmdError> {
    match verb {
        EntryVerb::Add(common, new) => {
            let entry = entries(&common, true).await?.add(&verbs.list, &new).await?;
            let id = entry.entry_id.clone();
            let view = (verbs.view)(entry);
            print_one(verbs.printer, &view, common.json, verbs.added, &id);
        }
        EntryVerb::List(common) => {
            let all = entries(&common, false).await?.list(&verbs.list).await?;
            let views: Vec<V> = all.into_iter().map(verbs.view).collect();
            print_list(verbs.printer, &views, common.json);
        }
        EntryVerb::Remove {
            common,
            entry_id,
            reason,
        } => {
            let actor = crate::invocation::actor();
            let svc = entries(&common, true).await?;
            let entry = svc
                .remove(&verbs.list, &entry_id, actor.id(), &reason)
                .await?;
            let id = entry.entry_id.clone();
            let view = (verbs.view)(entry);
            print_one(verbs.printer, &view, common.json, verbs.removed, &id);
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
fn print_one<V: Serialize>(p: &Printer<V>, entry: &V, json: bool, verb: &str, id: &str) {
    if json {
        crate::outln!("{}", to_json(entry));
        return;
    }
    crate::outln!("{verb} {} {id}", p.noun);
    print_table(p.header, &[(p.cells)(entry)]);
}

/// A list: `--json`, or its table.
fn print_list<V: Serialize>(p: &Printer<V>, list: &[V], json: bool) {
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
