//! The edge: what every connection meets before any route answers it. The caps at accept and
//! the other limits of both endpoints ([`limits`]), the TLS handshake with the node client
//! verifier ([`tls`]), the connection up to HTTP/2 or the session wire ([`conn`]), the HTTP/2
//! serving of the gRPC routes ([`http2`]), and the gateway's own serving certificate, renewed
//! while it runs ([`serving`]) or read from files and reloaded ([`tls_files`]); [`jitter`] spreads
//! what many peers would do at once.
//!
//! Past the edge, code sees only a typed, already-checked [`tls::VerifiedNode`] (in the
//! request's [`conn::PeerInfo`]). The edge must never let a certificate through that the node CA
//! did not issue, that names another trust domain, more or fewer than one SPIFFE ID or role, or
//! a revoked serial; never resume a TLS session (every connection runs the verifier); never hold
//! more for a client that has proved nothing than its limits allow; and never read who a node is
//! from a message, only from its handshake.

pub mod conn;
pub mod http2;
pub(crate) mod jitter;
pub mod limits;
pub mod serving;
pub mod tls;
pub mod tls_files;
