//! `bcctl doctor`: the control plane's health, one finding per check, each with its level and
//! the exact fix (spec 003 "doctor"; docs/DOCTOR.md lists every id).
//!
//! - [`pki`]: the bundle (`pki.unreadable`, `pki.unseal`, `pki.ca-expired`, `pki.ca-expiring`)
//!   and what the deployment published (`pki.rotation`, `pki.quorum-unsigned`,
//!   `pki.quorum-change`, `pki.quorum-lag`);
//! - [`store`]: the database (`store.unreachable`, `store.unmigrated`), `clock.skew`,
//!   `audit.lag`, `audit.seal-lag`, `cert.expiry`;
//! - [`feed`]: `feed.lag`, read from the gateway's metrics endpoint (the feed lives in the
//!   gateway's memory).
//!
//! The exit code follows the worst finding: 0 for ok and info, 3 ([`EXIT_WARNING`]) for a
//! warning, 1 for an error. Doctor reads the bundle's public half and opens it with the secret
//! only to check that it opens (`pki.unseal`); it writes nothing.

mod feed;
mod finding;
mod oidc;
mod pki;
mod store;

use std::path::PathBuf;

use clap::Args;
use serde::Serialize;

pub use finding::{Finding, Level};

use crate::deployment::{DeploymentArgs, DIR_CONFIG_FILE};
use crate::serve::config::{resolve, ServeArgs, Settings};

/// The exit code when the worst finding is a warning (an error exits 1).
pub const EXIT_WARNING: u8 = crate::output::EXIT_SPECIAL;

#[derive(Args)]
pub struct DoctorArgs {
    #[command(flatten)]
    pub deployment: DeploymentArgs,
    /// The gateway's metrics endpoint (HOST:PORT or its http:// URL), for the revocation feed's
    /// lag; default: the configuration's metrics_listen.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
    /// Report node certificates that expire within this without a renewal (e.g. 6h, 2d).
    #[arg(long, value_name = "DURATION", default_value = "6h")]
    pub cert_horizon: String,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// The report `--json` prints.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Report<'a> {
    worst: Level,
    exit_code: u8,
    findings: &'a [Finding],
}

/// Why doctor could not run at all (a finding is never an error of this kind).
#[derive(Debug, thiserror::Error)]
pub enum DoctorError {
    #[error("--cert-horizon {value:?}: {why} (give a duration such as 6h or 2d)")]
    BadHorizon { value: String, why: String },
    #[error("--metrics {0:?}: give HOST:PORT or http://HOST:PORT/metrics")]
    BadMetrics(String),
}

/// The configuration doctor reads the quorum, the seal interval and the metrics address from:
/// `--config`, else the deployment directory's `bcctl.toml` when it has one.
fn config_file(args: &DeploymentArgs) -> Option<PathBuf> {
    args.config.clone().or_else(|| {
        args.directory()
            .map(|d| d.join(DIR_CONFIG_FILE))
            .filter(|f| f.is_file())
    })
}

