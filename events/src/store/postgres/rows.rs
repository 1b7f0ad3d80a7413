//! Turning rows back into what the store answers: a stored event ([`row_to_event`], with its
//! commit marker and actor), and the outcome of an append that was already in the log.

use sqlx::postgres::PgRow;
use sqlx::Row;

use crate::actor::Actor;
use crate::envelope::{NewEvent, RecordedEvent};
use crate::store::{recorded, Appended, Result, StoreError};

/// A retried append: succeeds only when every id is there, in this stream, in this order.
pub(crate) fn already_appended(
    stream: &str,
    events: &[NewEvent],
    existing: Vec<(Vec<u8>, i64, String, i64)>,
    actor: Option<&Actor>,
) -> Result<Appended> {
    let mut positions = Vec::with_capacity(events.len());
    let mut last_version = 0;
    for event in events {
        let found = existing
            .iter()
            .find(|(id, _, s, _)| id.as_slice() == event.event_id && s == stream);
        match found {
            Some((_, position, _, version)) => {
                positions.push(*position);
                last_version = last_version.max(*version);
            }
            None => {
                return Err(StoreError::DuplicateEventId {
                    event_id: hex::encode(
                        existing
                            .first()
                            .map(|e| e.0.clone())
                            .unwrap_or_else(|| event.event_id.to_vec()),
                    ),
                })
            }
        }
    }
    Ok(Appended {
        positions,
        stream_version: u64::try_from(last_version).unwrap_or(0),
        already_appended: true,
        actor: actor.cloned(),
    })
}

pub(super) fn row_to_event(row: &PgRow) -> Result<RecordedEvent> {
    let position: i64 = row.try_get(0)?;
    let tx_text: String = row.try_get(10)?;
    let tx_id = tx_text.parse::<u64>().map_err(|_| StoreError::Corrupt {
        position,
        why: format!("tx_id {tx_text:?} is not a number"),
    })?;
    recorded(
        position,
        row.try_get(1)?,
        row.try_get(2)?,
        row.try_get(3)?,
        row.try_get(4)?,
        i64::from(row.try_get::<i32, _>(5)?),
        row.try_get(6)?,
        row.try_get(7)?,
        row.try_get(8)?,
        row.try_get(9)?,
        Some(tx_id),
        (row.try_get(11)?, row.try_get(12)?),
    )
}
