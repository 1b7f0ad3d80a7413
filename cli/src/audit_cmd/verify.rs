//! `bcctl audit verify`: a tenant's trail, from the database or an export, checked offline
//! against the pinned audit key with the domain's one trail verifier.

use std::io::{BufRead, BufReader, IsTerminal};

use commands::audit::reads;
use domain::audit::{verify_trail, AuditPublicKey, Progress, TrailFault};
use events::store::EventStore;
use serde::Serialize;

use super::args::VerifyArgs;
use super::error::AuditCmdError;
use super::format::{checkpoint_line, trail_checkpoint, CheckpointLine, Header, EXPORT_FORMAT};
use super::leaves::{LeafSource, Leaves};
use super::trust::trust;

/// What `verify` reports.
#[derive(Serialize)]
struct Report {
    ok: bool,
    tenant: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    leaves: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    checkpoints: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    signed_size: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    signed_root: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    unsealed_leaves: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fault: Option<FaultReport>,
}

#[derive(Serialize)]
struct FaultReport {
    kind: &'static str,
    message: String,
    index: Option<u64>,
    position: Option<i64>,
    checkpoint: Option<usize>,
}

fn fault_kind(f: &TrailFault) -> &'static str {
    match f {
        TrailFault::TamperedLeaf { .. } => "tampered_leaf",
        TrailFault::MissingLeaf { .. } => "missing_leaf",
        TrailFault::ExtraLeaf { .. } => "extra_leaf",
        TrailFault::RootMismatch { .. } => "root_mismatch",
        TrailFault::BadSignature { .. } => "bad_signature",
        TrailFault::WrongKey { .. } => "wrong_key",
        TrailFault::MalformedCheckpoint { .. } => "malformed_checkpoint",
        TrailFault::Fork { .. } => "fork",
        TrailFault::NotExtension { .. } => "not_extension",
        TrailFault::BrokenChain { .. } => "broken_chain",
    }
}

