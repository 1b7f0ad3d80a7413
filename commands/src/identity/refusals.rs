//! Recording refusals: one `security.*.refused` event per refusal, at most `limit` a minute per
//! (kind, refusal); refusals over the bound are counted in `refusal_suppressed_pending` and
//! written as one `security.refusals.suppressed` event per (kind, refusal, window, tenant) once
//! their minute is over (by the next recorded refusal of that reason, or by
//! [`super::JoinService::flush_suppressed_refusals`]).

use events::schema::RefusalsSuppressed;
use events::store::{ExpectedVersion, LogTx, StoreTx};
use events::{new_event_id, EventPayload, NewEvent};

use super::store::query_as;
use super::IdentityError;
use crate::append_and_project;

/// The minute window a time falls in, µs.
pub(crate) fn window_start(now_us: i64) -> i64 {
    now_us - now_us.rem_euclid(60_000_000)
}

#[derive(sqlx::FromRow)]
struct Count {
    recorded: i64,
}

#[derive(sqlx::FromRow)]
struct Pending {
    kind: String,
    refusal: String,
    window_start_us: i64,
    tenant_id: String,
    count: i64,
}

fn lock_key(kind: &str, refusal: &str) -> i64 {
    let d = domain::identity::sha256(format!("{kind}\0{refusal}").as_bytes());
    i64::from_be_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]])
}

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
    if let StoreTx::Postgres(t) = tx {
        // Serializes refusals of one reason only, so the bound is exact across replicas.
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(lock_key(kind, refusal))
            .execute(t.connection())
            .await?;
    }
    let recorded = query_as!(
        tx,
        Count,
        fetch_optional,
        "SELECT recorded FROM refusal_counters WHERE kind = $1 AND refusal = $2 AND window_start_us = $3",
        kind,
        refusal,
        window
    )?
    .map_or(0, |c| c.recorded);
    if recorded >= i64::from(limit) {
        tx.execute(
            "INSERT INTO refusal_suppressed_pending (kind, refusal, window_start_us, tenant_id, count) \
             VALUES ($1, $2, $3, $4, 1) ON CONFLICT (kind, refusal, window_start_us, tenant_id) \
             DO UPDATE SET count = refusal_suppressed_pending.count + 1",
            &[kind.into(), refusal.into(), window.into(), tenant_id.into()],
        )
        .await?;
        return Ok(false);
    }
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

/// Writes the pending suppressed counts of windows before `current_window` as events (only of
/// one (kind, refusal) when given). Returns how many events were written.
pub(crate) async fn flush_in(
    tx: &mut StoreTx,
    only: Option<(&str, &str)>,
    current_window: i64,
    now_us: i64,
) -> Result<u64, IdentityError> {
    let (kind, refusal) = only.unwrap_or(("", ""));
    let rows = query_as!(
        tx,
        Pending,
        fetch_all,
        "SELECT kind, refusal, window_start_us, tenant_id, count FROM refusal_suppressed_pending \
         WHERE window_start_us < $1 AND ($2 = '' OR (kind = $2 AND refusal = $3)) \
         ORDER BY kind, refusal, window_start_us, tenant_id",
        current_window,
        kind,
        refusal
    )?;
    let mut written = 0;
    for row in rows {
        // Another process (a second replica's maintenance) may have written this count since
        // the read: the row it deleted is then gone here, and the count is not written twice.
        let removed = tx
            .execute(
                "DELETE FROM refusal_suppressed_pending WHERE kind = $1 AND refusal = $2 \
             AND window_start_us = $3 AND tenant_id = $4",
                &[
                    row.kind.clone().into(),
                    row.refusal.clone().into(),
                    row.window_start_us.into(),
                    row.tenant_id.clone().into(),
                ],
            )
            .await?;
        if removed == 0 {
            continue;
        }
        let payload = RefusalsSuppressed {
            kind: row.kind,
            refusal: row.refusal,
            window_start_us: row.window_start_us,
            count: u64::try_from(row.count).unwrap_or(0),
        };
        let event = NewEvent::from_payload(new_event_id(), row.tenant_id.clone(), now_us, &payload);
        append_and_project(
            tx,
            &projections::identity::all(),
            &format!("tenant/{}", row.tenant_id),
            ExpectedVersion::Any,
            &[event],
        )
        .await?;
        written += 1;
    }
    Ok(written)
}
