//! Protobuf payload types, generated at build time from `proto/` by protox and prost.
//!
//! Each payload type names its event type and schema version through [`EventPayload`], so an
//! event can only be built with the type string that matches its bytes.

mod payloads;
pub use payloads::*;

/// The encoded `FileDescriptorSet` of the event schema (`bc.events.v1`), for tools that show a
/// payload without knowing its type at compile time (`bcctl events show`).
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/bc.events.v1.fds"));

/// The Rust name of the payload message of `event_type` (as prost generated it from the
/// `.proto` message name), if the type is known.
pub fn message_of(event_type: &str) -> Option<&'static str> {
    [
        attestor_entries::TYPES,
        audit::TYPES,
        commands::TYPES,
        gateway::TYPES,
        identity::TYPES,
        oidc::TYPES,
        operators::TYPES,
        quorum::TYPES,
        sites::TYPES,
        ssh::TYPES,
        tenants::TYPES,
    ]
    .iter()
    .flat_map(|t| t.iter())
    .find(|(t, _)| *t == event_type)
    .map(|(_, m)| *m)
}

pub mod attestor_ids;

// One file per area, beside its `.proto` file.
mod attestor_entries;
mod audit;
mod commands;
pub use commands::command_stream;
mod gateway;
mod identity;
pub use identity::{RevokedCertificates, JOIN_KEY_ATTESTOR, RENEW_POP_ATTESTOR};
mod oidc;
pub use oidc::OIDC_ISSUER_STREAM;
mod operators;
pub use operators::operator_stream;
mod quorum;
mod sites;
pub use sites::site_boot_lease;
mod ssh;
pub use ssh::ssh_cert_stream;
mod tenants;
pub use tenants::tenant_stream;
