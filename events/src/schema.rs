//! Protobuf payload types, generated at build time from `proto/` by protox and prost.
//!
//! Each payload type names its event type and schema version through [`EventPayload`], so an
//! event can only be built with the type string that matches its bytes.

#![allow(clippy::doc_lazy_continuation)]

include!(concat!(env!("OUT_DIR"), "/bc.events.v1.rs"));

use crate::envelope::EventPayload;

impl EventPayload for AuditCheckpointSealed {
    const EVENT_TYPE: &'static str = "audit.checkpoint.sealed";
    const SCHEMA_VERSION: u32 = 1;
}
