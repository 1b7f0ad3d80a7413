//! `bcctl operator list | revoke` (issue 23): the operator certificates the log records, and
//! revoking one by serial (`operator.cert.revoked`; the admin API refuses it at the handshake
//! from then on). Through [`commands::operators`], from the store alone (no key is unsealed).
//! A repeated revocation is idempotent: exit 0, "already revoked", nothing appended.

use clap::{Args, Subcommand};
use commands::operators::{list_operators, revoke_operator, OperatorCertView, OperatorError};
use commands::DatabaseClock;

use crate::deployment::{CommonArgs, OpenError};
use crate::output::print_json;
use crate::verbs::token::{fmt_us, print_table};

#[derive(Subcommand)]
pub enum OperatorCommand {
    /// List the operator certificates issued, revoked ones too, oldest first.
    List(ListArgs),
    /// Revoke an operator certificate by serial: the admin API refuses it from then on.
    Revoke(RevokeArgs),
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
    /// The certificate's serial, hex as `bcctl operator list` prints it (openssl's
    /// colon-separated spelling is accepted).
    #[arg(long, value_name = "HEX")]
    pub serial: String,
    /// Why it is revoked (recorded in the event).
    #[arg(long, value_name = "TEXT")]
    pub reason: String,
}

/// Why an operator verb failed.
#[derive(Debug, thiserror::Error)]
pub enum OperatorCmdError {
    #[error("{0}")]
    Open(#[from] OpenError),
    #[error("{0}")]
    Operator(#[from] OperatorError),
}

impl OperatorCmdError {
    /// 2 for a bad value, 1 for everything else.
    pub fn exit_code(&self) -> u8 {
        match self {
            OperatorCmdError::Operator(e) if e.is_usage() => crate::output::EXIT_USAGE,
            _ => crate::output::EXIT_FAILED,
        }
    }
}

pub async fn run(cmd: OperatorCommand) -> Result<(), OperatorCmdError> {
    match cmd {
        OperatorCommand::List(args) => {
            let store = args.common.deployment.open_store().await?;
            let list = list_operators(&store).await?;
            if args.common.json {
                print_json(&list.iter().map(view_json).collect::<Vec<_>>());
            } else if list.is_empty() {
                crate::outln!("no operator certificates (bcctl pki issue-operator issues one)");
            } else {
                print_certs(&list);
            }
        }
        OperatorCommand::Revoke(args) => {
            let store = args
                .common
                .deployment
                .open_store_as(true)
                .await?
                .acting_as(crate::invocation::actor());
            let outcome =
                revoke_operator(&store, &DatabaseClock::system(), &args.serial, &args.reason)
                    .await?;
            let c = &outcome.certificate;
            if args.common.json {
                let mut doc = view_json(c);
                doc["alreadyRevoked"] = serde_json::Value::Bool(!outcome.recorded);
                print_json(&doc);
            } else if outcome.recorded {
                crate::outln!(
                    "revoked operator certificate {} of {} ({}): the admin API refuses it from now on",
                    c.serial,
                    c.spiffe_id,
                    c.role
                );
            } else {
                crate::outln!(
                    "operator certificate {} of {} already revoked: nothing to do",
                    c.serial,
                    c.spiffe_id
                );
            }
        }
    }
    Ok(())
}

fn view_json(c: &OperatorCertView) -> serde_json::Value {
    serde_json::json!({
        "serial": c.serial,
        "name": c.name,
        "role": c.role,
        "spiffeId": c.spiffe_id,
        "notBefore": fmt_us(c.not_before_us),
        "notBeforeUs": c.not_before_us,
        "notAfter": fmt_us(c.not_after_us),
        "notAfterUs": c.not_after_us,
        "certificateSha256": c.certificate_sha256,
        "issuedAt": fmt_us(c.issued_at_us),
        "revoked": c.revoked,
        "revokeReason": c.revoke_reason,
        "revokedAt": c.revoked_at_us.map(fmt_us),
    })
}

fn print_certs(list: &[OperatorCertView]) {
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|c| {
            vec![
                c.serial.clone(),
                c.name.clone(),
                c.role.clone(),
                fmt_us(c.not_after_us),
                if c.revoked {
                    format!("revoked: {}", c.revoke_reason.as_deref().unwrap_or(""))
                } else {
                    "active".to_string()
                },
            ]
        })
        .collect();
    print_table(&["SERIAL", "NAME", "ROLE", "NOT AFTER", "STATE"], &rows);
}
