//! The network client: gRPC (`bc.wire.v1.NodeService`) over TLS 1.3 pinned to the serving CA.
//!
//! TLS is terminated here rather than by tonic: [`connect`] dials TCP, runs the rustls handshake
//! (ALPN `h2`), and hands the stream to tonic through a connector, so the same code presents the
//! node certificate and key for Renew and the session and presents nothing for Join.
//!
//! | module             | job                                                                 |
//! |--------------------|---------------------------------------------------------------------|
//! | `tls`              | the verifier pinned to the serving CA, the rustls client config     |
//! | `connector`        | the gateway address; TCP, handshake and first read for tonic        |
//! | `prefixed`         | a stream with its first bytes put back                              |
//! | `connect`          | the tonic channel to the gateway ([`connect`], [`NodeClient`])      |
//! | `join_transport`   | [`GrpcJoinTransport`], the Join call                                |
//! | `retry`            | how a failed call is treated ([`classify`], the pushback)           |
//! | `diagnose`         | failures in words (TLS alerts, statuses, error chains)              |
//! | `error`            | [`ClientError`]                                                     |
//!
//! Every item is re-exported here, so callers name `crate::client::X` whatever file holds it.

mod connect;
mod connector;
mod diagnose;
mod error;
mod join_transport;
mod prefixed;
mod retry;
mod tls;

pub use connect::{connect, NodeClient, CALL_TIMEOUT};
pub use connector::{GatewayAddress, CONNECT_TIMEOUT, FIRST_READ_TIMEOUT};
pub use diagnose::{
    describe_io, describe_status, describe_tls_error, error_chain, is_revoked_alert, received_alert,
};
pub use error::ClientError;
pub use join_transport::{decode_join_body, GrpcJoinTransport};
pub use prefixed::Prefixed;
pub use retry::{classify, pushback_of, PUSHBACK_HEADER};
pub use tls::{
    certificate_spki_pin, client_config, provider, ClientIdentity, PinnedServingCa, ServingCaError,
};
