//! The error a quorum projection reports for an event it cannot apply.

use events::RecordedEvent;

use crate::ProjectionError;

pub(crate) fn inapplicable(
    projection: &'static str,
    event: &RecordedEvent,
    why: String,
) -> ProjectionError {
    ProjectionError::Inapplicable {
        projection,
        position: event.position,
        event_type: event.event_type.clone(),
        why,
    }
}
