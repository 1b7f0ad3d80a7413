//! The batch scope tree: leaves, root, inclusion proofs, and the batch id.
//!
//! Spec, "The destructive-batch quorum", the scope: "a tree with one leaf per distinct (subject,
//! kind, payload): H(0x00 ‖ lp(batch_id) ‖ lp(subject) ‖ lp(kind) ‖ lp(payload_sha256)), leaves
//! ordered by hash, inner nodes H(0x01 ‖ left ‖ right) and an odd node promoted (RFC 6962 style)";
//! "payload_sha256 binds a leaf to exactly one operation, or is left empty to allow any payload of
//! that kind for that subject". A batch has 1 to [`MAX_SCOPE_LEAVES`] leaves.
//!
//! Encodings (our choices where the spec is silent):
//!
//! - `H` is SHA-256 and `lp(x)` is `uint32_be(len(x)) ‖ x`; `batch_id` is its 32 raw bytes,
//!   `subject` and `kind` their UTF-8 bytes, `payload_sha256` 32 bytes or empty (unbound leaf).
//! - Identical leaves hash alike and are kept once ("one leaf per distinct (subject, kind,
//!   payload)"); the scope size is the number of distinct leaves.
//! - The tree is built level by level: pairs are hashed left to right and a last odd node is
//!   promoted unchanged to the next level. This gives the same root as RFC 6962's recursive split.
//! - A proof is `(index, siblings)`, siblings bottom-up; a promoted level contributes no sibling.
//!   Verification needs the scope size, which the approval signs. Since the tree is RFC 9162's,
//!   the siblings are RFC 9162's inclusion path and [`verify_proof`] hands them to the codebase's
//!   one inclusion verifier ([`crate::merkle::verify_inclusion`], §2.1.3.2).
//! - The batch id is SHA-256(lp("batch-id") ‖ lp(tenant) ‖ lp(caller) ‖ lp(idempotency_key))
//!   ([`BatchId::derive`]): the spec says it "derives from the tenant, the caller's identity and
//!   the key" without fixing the bytes, so a retry with the same key gets the same id and two
//!   callers or tenants never collide.
//!
//! Speed: all levels live in one flat vector of 32-byte hashes (about 2n entries) and hashing
//! streams into SHA-256 without building byte strings, so a 50,000-leaf tree costs no per-node
//! allocation; a proof costs one vector.

use sha2::{Digest, Sha256};

use super::bytes32::bytes32_newtype;
use super::signing::signed_parts;
use crate::merkle;

/// The most leaves a batch scope may have.
pub const MAX_SCOPE_LEAVES: usize = 50_000;
/// The longest subject or kind, in bytes (our bound; the spec sets none).
pub const MAX_LEAF_FIELD_BYTES: usize = 1024;
/// The longest tenant id, caller identity or idempotency key, in bytes (our bound).
pub const MAX_ID_INPUT_BYTES: usize = 1024;

bytes32_newtype!(
    /// A batch id: 32 bytes derived from the tenant, the caller and the idempotency key.
    BatchId
);

bytes32_newtype!(
    /// A node of the scope tree: a leaf hash, an inner node, a sibling or the root.
    ScopeHash
);

bytes32_newtype!(
    /// SHA-256 of a command payload, binding a leaf to exactly one operation.
    PayloadDigest
);

impl PayloadDigest {
    /// SHA-256 of payload bytes.
    pub fn of(payload: &[u8]) -> Self {
        PayloadDigest(Sha256::digest(payload).into())
    }
}

/// Why a batch id cannot be derived.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchIdError {
    /// An input is empty.
    #[error("the {0} is empty; a batch id needs a tenant, a caller and an idempotency key")]
    Empty(&'static str),
    /// An input is longer than [`MAX_ID_INPUT_BYTES`].
    #[error("the {field} is {len} bytes long; at most {max} are allowed")]
    TooLong {
        /// Which input.
        field: &'static str,
        /// Its length.
        len: usize,
        /// The bound.
        max: usize,
    },
}

impl BatchId {
    /// Derives the batch id: SHA-256(lp("batch-id") ‖ lp(tenant) ‖ lp(caller) ‖ lp(key)).
    pub fn derive(
        tenant: &str,
        caller: &str,
        idempotency_key: &str,
    ) -> Result<BatchId, BatchIdError> {
        for (field, value) in [
            ("tenant id", tenant),
            ("caller identity", caller),
            ("idempotency key", idempotency_key),
        ] {
            if value.is_empty() {
                return Err(BatchIdError::Empty(field));
            }
            if value.len() > MAX_ID_INPUT_BYTES {
                return Err(BatchIdError::TooLong {
                    field,
                    len: value.len(),
                    max: MAX_ID_INPUT_BYTES,
                });
            }
        }
        let framed = signed_parts(
            "batch-id",
            &[
                tenant.as_bytes(),
                caller.as_bytes(),
                idempotency_key.as_bytes(),
            ],
        );
        Ok(BatchId(Sha256::digest(framed).into()))
    }
}

