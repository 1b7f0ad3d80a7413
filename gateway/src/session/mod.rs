//! A node's session: its loop ([`session_loop`]: the Welcome, commands, revocation notices and
//! the end, shared by gRPC and the session wire), which certificates may open
//! one ([`validity`]), the live sessions by node and serial, so that a revocation can end them
//! and the command poller wake them ([`registry`]), and the session wire, our own framing of a
//! session over TLS without HTTP/2 (ALPN `bc-session/1`, [`session_wire`]). The bcd version
//! and boot id a Hello reports are recorded off the session path ([`runtime_report`]).
//!
//! A session must never open for a certificate outside its validity, a revoked serial or while
//! the revocation feed is stale; never answer or record anything past its certificate's
//! notAfter; and never take the node's identity from a message, only from its connection.

pub mod registry;
pub mod runtime_report;
pub mod session_loop;
pub mod session_wire;
pub mod validity;
