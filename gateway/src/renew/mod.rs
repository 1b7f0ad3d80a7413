//! A renewal at the gateway, beside the NodeService's `renew` (`crate::node_service`, which
//! requires the chain to be the connection's own certificate) and the handshake's client
//! verifier (`crate::edge::tls`, which refuses revoked serials): the renewal's wire, a
//! RenewRequest decoded and the signed RenewResponse encoded, and the RESOURCE_EXHAUSTED of a
//! node over its renewal bound with the time to wait ([`wire`]); the renewals the handshake
//! refused (a revoked or expired certificate), recorded as `security.renew.refused` events
//! under a bound ([`edge_refusals`]).
//!
//! A node must never renew a certificate other than the one its connection proved, and never be
//! told why a renewal was refused (every refusal is PERMISSION_DENIED "Renew refused"); a split
//! gateway must never sign a RenewResponse, only relay the api's.

pub mod edge_refusals;
pub mod wire;
