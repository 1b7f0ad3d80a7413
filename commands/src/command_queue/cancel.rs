//! A batch that is cancelled or expires cancels its commands not yet sent (stored `held`), each
//! with `command.cancelled` on its own stream, in the batch's transaction.

use events::schema::{command_stream, CommandCancelled};
use events::store::{ExpectedVersion, StoreTx};
use events::NewEvent;
use projections::commands::commands_of_batch_to_cancel;

use crate::run::{append_and_project, RunError};

/// Appends `command.cancelled` (with `reason`) for every held command of `batch_id`; answers how
/// many.
pub(crate) async fn cancel_held_commands(
    tx: &mut StoreTx,
    batch_id: &[u8],
    reason: &str,
    now_us: i64,
) -> Result<usize, RunError> {
    let held = commands_of_batch_to_cancel(tx, batch_id).await?;
    for (command_id, node_id, tenant_id, stream_version) in &held {
        let event = CommandCancelled {
            command_id: command_id.clone(),
            node_id: node_id.clone(),
            reason: reason.to_string(),
            batch_id: batch_id.to_vec(),
        };
        append_and_project(
            tx,
            &super::projections(),
            &command_stream(command_id),
            ExpectedVersion::Exact((*stream_version).max(0) as u64),
            &[NewEvent::from_payload(
                events::envelope::new_event_id(),
                tenant_id.as_str(),
                now_us,
                &event,
            )],
        )
        .await?;
    }
    Ok(held.len())
}
