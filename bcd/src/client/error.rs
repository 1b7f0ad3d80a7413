//! Why the client could not connect or call ([`ClientError`]), and whether retrying may help.

/// Why the client could not connect or call.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// `server` is not `host:port`.
    #[error(
        "server {0:?} is not host:port (for example gateway.example.com:8443 or 127.0.0.1:8443)"
    )]
    BadServer(String),
    /// The node certificate or key cannot be used for TLS.
    #[error("the node certificate or key cannot be used for TLS: {0}; {way}", way = crate::files::identity::WAY_BACK)]
    ClientIdentity(String),
    /// TCP connect failed or timed out.
    #[error("cannot reach the gateway at {addr}: {reason} (is bcctl serve running there? check `server` in config.toml)")]
    Unreachable {
        /// The address dialled.
        addr: String,
        /// Why.
        reason: String,
    },
    /// The TLS handshake failed (pin mismatch, an expired chain, a refused client certificate).
    #[error("TLS handshake with {addr} failed: {reason}")]
    Handshake {
        /// The address dialled.
        addr: String,
        /// Why, as rustls says it.
        reason: String,
    },
    /// The gateway's certificate did not verify under the pinned serving CA: retrying does not
    /// help.
    #[error("the gateway at {addr} is not trusted: {reason} (check serving_ca_spki_pin against `bcctl pki show`)")]
    ServerCertificate {
        /// The address dialled.
        addr: String,
        /// Why.
        reason: String,
    },
    /// The gateway refused this node's certificate as revoked (TLS alert certificate_revoked).
    #[error("the gateway at {addr} refused this node's certificate as revoked (TLS alert certificate_revoked); join again: bcd join --reset --yes, then bcd join with a new token")]
    CertificateRevoked {
        /// The address dialled.
        addr: String,
    },
    /// The HTTP/2 connection over TLS could not be set up (or the gateway closed it, which is how
    /// a refused client certificate shows in TLS 1.3).
    #[error("gateway {addr}: {reason}")]
    Connection {
        /// The address dialled.
        addr: String,
        /// Why.
        reason: String,
    },
}

impl ClientError {
    /// Whether trying again later may succeed.
    pub fn is_retryable(&self) -> bool {
        !matches!(
            self,
            ClientError::BadServer(_)
                | ClientError::ClientIdentity(_)
                | ClientError::ServerCertificate { .. }
                | ClientError::CertificateRevoked { .. }
        )
    }
}
