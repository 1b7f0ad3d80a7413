//! Why the admin listener did not start ([`AdminStartError`]): what `serve` and `up` report,
//! apart from the listener itself (`server.rs`).

use std::net::SocketAddr;

/// Why the admin listener did not start.
#[derive(Debug, thiserror::Error)]
pub enum AdminStartError {
    #[error("admin listener: the PKI bundle has no operator CA (a bundle made before operator certificates): run `bcctl pki add-operator-ca` once, or leave [admin] out")]
    NoOperatorCa,
    #[error("admin listener: serving certificate: {0}")]
    Serving(String),
    #[error("admin listener: TLS: {0}")]
    Tls(#[from] gateway::tls::TlsSetupError),
    #[error("admin listener: cannot listen on {addr}: {source} (is another server using the port? set [admin] listen, or --admin-port for `bcctl up`)")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("admin listener: the revoked operator certificates cannot be read: {0}")]
    Revoked(String),
}
