//! `bcctl audit verify`: a tenant's trail, from the database or an export, checked offline
//! against the pinned audit key with the domain's one trail verifier, then judged for coverage:
//! success (exit 0, `"ok": true`) means every leaf is covered by a verified checkpoint signature
//! (see `docs/AUDIT.md`, "What `ok` means").

use std::io::{BufRead, BufReader};
use std::path::Path;

use commands::audit::reads;
use domain::audit::{coverage, verify_trail_against, AuditPublicKey, Expectations, Progress};
use events::store::EventStore;

use super::args::VerifyArgs;
use super::error::AuditCmdError;
use super::format::{checkpoint_line, trail_checkpoint, CheckpointLine, Header, EXPORT_FORMAT};
use super::known::{open_known, read_known_note};
use super::leaves::{LeafSource, Leaves};
use super::report::{FaultReport, Report};
use super::trust::{trust, Trust};
use crate::deployment::located::Located;

pub(super) async fn verify(args: VerifyArgs) -> Result<(), AuditCmdError> {
    let located = args
        .deployment
        .locate()
        .map_err(|e| AuditCmdError::Usage(e.to_string()))?;
    let trust = trust(
        args.pin.as_deref(),
        Some(&located.deployment),
        args.trust_domain.as_deref(),
    )?;
    let trail = match (&args.bundle, &args.tenant) {
        (Some(path), tenant) => read_export(path, tenant.as_ref())?,
        (None, Some(tenant)) => read_database(&located, tenant).await?,
        (None, None) => return Err(AuditCmdError::Usage("give --tenant or --bundle".into())),
    };

    let tenant = trail.0.clone();
    let known_note = match &args.checkpoint {
        Some(path) => Some(read_known_note(path)?),
        None => None,
    };

    let outcome = check(&args, &trust, trail, &known_note);

    let report = match outcome {
        Ok(r) => r,
        Err(AuditCmdError::Tampered(message)) => {
            let mut r = Report::new(&tenant);
            r.fault = Some(FaultReport::tampered("key_or_origin", message, None, None));
            r
        }
        Err(e) => return Err(e),
    };
    report.finish(args.json)
}

/// A trail as read: its tenant, its checkpoint lines, the origin and the verifier key it
/// states, where its leaves come from, and how many leaves it states (when it does).
type Trail = (
    String,
    Vec<CheckpointLine>,
    Option<String>,
    Option<String>,
    LeafSource,
    Option<u64>,
);

/// The trail of an export file (`--bundle`): its header (of `tenant`, when given) and
/// checkpoint lines; its leaves are read from the rest of the file.
fn read_export(path: &Path, tenant: Option<&String>) -> Result<Trail, AuditCmdError> {
    let file = std::fs::File::open(path).map_err(|source| AuditCmdError::Io {
        what: "cannot open",
        path: path.to_path_buf(),
        source,
    })?;
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut line = String::new();
    let read = |reader: &mut BufReader<std::fs::File>, line: &mut String| {
        line.clear();
        reader.read_line(line).map_err(|source| AuditCmdError::Io {
            what: "cannot read",
            path: path.to_path_buf(),
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
    Ok((
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
    ))
}

/// The trail of `tenant` in the deployment's store: its checkpoints and its tree size; its
/// leaves are read page by page.
async fn read_database(located: &Located, tenant: &str) -> Result<Trail, AuditCmdError> {
    let url = located
        .existing_store_url()
        .map_err(|e| AuditCmdError::Other(e.to_string()))?;
    let store = EventStore::connect(url).await?;
    let rows = reads::checkpoints(&store, tenant).await?;
    let size = reads::tree_size(&store, tenant).await?;
    let origin = rows.last().map(|c| c.origin.clone());
    let key = rows.last().map(|c| c.verifier_key.clone());
    if let Some(first) = rows.first() {
        if rows.iter().any(|c| c.verifier_key != first.verifier_key) {
            crate::errln!(
                "note: checkpoints carry more than one verifier key; each must match the pin"
            );
        }
    }
    Ok((
        tenant.to_owned(),
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
    ))
}

/// Checks the trail against the trust (key and origin) and the checkpoint the auditor knows,
/// then judges its coverage: the report, or a key or origin the trail does not match.
fn check(
    args: &VerifyArgs,
    trust: &Trust,
    trail: Trail,
    known_note: &Option<String>,
) -> Result<Report, AuditCmdError> {
    let (tenant, checkpoint_lines, stated_origin, carried_key, source, total) = trail;
    let key = trust.key_for(carried_key.as_deref())?;
    let origin = trust.origin_for(&tenant, stated_origin.as_deref())?;
    let known = match &known_note {
        Some(note) => Some(open_known(note, &origin, key.as_ref())?),
        None => None,
    };
    let checkpoints = checkpoint_lines
        .iter()
        .enumerate()
        .map(|(k, c)| trail_checkpoint(c, k))
        .collect::<Result<Vec<_>, _>>()?;
    let key = match key {
        Some(k) => k,
        None if checkpoints.is_empty() => {
            // No checkpoint: nothing is signed (the verdict says so); the leaves are still
            // checked. No signature is opened, so any key will do.
            AuditPublicKey::from_uncompressed_point(&[4u8; 65])
                .map_err(|e| AuditCmdError::Other(e.to_string()))?
        }
        None => {
            return Err(AuditCmdError::Tampered(
                "the trail has checkpoints but carries no verifier key".into(),
            ))
        }
    };
    let mut progress = crate::progress::Progress::new("verify", "leaves", total.is_none());
    let total_leaves = total.unwrap_or(0);
    let mut leaves = Leaves {
        source,
        tenant: tenant.clone(),
        fault: None,
        payload: Vec::new(),
        total,
    };
    let result = verify_trail_against(
        &origin,
        &key,
        &mut leaves,
        &checkpoints,
        known,
        &mut |p: Progress| {
            progress.show(p.leaves_checked, total_leaves, "");
        },
    );
    progress.finish();
    let mut report = Report::new(&tenant);
    if let Some(f) = leaves.fault.take() {
        report.fault = Some(FaultReport::tampered(
            f.kind, f.message, f.index, f.position,
        ));
        return Ok(report);
    }
    let summary = match result {
        Ok(s) => s,
        Err(f) => {
            report.fault = Some(FaultReport::of_trail(&f));
            return Ok(report);
        }
    };
    if let Some(expected) = total {
        if summary.leaves != expected {
            report.fault = Some(FaultReport::tampered(
                "missing_leaf",
                format!(
                    "the trail states {expected} leaves but holds {}: the tail was truncated or extended",
                    summary.leaves
                ),
                Some(summary.leaves.min(expected)),
                None,
            ));
            return Ok(report);
        }
    }
    report.summary(
        &summary,
        checkpoint_lines.last().map(|c| c.signed_note.as_str()),
    );
    let expect = Expectations {
        known,
        at_least_size: args.at_least_size,
        allow_unsealed: args.allow_unsealed,
    };
    match coverage(&summary, &expect) {
        Ok(()) => report.ok = true,
        Err(f) => report.fault = Some(FaultReport::of_coverage(&f)),
    }
    Ok(report)
}
