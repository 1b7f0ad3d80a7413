//! Event types of `proto/bc/events/v1/audit.proto`.

use super::*;

event_payload! {
    AuditCheckpointSealed => "audit.checkpoint.sealed", version 1;
}
