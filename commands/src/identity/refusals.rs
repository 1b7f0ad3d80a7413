//! Recording refusals under the per-minute bound ([`domain::identity::refusal_bound`]):
//! one `security.*.refused` event per refusal, at most `limit` a minute per (kind, refusal).
//!
//! A refusal over the bound costs no store write. The process keeps its count in memory, in
//! the [`RefusalBudget`] its handlers share (through [`super::IdentityConfig`]), and the
//! maintenance flush (every minute in a serving process, and once more when it stops) writes
//! one `security.refusals.suppressed` event per (kind, refusal, window, tenant) it holds once
//! that minute is over. Once a process saw a window's bound reached for a reason, it suppresses
//! the rest of that window's refusals of that reason without opening a transaction: the
//! recorded count of a window only grows, so the answer cannot change.
//!
//! Deciding Record or Suppress still reads the window's recorded count under a per-reason lock
//! (exact across replicas), but only until the bound is reached. A process that dies loses the
//! counts it held (at most a minute of suppressed refusals, the events recorded one by one are
//! in the log). Counts an older build left in `refusal_suppressed_pending` are still written.

use domain::identity::{
    refusal_bound, refusal_lock_key, suppressed_event, window_start, RefusalBound,
};
use events::store::{ExpectedVersion, StoreTx};
use events::{new_event_id, EventPayload, NewEvent};
use projections::identity::{read, suppressed};

use super::budget::RefusalBudget;
use super::config::IdentityConfig;
use super::error::IdentityError;
use crate::append_and_project;

/// Counts the refusal as suppressed without any store access when this process already knows
/// its window is full (call it before opening a transaction). Returns whether it did.
pub(crate) fn suppressed_without_store(
    config: &IdentityConfig,
    kind: &str,
    refusal: &str,
    tenant_id: &str,
    now_us: i64,
) -> bool {
    config
        .refusal_budget
        .suppress_if_full(kind, refusal, tenant_id, window_start(now_us))
}

/// Records one refusal (`payload` is the `security.*.refused` event) or counts it as suppressed
/// (in memory, no write). Returns whether it was recorded as an event.
pub(crate) async fn record<P: EventPayload>(
    tx: &mut StoreTx,
    kind: &str,
    refusal: &str,
    tenant_id: &str,
    payload: &P,
    now_us: i64,
    config: &IdentityConfig,
) -> Result<bool, IdentityError> {
    let window = window_start(now_us);
    let budget = &config.refusal_budget;
    if budget.suppress_if_full(kind, refusal, tenant_id, window) {
        return Ok(false);
    }
    // Serializes refusals of one reason only, so the bound is exact across replicas.
    suppressed::lock_refusal_reason(tx, refusal_lock_key(kind, refusal)).await?;
    let recorded = read::refusals_recorded(tx, kind, refusal, window).await?;
    match refusal_bound(recorded, config.refusals_per_minute) {
        RefusalBound::Suppress => {
            budget.count_over_bound(kind, refusal, tenant_id, window);
            Ok(false)
        }
        RefusalBound::Record => {
            let event = NewEvent::from_payload(new_event_id(), tenant_id, now_us, payload);
            append_and_project(
                tx,
                &projections::identity::all(),
                &format!("tenant/{tenant_id}"),
                ExpectedVersion::Any,
                &[event],
            )
            .await?;
            Ok(true)
        }
    }
}

async fn write_suppressed(
    tx: &mut StoreTx,
    kind: String,
    refusal: String,
    window: i64,
    tenant: String,
    count: i64,
    now_us: i64,
) -> Result<(), IdentityError> {
    let payload = suppressed_event(kind, refusal, window, count);
    let event = NewEvent::from_payload(new_event_id(), tenant.clone(), now_us, &payload);
    append_and_project(
        tx,
        &projections::identity::all(),
        &format!("tenant/{tenant}"),
        ExpectedVersion::Any,
        &[event],
    )
    .await?;
    Ok(())
}

/// Writes the suppressed counts of windows before `current_window` (every window with `None`:
/// a process that stops) as events: those `budget` holds, and any an older build left in
/// `refusal_suppressed_pending`. Returns how many events were written. Counts whose
/// transaction fails go back to the budget.
pub(crate) async fn flush(
    store: &events::store::EventStore,
    budget: &RefusalBudget,
    current_window: Option<i64>,
    now_us: i64,
) -> Result<u64, IdentityError> {
    let held = budget.take(current_window);
    let result = crate::transaction!(store, IdentityError, |tx| {
        let mut written = flush_buffered(tx, current_window.unwrap_or(i64::MAX), now_us).await?;
        for ((kind, refusal, window, tenant), count) in &held {
            let count = i64::try_from(*count).unwrap_or(i64::MAX);
            write_suppressed(
                tx,
                kind.clone(),
                refusal.clone(),
                *window,
                tenant.clone(),
                count,
                now_us,
            )
            .await?;
            written += 1;
        }
        Ok(written)
    });
    if result.is_err() {
        budget.put_back(held);
    }
    result
}

/// Writes the counts of `refusal_suppressed_pending` (left by a build that buffered each
/// suppressed refusal there) of windows before `current_window` as events.
async fn flush_buffered(
    tx: &mut StoreTx,
    current_window: i64,
    now_us: i64,
) -> Result<u64, IdentityError> {
    let rows = suppressed::pending_before(tx, None, current_window).await?;
    let mut written = 0;
    for row in rows {
        // Another process (a second replica's maintenance) may have written this count since
        // the read: the row it deleted is then gone here, and the count is not written twice.
        if !suppressed::take_pending(tx, &row).await? {
            continue;
        }
        write_suppressed(
            tx,
            row.kind,
            row.refusal,
            row.window_start_us,
            row.tenant_id,
            row.count,
            now_us,
        )
        .await?;
        written += 1;
    }
    Ok(written)
}
