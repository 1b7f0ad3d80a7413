//! Rebuilding projections from the log: empty their tables, then stream every event (up to an
//! optional position) through them in large batches.

use events::store::{EventStore, LogStore, LogTx, StoreTx};

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
    projections: &[&dyn Projection],
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
    projections: &[&dyn Projection],
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
    projections: &[&dyn Projection],
    until: Option<i64>,
    batch: u32,
    mut progress: impl FnMut(RebuildProgress),
    emptying: Emptying,
) -> Result<u64, ProjectionError> {
    // Writers of these tables wait until this transaction ends (readers don't): an inline
    // projection write can neither land on a row this rebuild is about to replace nor commit
    // between the head read here and the commit. SQLite's writer is already held by `tx`.
    if matches!(tx, StoreTx::Postgres(_)) {
        let names: Vec<&str> = projections
            .iter()
            .flat_map(|p| p.tables().iter().map(|t| t.name))
            .collect();
        if !names.is_empty() {
            tx.execute(
                &format!("LOCK TABLE {} IN EXCLUSIVE MODE", names.join(", ")),
                &[],
            )
            .await?;
        }
    }
    let head = match until {
        Some(p) => p,
        None => store.head_position().await?,
    };
    let names: Vec<&str> = projections
        .iter()
        .flat_map(|p| p.tables().iter().map(|t| t.name))
        .collect();
    if emptying == Emptying::Truncate && matches!(tx, StoreTx::Postgres(_)) && !names.is_empty() {
        tx.execute(&format!("TRUNCATE {}", names.join(", ")), &[])
            .await?;
    } else {
        for name in &names {
            tx.execute(&format!("DELETE FROM {name}"), &[]).await?;
        }
    }
    // The next page is read (on a pooled connection of its own) while the current one is
    // applied in `tx`: the log read and the projection writes overlap instead of taking turns.
    let mut pages = store.read_all(0, batch);
    let mut read = 0u64;
    let mut current = pages.next_batch().await?;
    while let Some(mut events) = current {
        let past_end = events.last().is_some_and(|e| e.position > head);
        events.retain(|e| e.position <= head);
        read += events.len() as u64;
        let position = events.last().map_or(pages.position(), |e| e.position);
        if past_end {
            apply_all(projections, tx, &events).await?;
            current = None;
        } else {
            let (applied, next) =
                futures::future::join(apply_all(projections, tx, &events), pages.next_batch())
                    .await;
            applied?;
            current = next?;
        }
        progress(RebuildProgress {
            events_read: read,
            position,
            head,
        });
    }
    Ok(read)
}
