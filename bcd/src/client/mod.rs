//! The network client: gRPC (`bc.wire.v1.NodeService`) over TLS 1.3 pinned to the serving CA,
//! and the node session over the gateway's own framing (ALPN `bc-session/1`).
//!
//! TLS is terminated here rather than by tonic: [`connect`] dials TCP, runs the rustls handshake
//! (ALPN `h2`), and hands the stream to tonic through a connector, so the same code presents the
//! node certificate and key for Renew and presents nothing for Join. [`connect_session`] dials
//! the same way with ALPN `bc-session/1` for the session (`proto::session_wire`), and falls back
//! to the gRPC session on a gateway that does not speak it.
//!
//! | module             | job                                                                 |
//! |--------------------|---------------------------------------------------------------------|
//! | `tls`              | the verifier pinned to the serving CA, the rustls client config     |
//! | `connector`        | the gateway address; TCP, handshake and first read for tonic        |
//! | `prefixed`         | a stream with its first bytes put back                              |
//! | `connect`          | the tonic channel to the gateway ([`connect`], [`NodeClient`])      |
//! | `session`          | the framed session: [`connect_session`], [`SessionStream`]          |
//! | `session_task`     | the framed session's connection task: frames in and out, Ping/Pong  |
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
mod session;
mod session_task;
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
pub use session::{
    connect_session, SessionClient, SessionStream, SessionWire, OPEN_TIMEOUT, SESSION_MAX_FRAME,
};
pub use session_task::WRITE_TIMEOUT;
pub use tls::{
    certificate_spki_pin, client_config, pinned_serving_ca, provider, session_client_config,
    ClientIdentity, PinnedServingCa, ServingCaError, ServingCaPin,
};
