//! What a join or a renewal is asked and what it answers, as domain values: the edge decodes
//! the wire request into these and encodes and signs the answer.

use domain::identity::JoinInput;

/// A join as the edge received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinRequest {
    /// The attestor named (empty: `join-token`).
    pub attestor: String,
    /// CSR, sealed token, role, claims and the attestor's evidence.
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
    /// The command kinds the certificate allows (empty: every kind its role allows).
    pub allowed_kinds: Vec<String>,
}

/// What a join answers: admitted, or deferred (spec 001 "Two-round joins"). The edge signs
/// each the same way (purpose `join-response`, bound to the CSR's SHA-256); a deferral issues
/// nothing and spends nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JoinOutcome {
    /// Admitted: the node and its chain.
    Joined(JoinAnswer),
    /// Waiting for an operator's approval of a join request: retry with the same CSR.
    Pending {
        /// The join request waited on.
        request_id: String,
        /// When to retry.
        retry_after_seconds: u32,
        /// SHA-256 of the CSR the answer is bound to.
        csr_sha256: [u8; 32],
        /// The deployment's trust domain.
        trust_domain: String,
        /// The decision's time, µs since the epoch.
        server_time_us: i64,
    },
    /// The attestor asks a question: answer it in `JoinRequest.attestation` with the same CSR.
    Challenge {
        /// The attestor asking.
        attestor: String,
        /// Attestor-specific bytes for the agent's producer.
        payload: Vec<u8>,
        /// Answers after this are refused, µs since the epoch.
        not_after_us: i64,
        /// SHA-256 of the CSR the answer is bound to.
        csr_sha256: [u8; 32],
        /// The deployment's trust domain.
        trust_domain: String,
        /// The decision's time, µs since the epoch.
        server_time_us: i64,
    },
}

impl JoinOutcome {
    /// SHA-256 of the CSR the answer is bound to.
    pub fn csr_sha256(&self) -> [u8; 32] {
        match self {
            JoinOutcome::Joined(a) => a.csr_sha256,
            JoinOutcome::Pending { csr_sha256, .. } | JoinOutcome::Challenge { csr_sha256, .. } => {
                *csr_sha256
            }
        }
    }

    /// The admitted join, if it was one.
    pub fn joined(self) -> Option<JoinAnswer> {
        match self {
            JoinOutcome::Joined(a) => Some(a),
            _ => None,
        }
    }

    /// `admitted`, `deferred-approval` or `deferred-challenge` (the metering outcomes).
    pub fn kind(&self) -> &'static str {
        match self {
            JoinOutcome::Joined(_) => "admitted",
            JoinOutcome::Pending { .. } => "deferred-approval",
            JoinOutcome::Challenge { .. } => "deferred-challenge",
        }
    }
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
    /// The command kinds the certificate allows (empty: every kind its role allows).
    pub allowed_kinds: Vec<String>,
}
