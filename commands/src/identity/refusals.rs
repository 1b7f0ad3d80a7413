//! Recording refusals under the per-minute bound ([`domain::identity::decide_refusal_bound`]):
//! one `security.*.refused` event per refusal, at most `limit` a minute per (kind, refusal);
//! refusals over the bound are counted in `refusal_suppressed_pending`
//! ([`projections::identity::suppressed`]) and written as one `security.refusals.suppressed`
//! event per (kind, refusal, window, tenant) once their minute is over (by the next recorded
//! refusal of that reason, or by the maintenance flush).

use domain::identity::{
    decide_refusal_bound, refusal_lock_key, suppressed_event, window_start, RefusalBound,
};
use events::store::{ExpectedVersion, StoreTx};
use events::{new_event_id, EventPayload, NewEvent};
use projections::identity::{read, suppressed};

use super::IdentityError;
use crate::append_and_project;

/// Records one refusal (`payload` is the `security.*.refused` event) or counts it as suppressed.
/// Returns whether it was recorded as an event.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn record<P: EventPayload>(
    tx: &mut StoreTx,
    kind: &str,
    refusal: &str,
    tenant_id: &str,
    payload: &P,
    now_us: i64,
    limit: u32,
) -> Result<bool, IdentityError> {
    let window = window_start(now_us);
    // Serializes refusals of one reason only, so the bound is exact across replicas.
    suppressed::lock_refusal_reason(tx, refusal_lock_key(kind, refusal)).await?;
    let recorded = read::refusals_recorded(tx, kind, refusal, window).await?;
    match decide_refusal_bound(recorded, limit) {
        RefusalBound::Suppress => {
            suppressed::count_suppressed(tx, kind, refusal, window, tenant_id).await?;
            Ok(false)
        }
        RefusalBound::Record => {
            flush_in(tx, Some((kind, refusal)), window, now_us).await?;
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

/// Writes the pending suppressed counts of windows before `current_window` as events (only of
/// one (kind, refusal) when given). Returns how many events were written.
pub(crate) async fn flush_in(
    tx: &mut StoreTx,
    only: Option<(&str, &str)>,
    current_window: i64,
    now_us: i64,
) -> Result<u64, IdentityError> {
    let rows = suppressed::pending_before(tx, only, current_window).await?;
    let mut written = 0;
    for row in rows {
        // Another process (a second replica's maintenance) may have written this count since
        // the read: the row it deleted is then gone here, and the count is not written twice.
        if !suppressed::take_pending(tx, &row).await? {
            continue;
        }
        let tenant = row.tenant_id;
        let payload = suppressed_event(row.kind, row.refusal, row.window_start_us, row.count);
        let event = NewEvent::from_payload(new_event_id(), tenant.clone(), now_us, &payload);
        append_and_project(
            tx,
            &projections::identity::all(),
            &format!("tenant/{tenant}"),
            ExpectedVersion::Any,
            &[event],
        )
        .await?;
        written += 1;
    }
    Ok(written)
}
