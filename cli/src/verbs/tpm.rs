//! `bcctl tpm allow | list | revoke`: the TPM allow-list (the `tpm-allow` list of the generic
//! attestor entries, `bcctl attestor entry --list tpm-allow`) through
//! [`commands::attest::TpmAllows`], printed as it always was, from the store alone (no key is unsealed). An entry names
//! one endorsement key by the SHA-256 of its TPMT_PUBLIC (`bcd` prints it) and where a machine
//! proving it joins; an EK already bound to a node reclaims that node whatever the list says.

use std::sync::Arc;

use clap::{Args, Subcommand};
use commands::attest::{NewTpmAllow, TpmAllowView, TpmAllows};
use commands::DatabaseClock;

use crate::deployment::CommonArgs;
use crate::verbs::attestor::{print_list, print_one, Printer};
use crate::verbs::pool::{open_store, AttestCmdError};
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

async fn open(common: &CommonArgs, write: bool) -> Result<TpmAllows, AttestCmdError> {
    Ok(TpmAllows::new(
        open_store(common, write).await?,
        Arc::new(DatabaseClock::system()),
    ))
}

pub async fn run(cmd: TpmCommand) -> Result<(), AttestCmdError> {
    match cmd {
        TpmCommand::Allow(args) => {
            let svc = open(&args.common, true).await?;
            let entry = svc
                .allow(&NewTpmAllow {
                    ek_sha256_hex: args.ek_sha256,
                    tenant_id: args.tenant,
                    site_id: args.site,
                    pool_id: args.pool,
                    actor: crate::invocation::actor().id().to_string(),
                    note: args.note,
                })
                .await?;
            print_one(
                &ALLOWS,
                &entry,
                args.common.json,
                "allowed",
                &entry.allow_id,
            );
        }
        TpmCommand::List(args) => {
            let list = open(&args.common, false).await?.list().await?;
            print_list(&ALLOWS, &list, args.common.json);
        }
        TpmCommand::Revoke(args) => {
            let svc = open(&args.common, true).await?;
            let actor = crate::invocation::actor();
            let entry = svc.revoke(&args.allow_id, actor.id(), &args.reason).await?;
            print_one(
                &ALLOWS,
                &entry,
                args.common.json,
                "revoked",
                &entry.allow_id,
            );
        }
    }
    Ok(())
}

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
