//! How a revocation reaches the gateway: the revocation feed ([`feed`]) fills the set of revoked
//! serials ([`revoked`]) from `node_certs` at start and then from the log hub as revocations
//! commit, and ends the revoked node's live sessions; whether the feed is caught up is
//! [`feed_health`], which the server, the health service and the metrics read.
//!
//! Only the feed writes the revoked set; the TLS verifier (`crate::edge::tls`) only reads it.
//! The feed must never skip a revocation it cannot read (it halts, fails closed and ends every
//! session instead), and a stale or halted feed must never let a new session open.

pub mod feed;
pub mod feed_health;
pub mod revoked;
