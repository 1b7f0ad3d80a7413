//! The projection the command queue applies inline.

/// The projection the queue applies inline (also in [`crate::every_projection`]).
pub fn projections() -> [&'static dyn projections::Projection; 1] {
    [&projections::commands::COMMAND_PROJECTION]
}
