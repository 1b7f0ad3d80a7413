//! Protobuf payload types, generated at build time from `proto/` by protox and prost.
//!
//! Each payload type names its event type and schema version through [`EventPayload`], so an
//! event can only be built with the type string that matches its bytes.

#![allow(clippy::doc_lazy_continuation)]

include!(concat!(env!("OUT_DIR"), "/bc.events.v1.rs"));

/// Declares which event type and schema version a generated payload message is.
macro_rules! event_payload {
    ($($ty:ident => $name:literal, version $version:literal;)*) => {
        $(
            impl $crate::envelope::EventPayload for $ty {
                const EVENT_TYPE: &'static str = $name;
                const SCHEMA_VERSION: u32 = $version;
            }
        )*
    };
}

// One file per area, beside its `.proto` file.
mod audit;
mod commands;
pub use commands::command_stream;
mod gateway;
mod identity;
pub use identity::{RevokedCertificates, JOIN_KEY_ATTESTOR, RENEW_POP_ATTESTOR};
mod quorum;
mod sites;
pub use sites::site_boot_lease;
