//! The state of the attestation plane's own streams, as the admission step reads it: pools and
//! their attestor policy (spec 000 "Requiring an attestor"), and join requests (spec 001
//! "Approval"). Their decisions and `evolve` functions live beside the modules that write them.

/// A pool (`pools` row, stream `pool/<id>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolState {
    /// Pool id.
    pub pool_id: String,
    /// Owning tenant: a `join:pool-attestor` refusal is recorded in it.
    pub tenant_id: String,
    /// Free text.
    pub description: String,
    /// The attestors that may admit a machine into it; `None`: any the control plane runs.
    pub join_attestors: Option<Vec<String>>,
}

impl PoolState {
    /// Whether `attestor` may admit a machine into this pool.
    pub fn admits(&self, attestor: &str) -> bool {
        match &self.join_attestors {
            None => true,
            Some(ids) => ids.iter().any(|id| id == attestor),
        }
    }
}

/// Where a join request is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JoinRequestStatus {
    /// Waiting for an operator.
    Pending,
    /// Approved: the next retry joins and consumes it.
    Approved,
    /// Rejected: retries are refused.
    Rejected,
    /// The approved join admitted its node.
    Consumed,
    /// Not decided (or not consumed) in time.
    Expired,
}

impl JoinRequestStatus {
    /// The stored text.
    pub fn as_str(self) -> &'static str {
        match self {
            JoinRequestStatus::Pending => "pending",
            JoinRequestStatus::Approved => "approved",
            JoinRequestStatus::Rejected => "rejected",
            JoinRequestStatus::Consumed => "consumed",
            JoinRequestStatus::Expired => "expired",
        }
    }

    /// Parses the stored text.
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "pending" => JoinRequestStatus::Pending,
            "approved" => JoinRequestStatus::Approved,
            "rejected" => JoinRequestStatus::Rejected,
            "consumed" => JoinRequestStatus::Consumed,
            "expired" => JoinRequestStatus::Expired,
            _ => return None,
        })
    }
}

/// A join request (`join_requests` row, stream `join-request/<id>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinRequestState {
    /// Request id (`jr_...`).
    pub request_id: String,
    /// The tenant the evidence authenticated.
    pub tenant_id: String,
    /// The attestor that asked for approval.
    pub attestor: String,
    /// What it is keyed by.
    pub subject: [u8; 32],
    /// SHA-256 of the CSR of the round that created it.
    pub csr_sha256: [u8; 32],
    /// Status.
    pub status: JoinRequestStatus,
    /// A pending (or approved, unconsumed) request is void after this, µs.
    pub expires_at_us: i64,
    /// Stream version (for the expected-version append).
    pub version: i64,
}

/// How long a join request waits for an operator before it expires.
pub const JOIN_REQUEST_TTL: time::Duration = time::Duration::hours(24);

/// The retry delay a pending join answers (spec 000 "Two-round joins": 30 s by default).
pub const JOIN_PENDING_RETRY_SECONDS: u32 = 30;
