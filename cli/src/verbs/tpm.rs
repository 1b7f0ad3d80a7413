//! `bcctl tpm allow | list | revoke`: the TPM allow-list, the `tpm-allow` list of the generic
//! attestor entries (`bcctl attestor entry --list tpm-allow`) under verbs, columns and words of
//! its own, run by the one implementation of such verbs
//! ([`crate::verbs::attestor::run_entry_verb`]), from the store alone (no key is unsealed). An
//! entry names one endorsement key by the SHA-256 of its TPMT_PUBLIC (`bcd` prints it) and where
//! a machine proving it joins; an EK already bound to a node reclaims that node whatever the
//! list says.

use clap::{Args, Subcommand};
use commands::attest::{NewEntry, TpmAllowView};
use domain::attest::tpm::TPM_ALLOW_LIST;

use crate::deployment::CommonArgs;
use crate::verbs::attestor::{run_entry_verb, EntryVerb, ListVerbs, Printer};
use crate::verbs::pool::AttestCmdError;
use crate::verbs::token::fmt_us;

#[derive(Subcommand)]
pub enum TpmCommand {
    /// Allow one TPM's EK: a machine proving it joins as a new node at this placement.
    Allow(AllowArgs),
    /// List the allow-list, revoked entries too, oldest first.
    List(ListArgs),
    /// Revoke an entry: its EK no longer joins through it.
    Revoke(RevokeArgs),
}

#[derive(Args)]
pub struct AllowArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// SHA-256 of the EK's TPMT_PUBLIC, 64 hex digits.
    #[arg(long = "ek-sha256", value_name = "HEX")]
    pub ek_sha256: String,
    /// The tenant the machine joins.
    #[arg(long)]
    pub tenant: String,
    /// Its site.
    #[arg(long)]
    pub site: String,
    /// Its pool.
    #[arg(long)]
    pub pool: String,
    /// Free text (recorded in the event).
    #[arg(long, default_value = "")]
    pub note: String,
}

#[derive(Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub common: CommonArgs,
}

#[derive(Args)]
pub struct RevokeArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// The entry id (tpma_...).
    pub allow_id: String,
    /// Why (recorded in the event).
    #[arg(long, default_value = "")]
    pub reason: String,
}

pub async fn run(cmd: TpmCommand) -> Result<(), AttestCmdError> {
    let verb = match cmd {
        TpmCommand::Allow(args) => {
            let new = NewEntry {
                key: args.ek_sha256,
                tenant_id: args.tenant,
                site_id: args.site,
                pool_id: args.pool,
                role: String::new(),
                actor: crate::invocation::actor().id().to_string(),
                note: args.note,
            };
            EntryVerb::Add(args.common, new)
        }
        TpmCommand::List(args) => EntryVerb::List(args.common),
        TpmCommand::Revoke(args) => EntryVerb::Remove {
            common: args.common,
            entry_id: args.allow_id,
            reason: args.reason,
        },
    };
    run_entry_verb(&ALLOW_LIST, verb).await
}

/// The allow-list under its verbs: `allowed`, `revoked`.
const ALLOW_LIST: ListVerbs<TpmAllowView> = ListVerbs {
    list: TPM_ALLOW_LIST,
    printer: &ALLOWS,
    view: TpmAllowView::from,
    added: "allowed",
    removed: "revoked",
};

/// The allow-list's table, as it always printed.
const ALLOWS: Printer<TpmAllowView> = Printer {
    noun: "tpm allow-list entry",
    header: &[
        "ID",
        "EK SHA-256",
        "TENANT",
        "SITE",
        "POOL",
        "STATUS",
        "UPDATED",
        "NOTE",
    ],
    cells: |e| {
        vec![
            e.allow_id.clone(),
            e.ek_sha256.clone(),
            e.tenant_id.clone(),
            e.site_id.clone(),
            e.pool_id.clone(),
            e.status.clone(),
            fmt_us(e.updated_at_us),
            e.note.clone(),
        ]
    },
};
