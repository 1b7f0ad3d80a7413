//! Rebuilding projections from the log: empty their tables, then stream every event (up to an
//! optional position) through them in large batches.
//!
//! The pages are pipelined: page N+1 is read while the projections that only write
//! ([`Projection::only_writes`]) apply page N into a [`WriteRecorder`], and a writer task makes
//! page N-1's changes in the transaction (replaying the recorded writes, and applying the
//! projections that may read in their turn), so reading, our CPU and the database's overlap
//! instead of taking turns.

use tokio::sync::mpsc;

use events::store::{recorder, EventStore, LogStore, LogTx, RecordedWrite, StoreTx, WriteRecorder};
use events::RecordedEvent;

use crate::{apply_all, Projection, ProjectionError};

/// Progress of a rebuild, reported after each batch.
#[derive(Clone, Copy, Debug)]
pub struct RebuildProgress {
    pub events_read: u64,
    pub position: i64,
    pub head: i64,
}

/// Empties the tables of `projections` and replays the log into them, up to `until` (a
/// position, inclusive) or the head. One transaction for the whole rebuild, so readers see the
/// old tables or the new ones, never a half-built state. Returns the events read.
pub async fn rebuild(
    store: &EventStore,
    projections: &[&'static dyn Projection],
    until: Option<i64>,
    batch: u32,
    mut progress: impl FnMut(RebuildProgress),
) -> Result<u64, ProjectionError> {
    let mut tx = store.begin().await?;
    let read = rebuild_tables(
        store,
        &mut tx,
        projections,
        until,
        batch,
        &mut progress,
        Emptying::Truncate,
    )
    .await?;
    tx.commit().await?;
    Ok(read)
}

/// The same inside a caller's transaction, without committing: `bcctl replay` rebuilds the state
/// as of a past position this way, reads it, and rolls back, leaving the live tables untouched.
pub async fn rebuild_in(
    store: &EventStore,
    tx: &mut StoreTx,
    projections: &[&'static dyn Projection],
    until: Option<i64>,
    batch: u32,
    progress: impl FnMut(RebuildProgress),
) -> Result<u64, ProjectionError> {
    rebuild_tables(
        store,
        tx,
        projections,
        until,
        batch,
        progress,
        Emptying::Delete,
    )
    .await
}

/// How a rebuild empties the tables it replays into.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Emptying {
    /// `DELETE`: readers keep reading the old rows until the transaction ends. For replays,
    /// which roll back and must not stop anyone reading the live tables.
    Delete,
    /// `TRUNCATE` on Postgres (fresh, empty files: no dead rows for the inserts to step over,
    /// no index entries of the old rows); readers wait for the rebuild's commit. SQLite has
    /// no `TRUNCATE`, and its writer lock already keeps writers out, so it deletes.
    Truncate,
}

async fn rebuild_tables(
    store: &EventStore,
    tx: &mut StoreTx,
    projections: &[&'static dyn Projection],
    until: Option<i64>,
    batch: u32,
    progress: impl FnMut(RebuildProgress),
    emptying: Emptying,
) -> Result<u64, ProjectionError> {
    let names: Vec<&str> = projections
        .iter()
        .flat_map(|p| p.tables().iter().map(|t| t.name))
        .collect();
    // Writers of these tables wait until this transaction ends (readers don't): an inline
    // projection write can neither land on a row this rebuild is about to replace nor commit
    // between the head read here and the commit. SQLite's writer is already held by `tx`.
    if matches!(tx, StoreTx::Postgres(_)) && !names.is_empty() {
        tx.execute(
            &format!("LOCK TABLE {} IN EXCLUSIVE MODE", names.join(", ")),
            &[],
        )
        .await?;
    }
    let head = match until {
        Some(p) => p,
        None => store.head_position().await?,
    };
    if emptying == Emptying::Truncate && matches!(tx, StoreTx::Postgres(_)) && !names.is_empty() {
        tx.execute(&format!("TRUNCATE {}", names.join(", ")), &[])
            .await?;
    } else {
        for name in &names {
            tx.execute(&format!("DELETE FROM {name}"), &[]).await?;
        }
    }
    apply_pipelined(store, tx, projections, head, batch, progress).await
}

/// How many applied pages may wait for the writer: enough to keep it busy, few enough that
/// memory stays a few pages' worth of rows.
const PAGES_AHEAD: usize = 2;

/// What the writer does for one page, in the order of the projections.
enum Step {
    /// The recorded writes of a run of projections that only write.
    Replay(Vec<RecordedWrite>),
    /// A projection that may read, applied on the transaction itself to its events of the page.
    Apply(&'static dyn Projection, Vec<RecordedEvent>),
}

/// One page's steps, and where the rebuild stands once they are done.
struct RecordedPage {
    steps: Vec<Step>,
    progress: RebuildProgress,
}

/// Applies `events` to the projections that only write, into `recorder`, and lists the steps
/// that make the page's changes in the projections' order: each run of writers is one replay,
/// and a projection that may read is left for the writer to apply (with the page's events it
/// handles; such projections handle rare events: batches, trust, checkpoints).
async fn record_page(
    projections: &[&'static dyn Projection],
    recorder: &mut StoreTx,
    events: &[RecordedEvent],
) -> Result<Vec<Step>, ProjectionError> {
    let mut steps = Vec::new();
    let mut rest = projections;
    while let Some(first) = rest.first() {
        if first.only_writes() {
            let run = rest.iter().take_while(|p| p.only_writes()).count();
            apply_all(&rest[..run], recorder, events).await?;
            let writes = recorder.take_recorded();
            if !writes.is_empty() {
                steps.push(Step::Replay(writes));
            }
            rest = &rest[run..];
        } else {
            let mine: Vec<RecordedEvent> = events
                .iter()
                .filter(|e| first.handles(&e.event_type))
                .cloned()
                .collect();
            if !mine.is_empty() {
                steps.push(Step::Apply(*first, mine));
            }
            rest = &rest[1..];
        }
    }
    Ok(steps)
}

/// Replays the log up to `head` with the projections that only write recording into a
/// recorder, page by page, while a writer task makes each page's changes in the transaction, in
/// order. The tables come out as applying each page with [`apply_all`] in the transaction would
/// leave them: the writer makes the same calls in the same order, and applies the projections
/// that may read itself, in their turn.
///
/// The writer runs as a task of its own (on another worker thread when the runtime has
/// several), holding the transaction: `tx` is swapped for a recorder meanwhile and handed back
/// when the writer ends. The first error of either side ends the rebuild (the caller then
/// rolls the transaction back).
async fn apply_pipelined(
    store: &EventStore,
    tx: &mut StoreTx,
    projections: &[&'static dyn Projection],
    head: i64,
    batch: u32,
    mut progress: impl FnMut(RebuildProgress),
) -> Result<u64, ProjectionError> {
    let backend = tx.backend();
    let mut real = std::mem::replace(tx, StoreTx::Recorder(WriteRecorder::new(backend)));
    let (to_writer, mut from_applier) = mpsc::channel::<RecordedPage>(PAGES_AHEAD);
    let (stored, mut stored_pages) = mpsc::unbounded_channel::<RebuildProgress>();
    let writer = tokio::spawn(async move {
        let mut result = Ok(());
        while let Some(page) = from_applier.recv().await {
            result = make_changes(&mut real, page.steps).await;
            if result.is_err() {
                break;
            }
            // The applier may have finished and stopped listening; nothing is lost by that.
            let _ = stored.send(page.progress);
        }
        (real, result)
    });

    let mut recorder = StoreTx::Recorder(WriteRecorder::new(backend));
    let applied = async {
        let mut pages = store.read_all(0, batch);
        let mut read = 0u64;
        let mut current = pages.next_batch().await?;
        while let Some(mut events) = current {
            let past_end = events.last().is_some_and(|e| e.position > head);
            events.retain(|e| e.position <= head);
            read += events.len() as u64;
            let position = events.last().map_or(pages.position(), |e| e.position);
            // The next page's query goes out first; this page is then applied (our CPU only).
            let (next, steps) = if past_end {
                (
                    Ok(None),
                    record_page(projections, &mut recorder, &events).await,
                )
            } else {
                futures::future::join(
                    pages.next_batch(),
                    record_page(projections, &mut recorder, &events),
                )
                .await
            };
            let page = RecordedPage {
                steps: steps?,
                progress: RebuildProgress {
                    events_read: read,
                    position,
                    head,
                },
            };
            if to_writer.send(page).await.is_err() {
                // The writer stopped on an error: that error is the rebuild's.
                break;
            }
            while let Ok(p) = stored_pages.try_recv() {
                progress(p);
            }
            current = next?;
        }
        Ok::<u64, ProjectionError>(read)
    }
    .await;
    // No more pages: the writer stores what it has, then hands the transaction back.
    drop(to_writer);
    let (real, written) = writer
        .await
        .map_err(|e| ProjectionError::Writer(e.to_string()))?;
    *tx = real;
    while let Ok(p) = stored_pages.try_recv() {
        progress(p);
    }
    written?;
    applied
}

/// The writer's side of a page: its steps, in order, on the real transaction.
async fn make_changes(tx: &mut StoreTx, steps: Vec<Step>) -> Result<(), ProjectionError> {
    for step in steps {
        match step {
            Step::Replay(writes) => recorder::replay(tx, writes).await?,
            Step::Apply(projection, events) => apply_all(&[projection], tx, &events).await?,
        }
    }
    Ok(())
}
