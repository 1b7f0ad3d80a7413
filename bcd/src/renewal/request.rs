//! The local halves of a renewal: the request's parts and the check of the answer.
//!
//! [`prepare_renewal`] makes the next key (or reuses the one a failed attempt from the same leaf
//! left: in [`PendingRenewal`], or on disk as `node.key.next`, which a restart keeps,
//! [`LoadedIdentity::pending_next`]), builds the new CSR and the `renew-pop` proof, then writes
//! `node.key.next` (through [`crate::files::identity::RenewalStore`], before anything is sent;
//! nothing when any step failed). The proof is by the current key over (the new CSR's SHA-256,
//! the node id, the client time). [`check_renewal_answer`] is spec 002's step 4: the new leaf names the same node, site,
//! trust domain and role, and certifies the new key; its refusals carry the spec's messages.
//! The network client sends [`RenewalRequestParts`] and hands the answer back here.
//!
//! The next key (spec 002 "Renewal", step 1): when the current leaf names a TPM AK (a
//! `urn:bc:tpm-ak:` statement), the TPM is opened, its AK must be the one the leaf names, the
//! next key is made in that TPM and the AK certifies it over `sha256(csr)` into
//! [`RenewalRequestParts::key_attestation`]; every failure is the spec's message and nothing is
//! sent, with no file fallback. Under `[helper]` the same happens through `bcd helper`
//! (`tpm.ak`, `tpm.nodekey` of a unique this machine's random generator made, `tpm.certify`),
//! every answer checked before anything is stored or sent. Otherwise the next key goes into the TPM when the host has one
//! (a file-key node moves into the TPM here), else it is a file, with a warning.

use domain::attest::tpm::TpmKeyAttestation;
use domain::pki::statement::RenewPop;
use domain::pki::{
    build_csr_with, sign_with, BuildCsrError, NodeIdentity, NodeSigner, PublicKey, Signature,
};
use sha2::{Digest as _, Sha256};
use time::OffsetDateTime;

use crate::files::identity::{LoadedIdentity, RenewalBegun, RenewalStore, StoreError, WAY_BACK};
use crate::files::DataDir;
use crate::node_key::{new_node_key, NodeKey, TpmHost};
use crate::tpm::AttestationKey;

/// The prefix of the statement that names the AK a leaf's key was certified by.
pub const TPM_AK_STATEMENT_PREFIX: &str = "urn:bc:tpm-ak:";

/// Why a renewal could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    /// Key generation, CSR or signing failed.
    #[error("renewal: the next node key: {0}")]
    Key(String),
    /// `node.key.next` could not be written.
    #[error("renewal: {0}")]
    Store(#[from] StoreError),
    /// The leaf names an AK and the TPM cannot be opened (or its AK loaded).
    #[error("renewal: the certificate's node key is in the TPM, which is unavailable: {0}")]
    TpmUnavailable(String),
    /// The leaf names another AK than this TPM's.
    #[error(
        "renewal: this TPM's attestation key is not the one the certificate names (another TPM, \
         or its endorsement seed changed): the certificate cannot be renewed here; {WAY_BACK}"
    )]
    AnotherAk,
    /// The leaf names an AK and the TPM could not make the next key.
    #[error("renewal: the next node key in the TPM: {0}")]
    NextKeyInTpm(String),
    /// The leaf names an AK and the AK could not certify the next key.
    #[error("renewal: the TPM's attestation key certifying the next key: {0}")]
    Certification(String),
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
    /// The AK's certification of the next key, for a leaf that names an AK.
    pub key_attestation: Option<TpmKeyAttestation>,
    /// Why the next key is a file although a TPM was tried (to log).
    pub warning: Option<String>,
}

/// The CSR (DER) and its SHA-256 for a node key; a signer's failure is its own reason
/// (`the helper's signature is not the node key's`).
pub fn csr_for(key: &dyn NodeSigner) -> Result<(Vec<u8>, [u8; 32]), String> {
    let der = build_csr_with(key).map_err(|e| match e {
        BuildCsrError::Signer(signer) => signer.0,
        other => other.to_string(),
    })?;
    let digest: [u8; 32] = Sha256::digest(&der).into();
    Ok((der, digest))
}

/// The next key of a renewal that got no verified answer, kept in memory by the running
/// process so the retry from the same leaf certifies the same key (across a restart the same
/// key comes back from `node.key.next`, [`LoadedIdentity::pending_next`]). The server may
/// have committed the first attempt and lost only its answer; a retry for another key from a
/// superseded leaf is a clone there (`renew:superseded`, every certificate revoked), one for
/// this key gets the committed certificate back.
#[derive(Debug, Default)]
pub struct PendingRenewal {
    kept: Option<(Vec<u8>, NodeKey)>,
}

impl PendingRenewal {
    /// Keeps `next` for a retry from the leaf `leaf_der`.
    pub fn keep(&mut self, leaf_der: &[u8], next: &NodeKey) {
        self.kept = Some((leaf_der.to_vec(), next.clone()));
    }

    /// Forgets the kept key (the server refused the renewal: no certificate for it exists).
    pub fn forget(&mut self) {
        self.kept = None;
    }

