//! `bcctl rebuild [--digest] [--json]`: rebuild every projection from the log.
//!
//! Every projection table (identity, quorum, audit checkpoints) is emptied and the whole log is
//! replayed into it in one transaction ([`projections::rebuild`]): readers see the old tables
//! until the commit and the new ones after, never a half-built state; writers of those tables
//! wait for the rebuild to finish. Progress goes to standard error: a bar on a terminal, a line
//! every few seconds otherwise. `--digest` prints the BLAKE3 digest of a canonical dump of the
//! tables afterwards, the figure two replicas (or a replica and a rebuild) compare.

use std::time::Instant;

use clap::Args;
use events::store::{LogStore, LogTx, StoreError};
use projections::{ProjectionError, TableSpec};
use serde::Serialize;

use crate::verbs::token::to_json;

/// Events read per page while rebuilding.
const REBUILD_BATCH: u32 = 10_000;

#[derive(Debug, thiserror::Error)]
pub enum RebuildCmdError {
    #[error("INVALID_INPUT: --batch must be between 1 and 100000, got {0}")]
    BadBatch(u32),
    #[error("store: {0}")]
    Store(#[from] StoreError),
    #[error("{0}")]
    Open(#[from] crate::deployment::OpenError),
    #[error("rebuild failed, the tables are unchanged: {0}")]
    Projection(#[from] ProjectionError),
    #[error("counting the rebuilt rows: {0}")]
    Count(StoreError),
}

#[derive(Args)]
pub struct RebuildArgs {
    #[command(flatten)]
    pub deployment: crate::deployment::DeploymentArgs,
    /// Events read per page.
    #[arg(long, default_value_t = REBUILD_BATCH)]
    pub batch: u32,
    /// Also print the BLAKE3 digest of the rebuilt tables (a canonical dump, ordered by key).
    #[arg(long)]
    pub digest: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// What `rebuild` prints (`--json`).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RebuildReport {
    pub events_read: u64,
    pub head: i64,
    pub seconds: f64,
    pub events_per_second: f64,
    pub tables: Vec<TableCount>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct TableCount {
    pub name: &'static str,
    pub rows: i64,
}

pub async fn run(args: RebuildArgs) -> Result<(), RebuildCmdError> {
    if !(1..=100_000).contains(&args.batch) {
        return Err(RebuildCmdError::BadBatch(args.batch));
    }
    let store = args.deployment.connect_store().await?;
    let all = commands::every_projection();
    let tables: Vec<TableSpec> = all
        .iter()
        .flat_map(|p| p.tables().iter().copied())
        .collect();

    let mut progress = crate::progress::Progress::new("rebuild", "positions", false);
    let start = Instant::now();
    let read = projections::rebuild(&store, &all, None, args.batch, |p| {
        progress.show(
            u64::try_from(p.position).unwrap_or(0),
            u64::try_from(p.head).unwrap_or(0),
            &format!("{} events read", p.events_read),
        )
    })
    .await;
    progress.finish();
    let read = read?;
    let seconds = start.elapsed().as_secs_f64();
    let head = store.head_position().await?;

    let mut counts = Vec::with_capacity(tables.len());
    let mut tx = store.begin().await?;
    for t in &tables {
        let rows = projections::inspect::row_count(&mut tx, t.name)
            .await
            .map_err(RebuildCmdError::Count)?;
        counts.push(TableCount { name: t.name, rows });
    }
    tx.rollback().await?;
    let digest = if args.digest {
        Some(projections::digest_tables(&store, &tables).await?)
    } else {
        None
    };
    let report = RebuildReport {
        events_read: read,
        head,
        seconds,
        events_per_second: if seconds > 0.0 {
            read as f64 / seconds
        } else {
            0.0
        },
        tables: counts,
        digest,
    };
    if args.json {
        crate::outln!("{}", to_json(&report));
    } else {
        print_report(&report);
    }
    Ok(())
}

fn print_report(r: &RebuildReport) {
    crate::outln!(
        "rebuilt {} tables from {} events (log head {}) in {:.2} s: {:.0} events/s",
        r.tables.len(),
        r.events_read,
        r.head,
        r.seconds,
        r.events_per_second
    );
    for t in &r.tables {
        crate::outln!("  {:<28} {:>10} rows", t.name, t.rows);
    }
    if let Some(d) = &r.digest {
        crate::outln!("digest (blake3): {d}");
    }
}