/// Why a leaf or a scope is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScopeError {
    /// A subject or kind is empty.
    #[error("the leaf's {0} is empty")]
    EmptyField(&'static str),
    /// A subject or kind is longer than [`MAX_LEAF_FIELD_BYTES`].
    #[error("the leaf's {field} is {len} bytes long; at most {max} are allowed")]
    FieldTooLong {
        /// `subject` or `kind`.
        field: &'static str,
        /// Its length.
        len: usize,
        /// The bound.
        max: usize,
    },
    /// A subject or kind holds a control character (it is shown to approvers as it is).
    #[error("the leaf's {0} contains a control character; subjects and kinds are shown to approvers and must be printable")]
    ControlCharacter(&'static str),
    /// No leaves.
    #[error("a batch scope needs at least one leaf")]
    Empty,
    /// More than [`MAX_SCOPE_LEAVES`] leaves.
    #[error("a batch scope has {count} leaves; at most {max} are allowed: split the work into several batches")]
    TooManyLeaves {
        /// Leaves given.
        count: usize,
        /// The bound.
        max: usize,
    },
}

/// One scope leaf: a subject, a command kind, and optionally the payload digest it is bound to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "ScopeLeafWire", into = "ScopeLeafWire")]
pub struct ScopeLeaf {
    subject: String,
    kind: String,
    payload_sha256: Option<PayloadDigest>,
}

fn check_field(field: &'static str, value: &str) -> Result<(), ScopeError> {
    if value.is_empty() {
        return Err(ScopeError::EmptyField(field));
    }
    if value.len() > MAX_LEAF_FIELD_BYTES {
        return Err(ScopeError::FieldTooLong {
            field,
            len: value.len(),
            max: MAX_LEAF_FIELD_BYTES,
        });
    }
    if value.chars().any(char::is_control) {
        return Err(ScopeError::ControlCharacter(field));
    }
    Ok(())
}

impl ScopeLeaf {
    /// A leaf; `payload_sha256` `None` admits any payload of that kind for that subject.
    pub fn new(
        subject: impl Into<String>,
        kind: impl Into<String>,
        payload_sha256: Option<PayloadDigest>,
    ) -> Result<Self, ScopeError> {
        let (subject, kind) = (subject.into(), kind.into());
        check_field("subject", &subject)?;
        check_field("kind", &kind)?;
        Ok(ScopeLeaf {
            subject,
            kind,
            payload_sha256,
        })
    }

    /// What the command acts on.
    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// The command kind.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// The bound payload digest, if any.
    pub fn payload_sha256(&self) -> Option<&PayloadDigest> {
        self.payload_sha256.as_ref()
    }

    /// The leaf hash within a batch.
    pub fn hash(&self, batch_id: &BatchId) -> ScopeHash {
        leaf_hash(
            batch_id,
            &self.subject,
            &self.kind,
            self.payload_sha256.as_ref(),
        )
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct ScopeLeafWire {
    subject: String,
    kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    payload_sha256: Option<PayloadDigest>,
}

impl TryFrom<ScopeLeafWire> for ScopeLeaf {
    type Error = ScopeError;
    fn try_from(wire: ScopeLeafWire) -> Result<Self, Self::Error> {
        ScopeLeaf::new(wire.subject, wire.kind, wire.payload_sha256)
    }
}

impl From<ScopeLeaf> for ScopeLeafWire {
    fn from(leaf: ScopeLeaf) -> Self {
        ScopeLeafWire {
            subject: leaf.subject,
            kind: leaf.kind,
            payload_sha256: leaf.payload_sha256,
        }
    }
}

fn update_lp(hasher: &mut Sha256, bytes: &[u8]) {
    let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
    hasher.update(len.to_be_bytes());
    hasher.update(bytes);
}

/// H(0x00 ‖ lp(batch_id) ‖ lp(subject) ‖ lp(kind) ‖ lp(payload_sha256)); an unbound leaf has an
/// empty payload_sha256.
pub fn leaf_hash(
    batch_id: &BatchId,
    subject: &str,
    kind: &str,
    payload_sha256: Option<&PayloadDigest>,
) -> ScopeHash {
    let mut hasher = Sha256::new();
    hasher.update([merkle::LEAF_PREFIX]);
    update_lp(&mut hasher, batch_id.as_bytes());
    update_lp(&mut hasher, subject.as_bytes());
    update_lp(&mut hasher, kind.as_bytes());
    update_lp(
        &mut hasher,
        payload_sha256.map_or(&[][..], |d| d.as_bytes()),
    );
    ScopeHash(hasher.finalize().into())
}

/// H(0x01 ‖ left ‖ right): RFC 9162's interior hash ([`crate::merkle::node_hash`]) on scope
/// hashes.
pub fn node_hash(left: &ScopeHash, right: &ScopeHash) -> ScopeHash {
    ScopeHash(merkle::node_hash(&left.0, &right.0))
}

/// An inclusion proof: the leaf's index in hash order and its siblings, bottom-up.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct ScopeProof {
    /// The leaf's position among the leaves ordered by hash.
    pub index: u32,
    /// The sibling hashes from the leaf level up; promoted levels have none.
    pub siblings: Vec<ScopeHash>,
}

/// Why a proof does not prove a leaf.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProofError {
    /// The scope size is 0 or above [`MAX_SCOPE_LEAVES`].
    #[error("the scope size {0} is not from 1 to 50000")]
    BadSize(u32),
    /// The index is not below the scope size.
    #[error("the proof's index {index} is not below the scope size {size}")]
    IndexOutOfRange {
        /// The index.
        index: u32,
        /// The size.
        size: u32,
    },
    /// Too few or too many siblings for that index and size.
    #[error("the proof has {given} siblings; index and scope size need {expected}")]
    SiblingCount {
        /// Siblings given.
        given: usize,
        /// Siblings needed.
        expected: usize,
    },
    /// The recomputed root is not the signed one.
    #[error(
        "the proof does not lead to the approved scope root: the command is not in this batch"
    )]
    RootMismatch,
}

