//! The x509pop producer (spec 000 "x509pop"): the identity on disk proves itself to re-join as
//! the same node, its certificate expired or not.
//!
//! The evidence is UTF-8 JSON, base64url without padding for every binary field:
//!
//! ```text
//! {"v":1,"nodeId":"node_…","chain":["<leaf DER>","<issuer DER>"],"clientTime":<unix ms>,"sig":"<r||s>"}
//! ```
//!
//! `sig` is ES256 by the leaf's key over `domain::pki::statement::X509Pop`'s signed input,
//! `lp("x509pop") || lp(csr_sha256) || lp(node_id) || lp(u64_be(clientTime))`, so neither a renew
//! proof nor an earlier x509pop proof can be replayed as one. [`build_evidence`] is the pure
//! builder (the control plane's own, `domain::attest::x509pop`, for a file key; the same JSON
//! built here around [`sign_with`] for a key in the TPM); [`X509PopProducer`] makes a fresh one
//! (the clock read again) for every round.

use domain::pki::NodeId;
use time::OffsetDateTime;

use super::{EvidenceError, EvidenceProducer, X509POP};
use crate::files::identity::LoadedIdentity;
use crate::node_key::NodeKey;

/// Builds x509pop evidence: `chain` leaf first (its key is `signer`, in a file or the TPM),
/// bound to `csr_sha256`, `node_id` and `client_time_ms`, with the control plane's own builder
/// ([`domain::attest::x509pop::build_evidence`]).
pub fn build_evidence(
    chain: &[Vec<u8>],
    signer: &NodeKey,
    csr_sha256: &[u8; 32],
    node_id: &NodeId,
    client_time_ms: u64,
) -> Result<Vec<u8>, String> {
    domain::attest::x509pop::build_evidence(chain, signer, csr_sha256, node_id, client_time_ms)
        .map_err(|e| e.to_string())
}

/// Unix milliseconds of `t` (0 before 1970).
pub fn unix_ms(t: OffsetDateTime) -> u64 {
    u64::try_from(t.unix_timestamp_nanos() / 1_000_000).unwrap_or(0)
}

/// The x509pop producer over the identity on disk: its chain (leaf first) and its node key.
pub struct X509PopProducer {
    chain: Vec<Vec<u8>>,
    key: NodeKey,
    node_id: NodeId,
    now: Box<dyn Fn() -> OffsetDateTime>,
}

impl std::fmt::Debug for X509PopProducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("X509PopProducer")
            .field("node_id", &self.node_id)
            .finish_non_exhaustive()
    }
}

impl X509PopProducer {
    /// From a loaded identity (`identity.json` and `node.key`), reading the clock with `now`.
    pub fn new(
        identity: &LoadedIdentity,
        now: Box<dyn Fn() -> OffsetDateTime>,
    ) -> Result<X509PopProducer, EvidenceError> {
        Ok(X509PopProducer {
            chain: identity.stored.chain.clone(),
            key: identity.key.clone(),
            node_id: identity.leaf.spiffe_id.node.clone(),
            now,
        })
    }

    /// The node this identity is.
    pub fn node_id(&self) -> &NodeId {
        &self.node_id
    }
}

impl EvidenceProducer for X509PopProducer {
    fn id(&self) -> &str {
        X509POP
    }

    fn produce(
        &self,
        _round: u32,
        csr_sha256: &[u8; 32],
        challenge: Option<&[u8]>,
    ) -> Result<Vec<u8>, EvidenceError> {
        if challenge.is_some() {
            return Err(EvidenceError::NoChallenges(X509POP.to_owned()));
        }
        build_evidence(
            &self.chain,
            &self.key,
            csr_sha256,
            &self.node_id,
            unix_ms((self.now)()),
        )
        .map_err(|reason| EvidenceError::Failed {
            attestor: X509POP.to_owned(),
            reason,
        })
    }
}