    /// The kept key when it was kept for `leaf_der` (a renewed or re-joined identity drops it).
    pub fn take_for(&mut self, leaf_der: &[u8]) -> Option<NodeKey> {
        match self.kept.take() {
            Some((leaf, key)) if leaf == leaf_der => Some(key),
            _ => None,
        }
    }
}

/// The AK statement of a leaf (`urn:bc:tpm-ak:…`), when it names one.
pub fn ak_statement(leaf: &NodeIdentity) -> Option<&str> {
    leaf.statements
        .iter()
        .map(|s| s.as_str())
        .find(|s| s.starts_with(TPM_AK_STATEMENT_PREFIX))
}

/// The TPM of a leaf that names an AK, checked: it opens (or its helper answers) and its AK is
/// the one named.
fn tpm_of_ak(
    current: &LoadedIdentity,
    statement: &str,
) -> Result<(TpmHost, AttestationKey), PrepareError> {
    let tpm = current.tpm.clone();
    let ak = tpm
        .attestation_key()
        .map_err(|e| PrepareError::TpmUnavailable(e.to_string()))?;
    if ak.statement() != statement {
        return Err(PrepareError::AnotherAk);
    }
    Ok((tpm, ak))
}

/// Makes the next key (or takes the one `pending` kept for this leaf, else the one
/// `node.key.next` held at load), stores it as `node.key.next`, and builds the request (with the
/// AK's certification for a leaf naming one).
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
    let kept = pending
        .take_for(leaf_der)
        .or_else(|| current.pending_next.clone());
    let ak = match ak_statement(&current.leaf) {
        Some(statement) => Some(tpm_of_ak(current, statement)?),
        None => None,
    };
    let mut warning = None;
    let next = match (&ak, kept) {
        // A kept key of an AK-named leaf is a TPM key (it was made below).
        (Some(_), Some(kept @ NodeKey::Tpm(_))) => kept,
        (Some((tpm, _)), _) => tpm
            .create_node_key()
            .map_err(|e| PrepareError::NextKeyInTpm(e.to_string()))?
            .into(),
        (None, Some(kept)) => kept,
        (None, None) => {
            let made = new_node_key(&current.tpm).map_err(PrepareError::Key)?;
            warning = made.warning;
            made.key
        }
    };
    // Everything is built and every answer checked before `node.key.next` is written: a key,
    // a signature or a certification that fails leaves nothing stored.
    let (csr_der, csr_sha256) = csr_for(&next).map_err(PrepareError::Key)?;
    let key_attestation = match (&ak, next.as_tpm()) {
        (Some((tpm, ak)), Some(key)) => {
            let certified = tpm
                .certify(ak, key, &csr_sha256)
                .map_err(|e| PrepareError::Certification(e.to_string()))?;
            Some(TpmKeyAttestation {
                ak_public: ak.public_area.clone(),
                key_public: certified.public,
                certify_info: certified.certify_info,
                signature: certified.signature,
            })
        }
        _ => None,
    };
    let client_time_ms = u64::try_from(now.unix_timestamp_nanos() / 1_000_000).unwrap_or(0);
    let proof = sign_with(
        &current.key,
        &RenewPop {
            csr_sha256,
            node_id: current.leaf.spiffe_id.node.clone(),
            client_time_ms,
        },
    )
    .map_err(|e| PrepareError::Key(format!("the current key's renew proof: {e}")))?;
    let begun = RenewalStore::new(dir).begin(next)?;
    Ok((
        begun,
        RenewalRequestParts {
            csr_der,
            csr_sha256,
            chain: current.stored.chain.clone(),
            client_time_ms,
            proof,
            key_attestation,
            warning,
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
    next: &PublicKey,
) -> Result<NodeIdentity, RenewalAnswerError> {
    let new = NodeIdentity::from_leaf_der(new_leaf_der, &current.spiffe_id.trust_domain)
        .map_err(|e| RenewalAnswerError::Leaf(e.to_string()))?;
    if new.spiffe_id != current.spiffe_id || new.role != current.role {
        return Err(RenewalAnswerError::AnotherIdentity {
            found: who(&new),
            expected: who(current),
        });
    }
    if &new.public_key != next {
        return Err(RenewalAnswerError::AnotherKey);
    }
    Ok(new)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ak_named_renewals_failures_are_spec_002s_messages() {
        let cases = [
            (
                PrepareError::TpmUnavailable("x".into()),
                "renewal: the certificate's node key is in the TPM, which is unavailable: x",
            ),
            (
                PrepareError::AnotherAk,
                "renewal: this TPM's attestation key is not the one the certificate names \
                 (another TPM, or its endorsement seed changed): the certificate cannot be \
                 renewed here; join again: bcd join --reset --yes, then bcd join",
            ),
            (
                PrepareError::NextKeyInTpm("x".into()),
                "renewal: the next node key in the TPM: x",
            ),
            (
                PrepareError::Certification("x".into()),
                "renewal: the TPM's attestation key certifying the next key: x",
            ),
        ];
        for (error, message) in cases {
            assert_eq!(error.to_string(), message);
        }
    }
}
