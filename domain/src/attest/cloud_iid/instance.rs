//! What every provider's verifier proves ([`CloudIdentity`]: which instance of which account),
//! and the attestor's id: what the attestor, the refusals and each provider name.

use super::wire::CloudProvider;

/// The attestor id.
pub const CLOUD_IID_ATTESTOR: &str = events::schema::attestor_ids::CLOUD_IID;

/// What a provider's verifier proved: which instance of which account, and when its document
/// was issued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloudIdentity {
    /// The provider.
    pub provider: CloudProvider,
    /// The AWS account id, GCP project id, Azure subscription id or OIDC issuer.
    pub account: String,
    /// The instance id (AWS, GCP), VM id (Azure) or subject (OIDC).
    pub instance: String,
    /// When the document was issued (µs since the epoch).
    pub issued_at_us: i64,
}
