//! The local halves of a renewal: the request's parts and the check of the answer.
//!
//! [`prepare_renewal`] makes the next key (or reuses the one [`PendingRenewal`] kept after a
//! failed attempt from the same leaf), writes `node.key.next` (through
//! [`crate::identity_store::RenewalStore`], before anything is sent), builds the new CSR and the
//! `renew-pop` proof by the current key over (the new CSR's SHA-256, the node id, the client
//! time). [`check_renewal_answer`] is spec 002's step 4: the new leaf names the same node, site,
//! trust domain and role, and certifies the new key; its refusals carry the spec's messages.
//! The network client sends [`RenewalRequestParts`] and hands the answer back here.

use domain::pki::statement::{sign, RenewPop};
use domain::pki::{build_csr, KeyRole, NodeIdentity, PrivateKey, Signature};
use sha2::{Digest as _, Sha256};
use time::OffsetDateTime;

use crate::files::DataDir;
use crate::identity_store::{LoadedIdentity, RenewalBegun, RenewalStore, StoreError};

/// Why a renewal could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    /// Key generation, CSR or signing failed.
    #[error("renewal: the next node key: {0}")]
    Key(String),
    /// `node.key.next` could not be written.
    #[error("renewal: {0}")]
    Store(#[from] StoreError),
}

/// What the Renew call carries, built locally.
#[derive(Debug, Clone)]
pub struct RenewalRequestParts {
    /// The new CSR, DER.
    pub csr_der: Vec<u8>,
    /// Its SHA-256.
    pub csr_sha256: [u8; 32],
    /// The current chain, leaf first.
    pub chain: Vec<Vec<u8>>,
    /// The client time, unix milliseconds.
    pub client_time_ms: u64,
    /// `renew-pop` by the current key.
    pub proof: Signature,
}

/// The CSR (DER) and its SHA-256 for a node key.
pub fn csr_for(key: &PrivateKey) -> Result<(Vec<u8>, [u8; 32]), String> {
    let der = build_csr(key).map_err(|e| e.to_string())?;
    let digest: [u8; 32] = Sha256::digest(&der).into();
    Ok((der, digest))
}

/// The next key of a renewal that got no verified answer, kept in memory by the running
/// process (never across a restart: start-up still removes a `node.key.next` the stored leaf
/// does not certify) so the retry from the same leaf certifies the same key. The server may
/// have committed the first attempt and lost only its answer; a retry for another key from a
/// superseded leaf is a clone there (`renew:superseded`, every certificate revoked), one for
/// this key gets the committed certificate back.
#[derive(Debug, Default)]
pub struct PendingRenewal {
    kept: Option<(Vec<u8>, PrivateKey)>,
}

impl PendingRenewal {
    /// Keeps `next` for a retry from the leaf `leaf_der`.
    pub fn keep(&mut self, leaf_der: &[u8], next: &PrivateKey) {
        self.kept = PrivateKey::from_pkcs8_der(KeyRole::Node, next.pkcs8_der())
            .ok()
            .map(|k| (leaf_der.to_vec(), k));
    }

    /// The kept key when it was kept for `leaf_der` (a renewed or re-joined identity drops it).
    pub fn take_for(&mut self, leaf_der: &[u8]) -> Option<PrivateKey> {
        match self.kept.take() {
            Some((leaf, key)) if leaf == leaf_der => Some(key),
            _ => None,
        }
    }
}

/// Makes the next key (or takes the one `pending` kept for this leaf), stores it as
/// `node.key.next`, and builds the request.
pub fn prepare_renewal<'a>(
    dir: &'a DataDir,
    current: &LoadedIdentity,
    now: OffsetDateTime,
    pending: &mut PendingRenewal,
) -> Result<(RenewalBegun<'a>, RenewalRequestParts), PrepareError> {
    let leaf_der = current
        .stored
        .chain
        .first()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let next = match pending.take_for(leaf_der) {
        Some(kept) => kept,
        None => {
            PrivateKey::generate(KeyRole::Node).map_err(|e| PrepareError::Key(e.to_string()))?
        }
    };
    let begun = RenewalStore::new(dir).begin(next)?;
    let (csr_der, csr_sha256) = csr_for(begun.next_key()).map_err(PrepareError::Key)?;
    let client_time_ms = u64::try_from(now.unix_timestamp_nanos() / 1_000_000).unwrap_or(0);
    let proof = sign(
        &current.key,
        &RenewPop {
            csr_sha256,
            node_id: current.leaf.spiffe_id.node.clone(),
            client_time_ms,
        },
    )
    .map_err(|e| PrepareError::Key(e.to_string()))?;
    Ok((
        begun,
        RenewalRequestParts {
            csr_der,
            csr_sha256,
            chain: current.stored.chain.clone(),
            client_time_ms,
            proof,
        },
    ))
}

/// Why a renewal answer was refused (spec 002's messages).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenewalAnswerError {
    /// The leaf does not parse as a node certificate of this trust domain.
    #[error("renewal: the certificate: {0}")]
    Leaf(String),
    /// Another identity.
    #[error("renewal: the certificate is for {found}, not {expected}")]
    AnotherIdentity {
        /// `<site>/<node> (<role>)` of the answer.
        found: String,
        /// `<site>/<node> (<role>)` of this node.
        expected: String,
    },
    /// Another key.
    #[error("renewal: the certificate does not certify the new key")]
    AnotherKey,
}

fn who(id: &NodeIdentity) -> String {
    format!("{}/{} ({})", id.spiffe_id.site, id.spiffe_id.node, id.role)
}

/// Step 4: the new leaf names the same node, site, trust domain and role, and certifies `next`.
pub fn check_renewal_answer(
    current: &NodeIdentity,
    new_leaf_der: &[u8],
    next: &PrivateKey,
) -> Result<NodeIdentity, RenewalAnswerError> {
    let new = NodeIdentity::from_leaf_der(new_leaf_der, &current.spiffe_id.trust_domain)
        .map_err(|e| RenewalAnswerError::Leaf(e.to_string()))?;
    if new.spiffe_id != current.spiffe_id || new.role != current.role {
        return Err(RenewalAnswerError::AnotherIdentity {
            found: who(&new),
            expected: who(current),
        });
    }
    if &new.public_key != next.public_key() {
        return Err(RenewalAnswerError::AnotherKey);
    }
    Ok(new)
}