/// Checks that `leaf` is at `proof.index` of a tree of `size` leaves with root `root`.
///
/// The scope tree is an RFC 9162 tree over its leaf hashes (level by level with a last odd node
/// promoted gives `MTH`'s split, and [`ScopeProof::siblings`] is exactly `PATH`), so after the
/// scope's own size bound the proof goes to the one inclusion verifier,
/// [`crate::merkle::verify_inclusion`]. Its refusals keep the scope's names: an index at or past
/// the size, a sibling count other than the one index and size call for (surplus siblings
/// included), a root that does not match.
pub fn verify_proof(
    leaf: &ScopeHash,
    proof: &ScopeProof,
    size: u32,
    root: &ScopeHash,
) -> Result<(), ProofError> {
    if size == 0 || size as usize > MAX_SCOPE_LEAVES {
        return Err(ProofError::BadSize(size));
    }
    merkle::verify_inclusion(
        leaf.as_bytes(),
        u64::from(proof.index),
        u64::from(size),
        proof.siblings.iter().map(ScopeHash::as_bytes),
        root.as_bytes(),
    )
    .map_err(|e| scope_refusal(e, proof.index, size))
}

/// The scope's name for the shared verifier's refusal of an inclusion proof.
fn scope_refusal(error: merkle::ProofError, index: u32, size: u32) -> ProofError {
    match error {
        merkle::ProofError::IndexOutOfRange { .. } => ProofError::IndexOutOfRange { index, size },
        merkle::ProofError::TooShort { expected, got, .. }
        | merkle::ProofError::ExtraHashes { expected, got, .. } => ProofError::SiblingCount {
            given: got,
            expected,
        },
        merkle::ProofError::RootMismatch => ProofError::RootMismatch,
        // Consistency-proof refusals, which an inclusion check never returns.
        merkle::ProofError::OldSizeExceedsNew { .. }
        | merkle::ProofError::OldRootMismatch
        | merkle::ProofError::NewRootMismatch
        | merkle::ProofError::EqualSizeDifferentRoots { .. }
        | merkle::ProofError::BadEmptyRoot => ProofError::RootMismatch,
    }
}

/// A built scope tree: every level in one flat vector, leaves first (in hash order), root last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopeTree {
    nodes: Vec<ScopeHash>,
    /// Start of each level in `nodes`; the last level holds only the root.
    level_starts: Vec<usize>,
    size: usize,
}

impl ScopeTree {
    /// Builds the tree of a batch's leaves (deduplicated, then ordered by hash).
    pub fn build(batch_id: &BatchId, leaves: &[ScopeLeaf]) -> Result<Self, ScopeError> {
        Self::check_count(leaves.len())?;
        let hashes = leaves.iter().map(|leaf| leaf.hash(batch_id)).collect();
        Self::from_leaf_hashes(hashes)
    }

