//! The payload types prost generated from `proto/bc/events/v1/`, and [`event_payload!`], which
//! gives each its event type and schema version.

#![allow(clippy::doc_lazy_continuation)]

include!(concat!(env!("OUT_DIR"), "/bc.events.v1.rs"));

/// Declares which event type and schema version a generated payload message is, and lists the
/// area's event types with their message names ([`super::message_of`]).
macro_rules! event_payload {
    ($($ty:ident => $name:literal, version $version:literal;)*) => {
        $(
            impl $crate::envelope::EventPayload for $ty {
                const EVENT_TYPE: &'static str = $name;
                const SCHEMA_VERSION: u32 = $version;
            }
        )*
        /// This area's event types and the names of their payload messages.
        pub(super) const TYPES: &[(&str, &str)] = &[$(($name, stringify!($ty))),*];
    };
}
pub(crate) use event_payload;
