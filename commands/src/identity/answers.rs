//! What a join or a renewal is asked and what it answers, as domain values: the edge decodes
//! the wire request into these and encodes and signs the answer.

use domain::identity::JoinInput;

/// A join as the edge received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinRequest {
    /// The attestor named (empty: the first of [`super::SUPPORTED_ATTESTORS`]).
    pub attestor: String,
    /// CSR, sealed token, role and claims.
    pub input: JoinInput,
}

/// An admitted join: the body of the JoinResponse, before encoding and signing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinAnswer {
    /// SHA-256 of the CSR the answer is bound to.
    pub csr_sha256: [u8; 32],
    /// The deployment's trust domain.
    pub trust_domain: String,
    /// The node admitted.
    pub node_id: String,
    /// Its site.
    pub site_id: String,
    /// Its role.
    pub role: String,
    /// The certificate's identity generation.
    pub identity_generation: u64,
    /// The new leaf, then the node CA.
    pub certificate_chain: Vec<Vec<u8>>,
    /// The root CA.
    pub trust_roots: Vec<Vec<u8>>,
    /// The leaf's end of validity, µs since the epoch.
    pub not_after_us: i64,
    /// The decision's time, µs since the epoch.
    pub server_time_us: i64,
}

/// An admitted renewal: the body of the RenewResponse, before encoding and signing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenewAnswer {
    /// SHA-256 of the new CSR the answer is bound to.
    pub csr_sha256: [u8; 32],
    /// The deployment's trust domain.
    pub trust_domain: String,
    /// The node renewed.
    pub node_id: String,
    /// Its site.
    pub site_id: String,
    /// Its role.
    pub role: String,
    /// The certificate's identity generation.
    pub identity_generation: u64,
    /// The new leaf, then the node CA.
    pub certificate_chain: Vec<Vec<u8>>,
    /// The root CA.
    pub trust_roots: Vec<Vec<u8>>,
    /// The leaf's end of validity, µs since the epoch.
    pub not_after_us: i64,
    /// The decision's time, µs since the epoch.
    pub server_time_us: i64,
}