/// `bcctl doctor`: runs every check, prints the findings, and answers the exit code.
pub async fn run(args: DoctorArgs) -> Result<u8, crate::command_line::failure::Failure> {
    let horizon = domain::duration::parse_duration(&args.cert_horizon).map_err(|why| {
        crate::command_line::failure::Failure::usage(
            DoctorError::BadHorizon {
                value: args.cert_horizon.clone(),
                why,
            }
            .to_string(),
        )
    })?;
    let metrics = match &args.metrics {
        Some(m) => Some(feed::metrics_addr(m).ok_or_else(|| {
            crate::command_line::failure::Failure::usage(
                DoctorError::BadMetrics(m.clone()).to_string(),
            )
        })?),
        None => None,
    };
    let mut findings = Vec::new();
    let located = match args.deployment.locate() {
        Ok(l) => Some(l),
        Err(e) => {
            findings.push(
                Finding::new("deployment.unlocated", Level::Error, e.to_string()).fix(
                    "bcctl doctor --dir DIR (or --config FILE, or --database-url URL --pki FILE)",
                ),
            );
            None
        }
    };
    let settings = settings(&args.deployment, &mut findings);
    if let Some(located) = &located {
        let bundle = pki::check_bundle(&located.deployment, &mut findings);
        let store = store::check_store(located, &mut findings).await;
        if let Some(store) = &store {
            if let Some(public) = &bundle {
                pki::check_published(store, public, settings.as_ref(), &mut findings).await;
            }
            store::check_clock(store, &mut findings).await;
            let interval = settings
                .as_ref()
                .map_or(commands::audit::sealer::DEFAULT_SEAL_INTERVAL, |s| {
                    s.audit_seal_interval
                });
            store::check_audit(store, interval, &mut findings).await;
            store::check_certs(store, horizon, &mut findings).await;
            let oidc = settings.as_ref().is_some_and(|s| s.oidc.is_some());
            oidc::check_oidc(store, oidc, &mut findings).await;
        }
    }
    let metrics = metrics.or_else(|| {
        settings
            .as_ref()
            .and_then(|s| s.metrics_listen.map(|a| a.to_string()))
    });
    feed::check_feed(metrics.as_deref(), &mut findings).await;

    let worst = findings.iter().map(|f| f.level).max().unwrap_or(Level::Ok);
    let code = exit_code(worst);
    if args.json {
        crate::output::print_json(&Report {
            worst,
            exit_code: code,
            findings: &findings,
        });
    } else {
        print_text(&findings, worst);
    }
    Ok(code)
}

/// The serve settings, when the configuration resolves; a configuration that does not is an
/// error finding and the checks go on with the defaults.
fn settings(args: &DeploymentArgs, findings: &mut Vec<Finding>) -> Option<Settings> {
    let config = config_file(args);
    match resolve(&ServeArgs {
        config: config.clone(),
        ..ServeArgs::default()
    }) {
        Ok(s) => Some(s),
        Err(e) => {
            findings.push(
                Finding::new("config.invalid", Level::Error, e.to_string()).fix(format!(
                    "correct {} (bcctl serve refuses it too)",
                    config.map_or("the environment".into(), |p| p.display().to_string())
                )),
            );
            None
        }
    }
}

/// 0 for ok and info, [`EXIT_WARNING`] for a warning, 1 for an error.
pub fn exit_code(worst: Level) -> u8 {
    match worst {
        Level::Ok | Level::Info => 0,
        Level::Warning => EXIT_WARNING,
        Level::Error => crate::output::EXIT_FAILED,
    }
}

fn print_text(findings: &[Finding], worst: Level) {
    for f in findings {
        crate::outln!("{:<7} {:<20} {}", f.level.as_str(), f.id, f.message);
        if let Some(fix) = &f.fix {
            crate::outln!("{:<28} fix: {fix}", "");
        }
    }
    let count = |l: Level| findings.iter().filter(|f| f.level == l).count();
    crate::outln!(
        "doctor: {} error(s), {} warning(s), {} info; worst: {}",
        count(Level::Error),
        count(Level::Warning),
        count(Level::Info),
        worst.as_str()
    );
}

/// The level an exit code of [`run`] stands for, for the error line.
pub fn worst_name(code: u8) -> &'static str {
    match code {
        EXIT_WARNING => "a warning",
        0 => "ok",
        _ => "an error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exit_code_follows_the_worst_level() {
        assert_eq!(exit_code(Level::Ok), 0);
        assert_eq!(exit_code(Level::Info), 0);
        assert_eq!(exit_code(Level::Warning), 3);
        assert_eq!(exit_code(Level::Error), 1);
        assert!(Level::Error > Level::Warning && Level::Warning > Level::Info);
        assert_eq!(worst_name(3), "a warning");
        assert_eq!(worst_name(1), "an error");
    }
}
