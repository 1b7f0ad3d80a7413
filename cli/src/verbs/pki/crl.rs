//! `bcctl pki crl`: the node CA's certificate revocation list (RFC 5280 v2), signed now from the
//! revocation projection (issue 41 item 4; docs/decisions/0088).
//!
//! It reads the log's head position, then every node certificate revoked and not yet expired,
//! and signs the list with the bundle's node CA key (`commands::crl::sign_current`): the bundle's keys are needed (`BC_DEPLOYMENT_SECRET` for a sealed
//! bundle). The CRL number is the head position times 10^16 plus `thisUpdate` in microseconds;
//! with `--out` over a list this node CA signed before, at least one above that list's number.
//!
//! Without `--out` the PEM goes to standard output; with it, the file is written beside itself
//! and renamed over the old one (mode 0644: a CRL is public). `--json` prints what was signed.

use std::path::PathBuf;

use clap::Args;
use domain::pki::{crl_number_of, read_pem_blocks, CrlNumber, KeySet, SignedCrl};
use serde_json::json;
use time::{Duration, OffsetDateTime};

use crate::deployment::DeploymentArgs;
use crate::output::{print_json, rfc3339};
use crate::verbs::pki::common::{replace_file, PkiCmdError};

#[derive(Args)]
pub struct CrlArgs {
    #[command(flatten)]
    pub deployment: DeploymentArgs,
    /// Write the list to FILE (PEM, replaced atomically) instead of standard output; a list
    /// this node CA signed already in FILE is the floor of the new CRL number.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// How long after thisUpdate the next list is due (nextUpdate): 30s, 90m, 1h, 7d (at most
    /// 7d).
    #[arg(long, value_name = "DURATION", default_value = "1h")]
    pub next_update: String,
    #[arg(long)]
    pub json: bool,
}

/// `30s`, `90m`, `1h`, `7d` (or bare seconds) as a positive duration.
fn parse_interval(text: &str) -> Result<Duration, PkiCmdError> {
    crate::verbs::token::positive_seconds(text)
        .map(Duration::seconds)
        .ok_or_else(|| {
            PkiCmdError::Usage(format!(
                "--next-update {text:?}: expected a positive number with a unit s, m, h or d (e.g. 1h)"
            ))
        })
}

/// The number of the list already at `out`, when this node CA signed it.
fn floor_of(keys: &KeySet, out: Option<&PathBuf>) -> Option<CrlNumber> {
    let text = std::fs::read_to_string(out?).ok()?;
    let blocks = read_pem_blocks("X509 CRL", &text).ok()?;
    crl_number_of(&keys.node_ca, blocks.first()?)
}

/// `pki crl`.
pub async fn crl(args: CrlArgs) -> Result<(), PkiCmdError> {
    let interval = parse_interval(&args.next_update)?;
    let keys = args
        .deployment
        .locate()
        .map_err(|e| PkiCmdError::Internal(e.to_string()))?
        .deployment
        .keys()?;
    let store = args
        .deployment
        .connect_store()
        .await
        .map_err(|e| PkiCmdError::Internal(e.to_string()))?;
    let now = OffsetDateTime::now_utc();
    let floor = floor_of(&keys, args.out.as_ref());
    let current = commands::crl::sign_current(&store, &keys.node_ca, floor, interval, now)
        .await
        .map_err(|e| match e {
            commands::crl::CrlSignError::Sign(e @ domain::pki::CrlError::BadInterval(_)) => {
                PkiCmdError::Usage(format!("--next-update: {e}"))
            }
            commands::crl::CrlSignError::Store(e) => PkiCmdError::Internal(format!("store: {e}")),
            e => PkiCmdError::Internal(format!("signing the revocation list: {e}")),
        })?;
    let (signed, log_position) = (current.signed, current.log_position);
    let pem = signed.pem();
    if let Some(out) = &args.out {
        replace_file(out, pem.as_bytes(), 0o644)?;
    }
    report(&args, &signed, log_position, &pem);
    Ok(())
}

fn report(args: &CrlArgs, signed: &SignedCrl, log_position: i64, pem: &str) {
    if args.json {
        let revoked: Vec<_> = signed
            .entries
            .iter()
            .map(|e| json!({"serial": e.serial.to_hex(), "revokedAt": rfc3339(e.revoked_at)}))
            .collect();
        print_json(&json!({
            "out": args.out.as_ref().map(|p| p.display().to_string()),
            "crlNumber": signed.number.to_string(),
            "logPosition": log_position,
            "thisUpdate": rfc3339(signed.this_update),
            "nextUpdate": rfc3339(signed.next_update),
            "revoked": revoked,
            "pem": args.out.is_none().then_some(pem),
        }));
        return;
    }
    match &args.out {
        Some(out) => crate::outln!(
            "wrote {}: {} revoked certificate(s), CRL number {}, next update due {}",
            out.display(),
            signed.entries.len(),
            signed.number,
            rfc3339(signed.next_update)
        ),
        None => crate::out!("{pem}"),
    }
}