pub(super) async fn verify(args: VerifyArgs) -> Result<(), AuditCmdError> {
    let trust = trust(
        args.pin.as_deref(),
        args.pki.as_ref(),
        args.trust_domain.as_deref(),
    )?;
    let (tenant, checkpoint_lines, stated_origin, carried_key, source, total) = match (
        &args.bundle,
        &args.tenant,
    ) {
        (Some(path), tenant) => {
            let file = std::fs::File::open(path).map_err(|source| AuditCmdError::Io {
                what: "cannot open",
                path: path.clone(),
                source,
            })?;
            let mut reader = BufReader::with_capacity(1 << 20, file);
            let mut line = String::new();
            let read = |reader: &mut BufReader<std::fs::File>, line: &mut String| {
                line.clear();
                reader.read_line(line).map_err(|source| AuditCmdError::Io {
                    what: "cannot read",
                    path: path.clone(),
                    source,
                })
            };
            read(&mut reader, &mut line)?;
            let header: Header = serde_json::from_str(&line).map_err(|e| {
                AuditCmdError::Usage(format!(
                    "{} is not a bcctl audit export (bad header: {e})",
                    path.display()
                ))
            })?;
            if header.kind != "header" || header.format != EXPORT_FORMAT || header.version != 1 {
                return Err(AuditCmdError::Usage(format!(
                    "{} is not a bc-audit-export version 1 file",
                    path.display()
                )));
            }
            if let Some(t) = tenant {
                if *t != header.tenant {
                    return Err(AuditCmdError::Usage(format!(
                        "--tenant {t} but the export is of tenant {}",
                        header.tenant
                    )));
                }
            }
            let mut cps = Vec::new();
            for k in 0..header.checkpoints {
                read(&mut reader, &mut line)?;
                let cp: CheckpointLine = serde_json::from_str(&line).map_err(|e| {
                    AuditCmdError::Tampered(format!(
                        "checkpoint line {k} of the export is malformed: {e}"
                    ))
                })?;
                cps.push(cp);
            }
            (
                header.tenant,
                cps,
                header.origin,
                header.verifier_key,
                LeafSource::Export {
                    reader,
                    line,
                    line_no: 1 + header.checkpoints,
                },
                Some(header.events),
            )
        }
        (None, Some(tenant)) => {
            let Some(url) = &args.database_url else {
                return Err(AuditCmdError::Usage(
                    "--tenant needs --database-url (or DATABASE_URL)".into(),
                ));
            };
            let store = EventStore::connect(url).await?;
            let rows = reads::checkpoints(&store, tenant).await?;
            let size = reads::tree_size(&store, tenant).await?;
            let origin = rows.last().map(|c| c.origin.clone());
            let key = rows.last().map(|c| c.verifier_key.clone());
            if let Some(first) = rows.first() {
                if rows.iter().any(|c| c.verifier_key != first.verifier_key) {
                    eprintln!("note: checkpoints carry more than one verifier key; each must match the pin");
                }
            }
            (
                tenant.clone(),
                rows.iter().map(checkpoint_line).collect(),
                origin,
                key,
                LeafSource::Database {
                    store,
                    handle: tokio::runtime::Handle::current(),
                    page: Vec::new().into_iter(),
                    next: 0,
                    done: false,
                },
                Some(size),
            )
        }
        (None, None) => return Err(AuditCmdError::Usage("give --tenant or --bundle".into())),
    };

    let outcome = (|| -> Result<Report, AuditCmdError> {
        let key = trust.key_for(carried_key.as_deref())?;
        let origin = trust.origin_for(&tenant, stated_origin.as_deref())?;
        let checkpoints = checkpoint_lines
            .iter()
            .enumerate()
            .map(|(k, c)| trail_checkpoint(c, k))
            .collect::<Result<Vec<_>, _>>()?;
        let key = match key {
            Some(k) => k,
            None if checkpoints.is_empty() => {
                // No checkpoint: nothing is signed; leaves are still checked. Any key will do.
                AuditPublicKey::from_uncompressed_point(&[4u8; 65])
                    .map_err(|e| AuditCmdError::Other(e.to_string()))?
            }
            None => {
                return Err(AuditCmdError::Tampered(
                    "the trail has checkpoints but carries no verifier key".into(),
                ))
            }
        };
        let bar = progress_bar(!args.json, total);
        let mut leaves = Leaves {
            source,
            tenant: tenant.clone(),
            fault: None,
            payload: Vec::new(),
            total,
        };
        let result = verify_trail(
            &origin,
            &key,
            &mut leaves,
            &checkpoints,
            &mut |p: Progress| {
                if let Some(bar) = &bar {
                    bar.set_position(p.leaves_checked);
                }
            },
        );
        if let Some(bar) = &bar {
            bar.finish_and_clear();
        }
        let mut report = Report {
            ok: false,
            tenant: tenant.clone(),
            leaves: None,
            checkpoints: None,
            signed_size: None,
            signed_root: None,
            unsealed_leaves: None,
            fault: None,
        };
        if let Some(f) = leaves.fault.take() {
            report.fault = Some(FaultReport {
                kind: f.kind,
                message: f.message,
                index: f.index,
                position: f.position,
                checkpoint: None,
            });
            return Ok(report);
        }
        match result {
            Ok(s) => {
                if let Some(expected) = total {
                    if s.leaves != expected {
                        report.fault = Some(FaultReport {
                            kind: "missing_leaf",
                            message: format!(
                                "the trail states {expected} leaves but holds {}: the tail was truncated or extended",
                                s.leaves
                            ),
                            index: Some(s.leaves.min(expected)),
                            position: None,
                            checkpoint: None,
                        });
                        return Ok(report);
                    }
                }
                report.ok = true;
                report.leaves = Some(s.leaves);
                report.checkpoints = Some(s.checkpoints);
                report.signed_size = Some(s.signed_size);
                report.signed_root = Some(hex::encode(s.signed_root));
                report.unsealed_leaves = Some(s.unsealed_leaves);
            }
            Err(f) => {
                report.fault = Some(FaultReport {
                    kind: fault_kind(&f),
                    message: f.to_string(),
                    index: Some(f.index()),
                    position: f.position(),
                    checkpoint: f.checkpoint(),
                });
            }
        }
        Ok(report)
    })();

    let report = match outcome {
        Ok(r) => r,
        Err(AuditCmdError::Tampered(message)) => Report {
            ok: false,
            tenant: tenant.clone(),
            leaves: None,
            checkpoints: None,
            signed_size: None,
            signed_root: None,
            unsealed_leaves: None,
            fault: Some(FaultReport {
                kind: "key_or_origin",
                message,
                index: None,
                position: None,
                checkpoint: None,
            }),
        },
        Err(e) => return Err(e),
    };
    print_report(&report, args.json)?;
    match &report.fault {
        None => Ok(()),
        Some(f) => Err(AuditCmdError::Tampered(f.message.clone())),
    }
}

fn print_report(report: &Report, json: bool) -> Result<(), AuditCmdError> {
    if json {
        let text =
            serde_json::to_string(report).map_err(|e| AuditCmdError::Other(e.to_string()))?;
        println!("{text}");
        return Ok(());
    }
    match &report.fault {
        None => println!(
            "OK: tenant {}: {} leaves, {} checkpoints, signed size {} root {}, {} leaves not yet sealed",
            report.tenant,
            report.leaves.unwrap_or(0),
            report.checkpoints.unwrap_or(0),
            report.signed_size.unwrap_or(0),
            report.signed_root.as_deref().unwrap_or(""),
            report.unsealed_leaves.unwrap_or(0)
        ),
        Some(f) => {
            println!("TAMPERED ({}): {}", f.kind, f.message);
            let show = |v: Option<String>| v.unwrap_or_else(|| "-".into());
            println!(
                "first bad index: {}, position: {}, checkpoint: {}",
                show(f.index.map(|v| v.to_string())),
                show(f.position.map(|v| v.to_string())),
                show(f.checkpoint.map(|v| v.to_string()))
            );
        }
    }
    Ok(())
}

fn progress_bar(enabled: bool, total: Option<u64>) -> Option<indicatif::ProgressBar> {
    let total = total?;
    if !enabled || !std::io::stderr().is_terminal() || total < 100_000 {
        return None;
    }
    let bar = indicatif::ProgressBar::new(total);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{bar:40} {pos}/{len} leaves ({per_sec}, eta {eta})",
    ) {
        bar.set_style(style);
    }
    Some(bar)
}
