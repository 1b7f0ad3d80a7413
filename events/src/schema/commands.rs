//! Event types of `proto/bc/events/v1/commands.proto`: worker keys and the command queue.

use super::*;

/// The stream of a command: `command/<command_id>`.
pub fn command_stream(command_id: &str) -> String {
    format!("command/{command_id}")
}

event_payload! {
    WorkerCertified => "command.worker.certified", version 1;
    CommandEnqueued => "command.enqueued", version 1;
    CommandDispatched => "command.dispatched", version 1;
    CommandResultRecorded => "command.result.recorded", version 1;
    CommandRejected => "command.rejected", version 1;
    CommandCancelled => "command.cancelled", version 1;
}
