//! The wire API between agents (through the gateway) and the control plane, package
//! `bc.wire.v1`, and the internal API between a split gateway and the api process, package
//! `bc.internal.v1`, compiled from `proto/` by protox and prost.
//!
//! `NodeService` (Join, Renew, the node Session) is generated for both sides: the gateway
//! serves it (`node_service_server`), bcd and tests call it (`node_service_client`).
//! A `SignedJoinResponse` carries the encoded `JoinResponse` bytes exactly as signed: verify the
//! signature over those bytes (purpose `join-response`, bound to the request's CSR SHA-256)
//! before decoding them. A Welcome's `signed_trust_bundle` is an encoded [`TrustBundle`] exactly
//! as signed (purpose `trust-bundle`).
//!
//! The node Session is also served without HTTP/2, over the framing of [`session_wire`]
//! (ALPN `bc-session/1`), which is what bcd speaks.
//!
//! `ApiService` (`internal::api_service_server` / `internal::api_service_client`) is what a
//! `--role api` process serves to `--role gateway` processes over internal mTLS.
//!
//! `AdminService` (`admin::admin_service_server` / `admin::admin_service_client`, package
//! `bc.admin.v1`) is the operator API `bcctl serve` offers on its admin listener, over mTLS
//! with operator certificates.
//!
//! `Attestor` (`attestor::attestor_client` / `attestor::attestor_server`, package
//! `bc.attestor.v1`) is what an out-of-process attestor serves to the JoinService over a Unix
//! socket (`gateway::join::external_attestor` is the client).
//!
//! [`peer_tls`] is the one TLS peer-certificate verifier the gateway, bcd and bcctl build on.

#![allow(clippy::doc_lazy_continuation)]

pub mod codec;
pub mod peer_tls;
pub mod session_wire;

/// The generated packages, nested as their names are (so cross-package paths resolve).
pub mod bc {
    pub mod wire {
        /// `bc.wire.v1`.
        pub mod v1 {
            include!(concat!(env!("OUT_DIR"), "/bc.wire.v1.rs"));
        }
    }
    pub mod internal {
        /// `bc.internal.v1`.
        pub mod v1 {
            include!(concat!(env!("OUT_DIR"), "/bc.internal.v1.rs"));
        }
    }
    pub mod admin {
        /// `bc.admin.v1`.
        pub mod v1 {
            include!(concat!(env!("OUT_DIR"), "/bc.admin.v1.rs"));
        }
    }
    pub mod attestor {
        /// `bc.attestor.v1`.
        // An Admit is much larger than a Refuse; a verdict is made once per join round.
        #[allow(clippy::large_enum_variant)]
        pub mod v1 {
            include!(concat!(env!("OUT_DIR"), "/bc.attestor.v1.rs"));
        }
    }
}

/// `bc.admin.v1`.
pub use bc::admin::v1 as admin;
/// `bc.attestor.v1`.
pub use bc::attestor::v1 as attestor;

/// `bc.internal.v1`.
pub use bc::internal::v1 as internal;
/// `bc.wire.v1`.
pub use bc::wire::v1 as wire;

pub use wire::*;
