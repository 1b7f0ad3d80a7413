//! What the operator configures for the `tpm` attestor (`[attestors.tpm]` in `bcctl serve`'s
//! configuration; spec 000 "tpm").

use std::collections::BTreeMap;
use std::time::Duration;

/// The longest a challenge state may live (spec: at most 5 minutes).
pub const MAX_CHALLENGE_TTL: Duration = Duration::from_secs(300);

/// Whether a join must prove its node key is held by the TPM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NodeKeyPolicy {
    /// `node_key = "certified"` (the default): an answer without the AK's certification of the
    /// node key is refused `tpm:node-key-not-certified`.
    #[default]
    Certified,
    /// `node_key = "any"`: an answer without one is admitted and claims nothing about the key.
    Any,
}

/// Where a machine joins: a tenant, site and pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The tenant.
    pub tenant_id: String,
    /// The site.
    pub site_id: String,
    /// The pool.
    pub pool_id: String,
}

/// The `tpm` attestor's configuration.
#[derive(Debug, Clone)]
pub struct TpmConfig {
    /// The EK roots (DER): an EK certificate must chain to one of them.
    pub ek_roots: Vec<Vec<u8>>,
    /// PCR index → the SHA-256 values it may have; empty means no PCR policy.
    pub pcr_policy: BTreeMap<u32, Vec<[u8; 32]>>,
    /// Whether the node key must be certified.
    pub node_key: NodeKeyPolicy,
    /// Where an EK neither bound nor allow-listed waits for an operator's approval (a join
    /// request); `None` refuses it (`tpm:unknown-ek`).
    pub enrollment: Option<Placement>,
    /// The AES-256-GCM key that seals challenge states; every replica of one deployment has the
    /// same (derived from the deployment's keys by the shell).
    pub challenge_key: [u8; 32],
    /// How long a challenge may be answered (at most [`MAX_CHALLENGE_TTL`]).
    pub challenge_ttl: Duration,
}
