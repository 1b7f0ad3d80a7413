//! `bcctl audit export`: a tenant's trail to a self-contained JSON-lines file: every checkpoint,
//! and the events up to the last checkpoint's size (every one covered by a signature), or with
//! `--include-unsealed` every sequenced event.

use std::io::{BufWriter, Write};

use commands::audit::reads;

use super::args::ExportArgs;
use super::error::AuditCmdError;
use super::format::{checkpoint_line, EventLine, Header, EXPORT_FORMAT, PAGE};

pub(super) async fn export(args: ExportArgs) -> Result<(), AuditCmdError> {
    if args.json && crate::output::is_stdio(&args.out) {
        return Err(AuditCmdError::Usage(
            "--json with --out -: standard output is the export itself; name a file with --out, or drop --json".into(),
        ));
    }
    let store = args.db.deployment.connect_store().await?;
    let tenant = args.tenant.as_str();
    let checkpoints = reads::checkpoints(&store, tenant).await?;
    let sequenced = reads::tree_size(&store, tenant).await?;
    let size = if args.include_unsealed {
        sequenced
    } else {
        checkpoints.last().map_or(0, |c| c.tree_size.min(sequenced))
    };
    let io = |what, source| AuditCmdError::Io {
        what,
        path: args.out.clone(),
        source,
    };
    // `--out -` is standard output (docs/CLI.md); a file is never overwritten.
    // During an admin API call the export goes back to the caller (cli/src/invocation.rs).
    let sink: Box<dyn Write> =
        if let Some(remote) = crate::invocation::remote_sink(&args.out, 0o644) {
            Box::new(remote)
        } else if crate::output::is_stdio(&args.out) {
            Box::new(std::io::stdout().lock())
        } else {
            Box::new(
                std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&args.out)
                    .map_err(|e| io("cannot create", e))?,
            )
        };
    let mut out = BufWriter::with_capacity(1 << 20, sink);
    let header = Header {
        kind: "header".into(),
        format: EXPORT_FORMAT.into(),
        version: 1,
        tenant: tenant.to_string(),
        origin: checkpoints.last().map(|c| c.origin.clone()),
        verifier_key: checkpoints.last().map(|c| c.verifier_key.clone()),
        // The highest leaf version the event lines may use: 2 for an event with an actor, 1
        // for one without (docs/AUDIT.md).
        leaf_version: domain::audit::leaf::LEAF_VERSION,
        checkpoints: checkpoints.len() as u64,
        events: size,
    };
    let write_line = |out: &mut BufWriter<Box<dyn Write>>, v: &dyn erased::Line| {
        v.write_to(out).map_err(|e| io("cannot write", e))
    };
    write_line(&mut out, &header)?;
    for c in &checkpoints {
        write_line(&mut out, &checkpoint_line(c))?;
    }
    let mut progress = crate::progress::Progress::new("export", "events", false);
    let mut from = 0u64;
    while from < size {
        progress.show(from, size, "");
        let page = reads::leaves(&store, tenant, from, PAGE).await?;
        if page.is_empty() {
            break;
        }
        for row in page.iter().take_while(|r| r.index < size) {
            let Some(event) = &row.event else {
                return Err(AuditCmdError::Tampered(format!(
                    "leaf {} (position {}): its event is gone from the log",
                    row.index, row.position
                )));
            };
            write_line(&mut out, &EventLine::of(event, row.index, &row.leaf_hash))?;
        }
        from = page.last().map_or(size, |r| r.index + 1);
    }
    progress.finish();
    out.flush().map_err(|e| io("cannot write", e))?;
    drop(out);
    let left_out = sequenced - size;
    let note = if left_out > 0 {
        format!(
            " ({left_out} later events, not yet sealed, left out; --include-unsealed adds them)"
        )
    } else {
        String::new()
    };
    if args.json {
        crate::output::print_json(&serde_json::json!({
            "tenant": tenant,
            "events": size,
            "checkpoints": checkpoints.len(),
            "unsealedLeftOut": left_out,
            "out": args.out.display().to_string(),
        }));
    } else {
        crate::errln!(
            "exported tenant {tenant}: {size} events, {} checkpoints to {}{note}",
            checkpoints.len(),
            args.out.display()
        );
    }
    Ok(())
}

mod erased {
    use std::io::Write;

    /// A JSON line of the export.
    pub trait Line {
        fn write_to(&self, out: &mut dyn Write) -> std::io::Result<()>;
    }

    impl<T: serde::Serialize> Line for T {
        fn write_to(&self, out: &mut dyn Write) -> std::io::Result<()> {
            serde_json::to_writer(&mut *out, self)?;
            out.write_all(b"\n")
        }
    }
}
