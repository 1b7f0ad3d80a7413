//! The streams and tenants quorum events are written to.

use domain::quorum::BatchId;

/// The stream of the deployment's trust bundle.
pub const TRUST_BUNDLE_STREAM: &str = "trust-bundle";
/// Tenant id for deployment-wide events (the trust bundle): no node joins it
/// ([`domain::attest::DEPLOYMENT_TENANT`], reserved).
pub const DEPLOYMENT_TENANT: &str = domain::attest::DEPLOYMENT_TENANT;

/// The stream of a batch.
pub fn batch_stream(batch_id: &BatchId) -> String {
    format!("batch/{}", batch_id.to_hex())
}

/// The stream of a node's trust reports.
pub fn node_trust_stream(node_id: &str) -> String {
    format!("node-trust/{node_id}")
}

/// A fresh event id.
pub(crate) fn new_event_id() -> [u8; 16] {
    events::envelope::new_event_id()
}