    /// Builds the tree over leaf hashes (deduplicated, then ordered by hash).
    pub fn from_leaf_hashes(mut leaves: Vec<ScopeHash>) -> Result<Self, ScopeError> {
        Self::check_count(leaves.len())?;
        leaves.sort_unstable();
        leaves.dedup();
        let size = leaves.len();
        let mut nodes = leaves;
        nodes.reserve(size + 2 * usize::BITS as usize);
        let mut level_starts = vec![0];
        let (mut start, mut len) = (0, size);
        while len > 1 {
            for pair in 0..len / 2 {
                let left = nodes[start + 2 * pair];
                let right = nodes[start + 2 * pair + 1];
                nodes.push(node_hash(&left, &right));
            }
            if len % 2 == 1 {
                let promoted = nodes[start + len - 1];
                nodes.push(promoted);
            }
            start += len;
            len = len.div_ceil(2);
            level_starts.push(start);
        }
        Ok(ScopeTree {
            nodes,
            level_starts,
            size,
        })
    }

    fn check_count(count: usize) -> Result<(), ScopeError> {
        if count == 0 {
            return Err(ScopeError::Empty);
        }
        if count > MAX_SCOPE_LEAVES {
            return Err(ScopeError::TooManyLeaves {
                count,
                max: MAX_SCOPE_LEAVES,
            });
        }
        Ok(())
    }

    /// The root.
    pub fn root(&self) -> ScopeHash {
        self.nodes[self.nodes.len() - 1]
    }

    /// The number of distinct leaves (the scope size approvers sign).
    pub fn size(&self) -> u32 {
        self.size as u32
    }

    /// The leaf hashes in tree order (ascending).
    pub fn leaves(&self) -> &[ScopeHash] {
        &self.nodes[..self.size]
    }

    /// The index of a leaf hash, if the tree holds it.
    pub fn index_of(&self, leaf: &ScopeHash) -> Option<u32> {
        self.leaves().binary_search(leaf).ok().map(|i| i as u32)
    }

    /// The proof for the leaf at `index`, or `None` past the last leaf.
    pub fn proof(&self, index: u32) -> Option<ScopeProof> {
        let mut siblings = Vec::with_capacity(self.level_starts.len());
        self.proof_into(index, &mut siblings)?;
        Some(ScopeProof { index, siblings })
    }

    /// Writes the siblings of the leaf at `index` into `siblings` (cleared first), reusing its
    /// allocation; `None` past the last leaf.
    pub fn proof_into(&self, index: u32, siblings: &mut Vec<ScopeHash>) -> Option<()> {
        if index as usize >= self.size {
            return None;
        }
        siblings.clear();
        let (mut position, mut len) = (index as usize, self.size);
        for &start in &self.level_starts[..self.level_starts.len() - 1] {
            let sibling = position ^ 1;
            if sibling < len {
                siblings.push(self.nodes[start + sibling]);
            }
            position /= 2;
            len = len.div_ceil(2);
        }
        Some(())
    }

    /// Every leaf's proof, in leaf order.
    pub fn proofs(&self) -> impl Iterator<Item = ScopeProof> + '_ {
        (0..self.size()).filter_map(move |index| self.proof(index))
    }

    /// Appends to `out` the nodes at `index` of levels 1, 2, ... for as long as a level has an
    /// `index` (32 bytes each; row 0 ends with the root). Stored with leaf `index`, these rows
    /// hold every node of the tree exactly once, and [`assemble_proof`] reads any leaf's proof
    /// back from them. Nothing is appended for an index past the first level's end.
    pub fn stored_nodes_into(&self, index: usize, out: &mut Vec<u8>) {
        let mut len = self.size;
        for &start in &self.level_starts[1..] {
            len = len.div_ceil(2);
            if index >= len {
                break;
            }
            out.extend_from_slice(self.nodes[start + index].as_bytes());
        }
    }
}

/// The stored rows (index) and levels a proof for leaf `index` of a `size`-leaf tree reads, in
/// proof order: `(level, row)`, where level 0 means the row's leaf hash and level `l >= 1` the
/// `l`-th node [`ScopeTree::stored_nodes_into`] stored with that row. Empty past the last leaf.
pub fn proof_rows(index: u32, size: u32) -> Vec<(u32, u32)> {
    let mut rows = Vec::new();
    if index >= size {
        return rows;
    }
    let (mut position, mut len, mut level) = (index, size, 0u32);
    while len > 1 {
        let sibling = position ^ 1;
        if sibling < len {
            rows.push((level, sibling));
        }
        position /= 2;
        len = len.div_ceil(2);
        level += 1;
    }
    rows
}

/// Reads the proof of leaf `index` back from stored rows: `node(level, row)` answers the hash
/// [`proof_rows`] names (a row's leaf hash at level 0, its `level`-th stored node above).
/// `None` when the index is past the last leaf or a node is missing.
pub fn assemble_proof(
    index: u32,
    size: u32,
    mut node: impl FnMut(u32, u32) -> Option<ScopeHash>,
) -> Option<ScopeProof> {
    if index >= size {
        return None;
    }
    let siblings = proof_rows(index, size)
        .into_iter()
        .map(|(level, row)| node(level, row))
        .collect::<Option<Vec<_>>>()?;
    Some(ScopeProof { index, siblings })
}
