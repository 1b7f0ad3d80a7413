//! The wire API between agents (through the gateway) and the control plane, package
//! `bc.wire.v1`, compiled from `proto/` by protox and prost.
//!
//! `NodeService` (Join, Renew, the node Session) is generated for both sides: the gateway
//! serves it (`node_service_server`), bcd and tests call it (`node_service_client`).
//! A `SignedJoinResponse` carries the encoded `JoinResponse` bytes exactly as signed: verify the
//! signature over those bytes (purpose `join-response`, bound to the request's CSR SHA-256)
//! before decoding them.

#![allow(clippy::doc_lazy_continuation)]

/// `bc.wire.v1`.
pub mod wire {
    include!(concat!(env!("OUT_DIR"), "/bc.wire.v1.rs"));
}

pub use wire::*;
