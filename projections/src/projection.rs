//! What a projection is ([`Projection`]), why one cannot apply an event ([`ProjectionError`]),
//! and how a run of events goes through all of them ([`apply_all`]).

use std::future::Future;
use std::pin::Pin;

use events::store::{LogTx, StoreError, StoreTx};
use events::RecordedEvent;

use crate::digest::TableSpec;

/// A boxed future: projections are held as trait objects in a registry.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Why a projection could not apply an event. These are bugs or corruption, never refusals.
#[derive(Debug, thiserror::Error)]
pub enum ProjectionError {
    #[error("projection {projection}: event at position {position} ({event_type}) cannot be applied: {why}")]
    Inapplicable {
        projection: &'static str,
        position: i64,
        event_type: String,
        why: String,
    },
    #[error("projection payload: {0}")]
    Decode(#[from] events::envelope::DecodeError),
    #[error("projection store: {0}")]
    Store(#[from] StoreError),
    #[error("the rebuild's writer task failed: {0}")]
    Writer(String),
}

/// How one projection follows the log.
pub trait Projection: Send + Sync {
    /// A short name for progress output and errors.
    fn name(&self) -> &'static str;

    /// The tables it owns, with their canonical order (for digests and rebuilds).
    fn tables(&self) -> &'static [TableSpec];

    /// Whether events of this type change its tables.
    fn handles(&self, event_type: &str) -> bool;

    /// Whether [`Projection::apply`] goes only through [`LogTx`]'s writes (`execute`, `defer`,
    /// `insert_rows`) and never reads. Then [`apply_all`] lets the writes that the projections
    /// before it deferred stay queued, to be sent with its own; otherwise (the default) it sends
    /// them first, so that whatever this projection reads through the connection sees them.
    fn only_writes(&self) -> bool {
        false
    }

    /// Applies a run of events in log order inside `tx`. Only events it `handles` are passed.
    /// Implementations write in bulk where they can: rebuilds feed thousands at a time.
    fn apply<'a>(
        &'a self,
        tx: &'a mut StoreTx,
        events: &'a [&'a RecordedEvent],
    ) -> BoxFuture<'a, Result<(), ProjectionError>>;
}

/// Applies `events` to every projection in `projections` that handles them, in order, then
/// sends their deferred writes ([`LogTx::flush`]): on Postgres the last writes of consecutive
/// [`Projection::only_writes`] projections go out as one statement. Before a projection that
/// may read, the queue is sent.
pub async fn apply_all(
    projections: &[&dyn Projection],
    tx: &mut StoreTx,
    events: &[RecordedEvent],
) -> Result<(), ProjectionError> {
    for p in projections {
        let mine: Vec<&RecordedEvent> =
            events.iter().filter(|e| p.handles(&e.event_type)).collect();
        if !mine.is_empty() {
            if !p.only_writes() {
                tx.flush().await?;
            }
            p.apply(tx, &mine).await?;
        }
    }
    tx.flush().await?;
    Ok(())
}
