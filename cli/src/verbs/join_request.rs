//! `bcctl join-request list | show | approve | reject`: the approval requests of deferred joins
//! through [`commands::attest::JoinRequests`], from the store alone. An approved request lets
//! the agent's next retry join; a rejected one refuses it.

use std::sync::Arc;

use clap::{Args, Subcommand};
use commands::attest::{JoinRequestView, JoinRequests};
use commands::DatabaseClock;

use crate::deployment::CommonArgs;
use crate::verbs::pool::{open_store, AttestCmdError};
use crate::verbs::token::{fmt_us, print_table, to_json};

#[derive(Subcommand)]
pub enum JoinRequestCommand {
    /// List join requests, oldest first.
    List(ListArgs),
    /// Show a join request.
    Show(ShowArgs),
    /// Approve a pending join request: the agent's next retry joins.
    Approve(DecideArgs),
    /// Reject a pending join request: retries with it are refused.
    Reject(DecideArgs),
}

#[derive(Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Only this tenant's.
    #[arg(long)]
    pub tenant: Option<String>,
    /// Only with this status: pending, approved, rejected, consumed or expired.
    #[arg(long)]
    pub status: Option<String>,
}

#[derive(Args)]
pub struct ShowArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// The request id (jr_...).
    pub request_id: String,
}

#[derive(Args)]
pub struct DecideArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// The request id (jr_...).
    pub request_id: String,
    /// Why (recorded in the event).
    #[arg(long, default_value = "")]
    pub reason: String,
}

pub async fn run(cmd: JoinRequestCommand) -> Result<(), AttestCmdError> {
    match cmd {
        JoinRequestCommand::List(args) => {
            let svc = open(&args.common, false).await?;
            let list = svc
                .list(args.tenant.as_deref(), args.status.as_deref())
                .await?;
            if args.common.json {
                crate::outln!("{}", to_json(&list));
            } else {
                print_requests(&list);
            }
        }
        JoinRequestCommand::Show(args) => {
            let svc = open(&args.common, false).await?;
            let r = svc.show(&args.request_id).await?;
            if args.common.json {
                crate::outln!("{}", to_json(&r));
            } else {
                print_detail(&r);
            }
        }
        JoinRequestCommand::Approve(args) => {
            let svc = open(&args.common, true).await?;
            let r = svc
                .approve(
                    &args.request_id,
                    crate::invocation::actor().id(),
                    &args.reason,
                )
                .await?;
            print_decided(&r, args.common.json, "approved");
        }
        JoinRequestCommand::Reject(args) => {
            let svc = open(&args.common, true).await?;
            let r = svc
                .reject(
                    &args.request_id,
                    crate::invocation::actor().id(),
                    &args.reason,
                )
                .await?;
            print_decided(&r, args.common.json, "rejected");
        }
    }
    Ok(())
}

async fn open(common: &CommonArgs, write: bool) -> Result<JoinRequests, AttestCmdError> {
    Ok(JoinRequests::new(
        open_store(common, write).await?,
        Arc::new(DatabaseClock::system()),
    ))
}

fn print_decided(r: &JoinRequestView, json: bool, verb: &str) {
    if json {
        crate::outln!("{}", to_json(r));
    } else {
        crate::outln!("{verb} join request {}", r.request_id);
        print_requests(std::slice::from_ref(r));
    }
}

pub fn print_requests(list: &[JoinRequestView]) {
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|r| {
            vec![
                r.request_id.clone(),
                r.tenant_id.clone(),
                r.attestor.clone(),
                r.role.clone(),
                r.pool_id.clone(),
                r.status.clone(),
                fmt_us(r.created_at_us),
                fmt_us(r.expires_at_us),
                r.summary.clone(),
            ]
        })
        .collect();
    print_table(
        &[
            "REQUEST", "TENANT", "ATTESTOR", "ROLE", "POOL", "STATUS", "CREATED", "EXPIRES",
            "SUMMARY",
        ],
        &rows,
    );
}

fn print_detail(r: &JoinRequestView) {
    let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    let lines = [
        ("request", r.request_id.clone()),
        ("tenant", r.tenant_id.clone()),
        ("attestor", r.attestor.clone()),
        ("subject sha256", r.subject_sha256.clone()),
        ("csr sha256", r.csr_sha256.clone()),
        ("role", r.role.clone()),
        ("site", r.site_id.clone()),
        ("pool", r.pool_id.clone()),
        ("node", opt(&r.node_id)),
        ("token", opt(&r.token_id)),
        ("summary", r.summary.clone()),
        ("status", r.status.clone()),
        ("decided by", opt(&r.decided_by)),
        ("reason", opt(&r.decision_reason)),
        ("joined node", opt(&r.joined_node_id)),
        ("created", fmt_us(r.created_at_us)),
        ("expires", fmt_us(r.expires_at_us)),
    ];
    for (k, v) in lines {
        crate::outln!("{k:<15} {v}");
    }
}
