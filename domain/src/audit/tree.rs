//! The storage-friendly tree: an appender for the sequencer, and proofs from stored nodes.
//!
//! The sequencer persists every leaf hash and the hash of every *complete* subtree, addressed by
//! [`NodeCoord`] `(level, index)`: level 0 holds the leaf hashes, and node `(l, i)` covers leaves
//! `[i * 2^l, (i + 1) * 2^l)`. A complete subtree's hash never changes once its last leaf is in,
//! so stored nodes are write-once.
//!
//! - [`Frontier`] is the pure appender. It holds the tree size and the hashes of the complete
//!   subtrees along the size's binary decomposition (the "right edge", one per set bit of the
//!   size, at most 64 hashes, no heap). [`Frontier::append`] adds a batch of leaf hashes and
//!   reports every new node to store; [`Frontier::root`] is the tree head. Appending does no
//!   per-leaf allocation: each leaf costs its merges' hashes and nothing else.
//! - Proofs and roots at any size are *plans* ([`ProofPlan`]): the list of stored nodes to read
//!   (O(log n) of them) and how to fold them into the proof hashes. The roots of incomplete
//!   subtrees on the right edge (RFC 9162 §2.1.1, `MTH(D[k:n])` for n - k not a power of two)
//!   are folded from the complete subtrees of their binary decomposition, right to left. A plan
//!   can be answered synchronously through [`HashReader`] ([`prove_inclusion`],
//!   [`prove_consistency`], [`root_at_size`]), or asynchronously by a caller that fetches
//!   [`ProofPlan::node_ids`] in one query and calls [`ProofPlan::assemble`].
//!
//! The plans follow RFC 9162 §2.1.3.1 (`PATH`) and §2.1.4.1 (`PROOF`, `SUBPROOF`), unrolled into
//! loops over leaf ranges. The proofs they produce are checked by [`crate::merkle`]'s verifiers,
//! the only ones in the codebase.

use crate::merkle::{node_hash, Hash, ProofError, EMPTY_ROOT};

/// Where a node sits in the audit Merkle tree: `level` 0 is a leaf; node `(l, i)` covers leaves
/// `[i * 2^l, (i + 1) * 2^l)`. (Named for its coordinates so it is never mistaken for
/// [`crate::pki::NodeId`], a machine's id.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeCoord {
    pub level: u32,
    pub index: u64,
}

impl NodeCoord {
    /// The node covering the leaf range `[index * 2^level, (index + 1) * 2^level)`.
    pub const fn new(level: u32, index: u64) -> Self {
        NodeCoord { level, index }
    }

    /// The first leaf this node covers.
    pub const fn first_leaf(&self) -> u64 {
        self.index << self.level
    }

    /// The number of leaves this node covers.
    pub const fn leaf_count(&self) -> u64 {
        1 << self.level
    }
}

/// A node the appender made, to be stored under its id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoredNode {
    pub id: NodeCoord,
    pub hash: Hash,
}

/// Reads stored node hashes. Implemented by the sequencer's store (and by [`MemoryStore`]).
pub trait HashReader {
    type Error;

    /// The hash of one complete subtree. Plans only ask for nodes complete at the size they are
    /// for, so a missing node is a store error, not a proof error.
    fn node(&self, id: NodeCoord) -> Result<Hash, Self::Error>;

    /// Several nodes at once, in the order asked; override to read them in one round trip.
    fn nodes(&self, ids: &[NodeCoord]) -> Result<Vec<Hash>, Self::Error> {
        ids.iter().map(|id| self.node(*id)).collect()
    }
}

/// Errors of the tree's bookkeeping (not of proofs, see [`ProofError`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TreeError {
    #[error("a frontier for tree size {size} has {expected} hashes (one per set bit of the size), got {got}")]
    FrontierLength {
        size: u64,
        expected: usize,
        got: usize,
    },
    #[error("appending {adding} leaves to a tree of size {size} overflows the tree size")]
    SizeOverflow { size: u64, adding: u64 },
    #[error("plan needs {expected} node hashes, got {got}")]
    HashCount { expected: usize, got: usize },
    #[error("node (level {}, index {}) is not in the store", .0.level, .0.index)]
    MissingNode(NodeCoord),
    #[error("node (level {}, index {}) stored out of order: the next index at that level is {next}", .id.level, .id.index)]
    OutOfOrder { id: NodeCoord, next: u64 },
    #[error("node (level {}, index {}) is already stored with a different hash", .0.level, .0.index)]
    Conflict(NodeCoord),
}

/// The appender's state: tree size and the right-edge complete subtrees, largest first.
#[derive(Clone)]
pub struct Frontier {
    size: u64,
    len: usize,
    hashes: [Hash; 64],
}

impl PartialEq for Frontier {
    fn eq(&self, other: &Self) -> bool {
        self.size == other.size && self.hashes() == other.hashes()
    }
}

impl Eq for Frontier {}

impl std::fmt::Debug for Frontier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Frontier")
            .field("size", &self.size)
            .field(
                "hashes",
                &self.hashes().iter().map(hex::encode).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Default for Frontier {
    fn default() -> Self {
        Self::new()
    }
}

impl Frontier {
    /// The empty tree.
    pub const fn new() -> Self {
        Frontier {
            size: 0,
            len: 0,
            hashes: [[0; 32]; 64],
        }
    }

    /// The nodes a frontier of `size` is made of, largest (leftmost) first: one per set bit of
    /// `size`. The sequencer reads these from its store to resume appending.
    pub fn node_ids(size: u64) -> impl Iterator<Item = NodeCoord> {
        (0..64u32)
            .rev()
            .filter(move |b| (size >> b) & 1 == 1)
            .map(move |b| NodeCoord::new(b, (size >> b) - 1))
    }

    /// Rebuilds the frontier of a tree of `size` from the hashes of [`Frontier::node_ids`], in
    /// that order.
    pub fn from_parts(size: u64, hashes: &[Hash]) -> Result<Self, TreeError> {
        let expected = size.count_ones() as usize;
        if hashes.len() != expected {
            return Err(TreeError::FrontierLength {
                size,
                expected,
                got: hashes.len(),
            });
        }
        let mut f = Frontier::new();
        f.hashes[..expected].copy_from_slice(hashes);
        f.len = expected;
        f.size = size;
        Ok(f)
    }

    /// Reads the frontier of a tree of `size` from a store.
    pub fn read<R: HashReader>(reader: &R, size: u64) -> Result<Self, FrontierReadError<R::Error>> {
        let ids: Vec<NodeCoord> = Self::node_ids(size).collect();
        let hashes = reader.nodes(&ids).map_err(FrontierReadError::Read)?;
        Self::from_parts(size, &hashes).map_err(FrontierReadError::Tree)
    }

    /// The number of leaves in the tree.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The right-edge hashes, largest subtree first (matching [`Frontier::node_ids`]).
    pub fn hashes(&self) -> &[Hash] {
        &self.hashes[..self.len]
    }

    /// The tree head: `MTH` of all leaves so far (RFC 9162 §2.1.1), folding the right edge.
    pub fn root(&self) -> Hash {
        let mut it = self.hashes[..self.len].iter().rev();
        let Some(last) = it.next() else {
            return EMPTY_ROOT;
        };
        it.fold(*last, |acc, left| node_hash(left, &acc))
    }

    /// Appends one leaf hash, calling `stored` with every new node (the leaf itself at level 0,
    /// then each subtree it completes, bottom up).
    ///
    /// Panics only if the tree already holds 2^64 - 1 leaves; use [`Frontier::append_with`] to get
    /// a typed error instead.
    pub fn push(&mut self, leaf: Hash, mut stored: impl FnMut(NodeCoord, &Hash)) {
        let mut h = leaf;
        let mut id = NodeCoord::new(0, self.size);
        stored(id, &h);
        let mut level = 0;
        while (self.size >> level) & 1 == 1 {
            self.len -= 1;
            h = node_hash(&self.hashes[self.len], &h);
            level += 1;
            id = NodeCoord::new(level, id.index >> 1);
            stored(id, &h);
        }
        self.hashes[self.len] = h;
        self.len += 1;
        self.size += 1;
    }

    /// Appends a batch of leaf hashes, calling `stored` with every new node, in order.
    pub fn append_with(
        &mut self,
        leaves: &[Hash],
        mut stored: impl FnMut(NodeCoord, &Hash),
    ) -> Result<(), TreeError> {
        let adding = leaves.len() as u64;
        if self.size.checked_add(adding).is_none_or(|s| s == u64::MAX) {
            return Err(TreeError::SizeOverflow {
                size: self.size,
                adding,
            });
        }
        for leaf in leaves {
            self.push(*leaf, &mut stored);
        }
        Ok(())
    }

    /// Appends a batch of leaf hashes, pushing every node to store onto `out` (leaves at level 0
    /// included; at most `2 * leaves.len() + 64` nodes), and returns the new root. Reuse `out`
    /// between batches to avoid allocating.
    pub fn append(
        &mut self,
        leaves: &[Hash],
        out: &mut Vec<StoredNode>,
    ) -> Result<Hash, TreeError> {
        out.reserve(2 * leaves.len());
        self.append_with(leaves, |id, hash| out.push(StoredNode { id, hash: *hash }))?;
        Ok(self.root())
    }
}

/// Reading a frontier failed: the store's error, or a wrong number of hashes.
#[derive(Debug, thiserror::Error)]
pub enum FrontierReadError<E> {
    #[error("reading the frontier from the store: {0}")]
    Read(E),
    #[error(transparent)]
    Tree(TreeError),
}

/// What to read from the store to produce a list of hashes (a proof, or one root), and how.
///
/// Each output hash is the `MTH` of a leaf range, folded right to left from the complete subtrees
/// of the range's binary decomposition (a single node when the range is itself complete).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProofPlan {
    ids: Vec<NodeCoord>,
    /// For each output hash, how many consecutive entries of `ids` fold into it.
    parts: Vec<u8>,
}

impl ProofPlan {
    /// The nodes to read, in the order [`ProofPlan::assemble`] expects their hashes.
    pub fn node_ids(&self) -> &[NodeCoord] {
        &self.ids
    }

    /// The number of hashes the plan produces.
    pub fn len(&self) -> usize {
        self.parts.len()
    }

    /// Whether the plan produces no hash at all (a proof that needs none).
    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    /// Folds the hashes of [`ProofPlan::node_ids`] (same order) into the planned hashes.
    pub fn assemble(&self, hashes: &[Hash]) -> Result<Vec<Hash>, TreeError> {
        if hashes.len() != self.ids.len() {
            return Err(TreeError::HashCount {
                expected: self.ids.len(),
                got: hashes.len(),
            });
        }
        let mut out = Vec::with_capacity(self.parts.len());
        let mut at = 0;
        for &n in &self.parts {
            let group = &hashes[at..at + usize::from(n)];
            at += usize::from(n);
            out.push(fold(group));
        }
        Ok(out)
    }

    /// Reads the planned nodes through `reader` and assembles them.
    pub fn read<R: HashReader>(&self, reader: &R) -> Result<Vec<Hash>, R::Error> {
        let mut hashes = Vec::with_capacity(self.ids.len());
        for id in &self.ids {
            hashes.push(reader.node(*id)?);
        }
        let mut out = Vec::with_capacity(self.parts.len());
        let mut at = 0;
        for &n in &self.parts {
            let group = &hashes[at..at + usize::from(n)];
            at += usize::from(n);
            out.push(fold(group));
        }
        Ok(out)
    }

    /// Adds one output hash: `MTH` of leaves `[start, end)`.
    fn push_range(&mut self, start: u64, end: u64) {
        let mut s = start;
        let mut n = 0u8;
        while s < end {
            let remaining = end - s;
            let mut level = 63 - remaining.leading_zeros();
            if s != 0 {
                level = level.min(s.trailing_zeros());
            }
            self.ids.push(NodeCoord::new(level, s >> level));
            s += 1 << level;
            n += 1;
        }
        self.parts.push(n);
    }
}

/// `MTH` of a range from its decomposition into complete subtrees, largest first: right to left,
/// `H(c1, H(c2, ... H(c_{n-1}, c_n)))`.
fn fold(group: &[Hash]) -> Hash {
    let mut it = group.iter().rev();
    match it.next() {
        None => EMPTY_ROOT,
        Some(last) => it.fold(*last, |acc, left| node_hash(left, &acc)),
    }
}

/// Largest power of two strictly smaller than `n` (n >= 2): the RFC's split point `k`.
fn split(n: u64) -> u64 {
    1 << (63 - (n - 1).leading_zeros())
}

/// The plan of the inclusion proof of leaf `index` in the tree of `size` (RFC 9162 §2.1.3.1).
pub fn inclusion_plan(index: u64, size: u64) -> Result<ProofPlan, ProofError> {
    if index >= size {
        return Err(ProofError::IndexOutOfRange { index, size });
    }
    // PATH recurses from the root down; the proof lists the deepest sibling first.
    let mut siblings = [(0u64, 0u64); 128];
    let mut count = 0;
    let (mut lo, mut hi) = (0u64, size);
    while hi - lo > 1 {
        let k = split(hi - lo);
        if index - lo < k {
            siblings[count] = (lo + k, hi);
            hi = lo + k;
        } else {
            siblings[count] = (lo, lo + k);
            lo += k;
        }
        count += 1;
    }
    let mut plan = ProofPlan::default();
    for &(s, e) in siblings[..count].iter().rev() {
        plan.push_range(s, e);
    }
    Ok(plan)
}

/// The plan of the consistency proof from `old_size` to `new_size` (RFC 9162 §2.1.4.1). Empty when
/// `old_size` is 0 or equal to `new_size`.
pub fn consistency_plan(old_size: u64, new_size: u64) -> Result<ProofPlan, ProofError> {
    if old_size > new_size {
        return Err(ProofError::OldSizeExceedsNew { old_size, new_size });
    }
    let mut plan = ProofPlan::default();
    if old_size == 0 || old_size == new_size {
        return Ok(plan);
    }
    // SUBPROOF(m, D[lo:hi], b), unrolled; entries are collected top-down and emitted bottom-up.
    let mut parts = [(0u64, 0u64); 128];
    let mut count = 0;
    let (mut lo, mut hi, mut b) = (0u64, new_size, true);
    loop {
        let m = old_size - lo;
        let n = hi - lo;
        if m == n {
            if !b {
                parts[count] = (lo, hi);
                count += 1;
            }
            break;
        }
        let k = split(n);
        if m <= k {
            parts[count] = (lo + k, hi);
            hi = lo + k;
        } else {
            parts[count] = (lo, lo + k);
            lo += k;
            b = false;
        }
        count += 1;
    }
    for &(s, e) in parts[..count].iter().rev() {
        plan.push_range(s, e);
    }
    Ok(plan)
}

/// The plan of the root of the tree of `size`: one hash, `MTH` of leaves `[0, size)`.
pub fn root_plan(size: u64) -> ProofPlan {
    let mut plan = ProofPlan::default();
    plan.push_range(0, size);
    plan
}

/// Why a proof could not be produced from a store.
#[derive(Debug, thiserror::Error)]
pub enum ProveError<E> {
    #[error(transparent)]
    Proof(#[from] ProofError),
    #[error("reading the tree store: {0}")]
    Read(E),
}

/// The inclusion proof of leaf `index` in the tree of `size`, with O(log size) node reads.
pub fn prove_inclusion<R: HashReader>(
    reader: &R,
    index: u64,
    size: u64,
) -> Result<Vec<Hash>, ProveError<R::Error>> {
    inclusion_plan(index, size)?
        .read(reader)
        .map_err(ProveError::Read)
}

/// The consistency proof from `old_size` to `new_size`, with O(log new_size) node reads.
pub fn prove_consistency<R: HashReader>(
    reader: &R,
    old_size: u64,
    new_size: u64,
) -> Result<Vec<Hash>, ProveError<R::Error>> {
    consistency_plan(old_size, new_size)?
        .read(reader)
        .map_err(ProveError::Read)
}

/// The root of the tree at `size` (any size the store has reached), with at most 64 node reads.
pub fn root_at_size<R: HashReader>(reader: &R, size: u64) -> Result<Hash, R::Error> {
    let hashes = root_plan(size).read(reader)?;
    Ok(hashes.first().copied().unwrap_or(EMPTY_ROOT))
}

/// An in-memory node store (for tests, exports and the CLI's offline proofs): one vector of hashes
/// per level, filled in append order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryStore {
    levels: Vec<Vec<Hash>>,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Stores a node made by the appender. Nodes of one level must come in index order; storing
    /// the same node again with the same hash is a no-op (an idempotent retry).
    pub fn insert(&mut self, node: StoredNode) -> Result<(), TreeError> {
        let level = node.id.level as usize;
        if self.levels.len() <= level {
            self.levels.resize_with(level + 1, Vec::new);
        }
        let row = &mut self.levels[level];
        let next = row.len() as u64;
        if node.id.index == next {
            row.push(node.hash);
            Ok(())
        } else if node.id.index < next {
            if row[node.id.index as usize] == node.hash {
                Ok(())
            } else {
                Err(TreeError::Conflict(node.id))
            }
        } else {
            Err(TreeError::OutOfOrder { id: node.id, next })
        }
    }

    /// The number of leaves stored.
    pub fn size(&self) -> u64 {
        self.levels.first().map_or(0, |l| l.len() as u64)
    }
}

impl HashReader for MemoryStore {
    type Error = TreeError;

    fn node(&self, id: NodeCoord) -> Result<Hash, TreeError> {
        self.levels
            .get(id.level as usize)
            .and_then(|row| usize::try_from(id.index).ok().and_then(|i| row.get(i)))
            .copied()
            .ok_or(TreeError::MissingNode(id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::merkle::leaf_hash;

    #[test]
    fn frontier_node_ids_follow_the_size_bits() {
        let ids: Vec<_> = Frontier::node_ids(6).collect();
        assert_eq!(ids, vec![NodeCoord::new(2, 0), NodeCoord::new(1, 2)]);
        assert_eq!(Frontier::node_ids(0).count(), 0);
        assert_eq!(Frontier::node_ids(u64::MAX).count(), 64);
    }

    #[test]
    fn appender_reports_leaves_and_completed_subtrees() {
        let mut f = Frontier::new();
        let mut out = Vec::new();
        let leaves: Vec<Hash> = (0u8..4).map(|i| leaf_hash(&[i])).collect();
        f.append(&leaves, &mut out).unwrap();
        let ids: Vec<_> = out.iter().map(|n| (n.id.level, n.id.index)).collect();
        assert_eq!(
            ids,
            vec![(0, 0), (0, 1), (1, 0), (0, 2), (0, 3), (1, 1), (2, 0)]
        );
        let resumed = Frontier::from_parts(4, f.hashes()).unwrap();
        assert_eq!(resumed, f);
        assert!(matches!(
            Frontier::from_parts(3, f.hashes()),
            Err(TreeError::FrontierLength { expected: 2, .. })
        ));
    }

    #[test]
    fn memory_store_refuses_gaps_and_conflicts() {
        let mut s = MemoryStore::new();
        let h = leaf_hash(b"a");
        s.insert(StoredNode {
            id: NodeCoord::new(0, 0),
            hash: h,
        })
        .unwrap();
        s.insert(StoredNode {
            id: NodeCoord::new(0, 0),
            hash: h,
        })
        .unwrap();
        assert!(matches!(
            s.insert(StoredNode {
                id: NodeCoord::new(0, 0),
                hash: leaf_hash(b"b")
            }),
            Err(TreeError::Conflict(_))
        ));
        assert!(matches!(
            s.insert(StoredNode {
                id: NodeCoord::new(0, 2),
                hash: h
            }),
            Err(TreeError::OutOfOrder { next: 1, .. })
        ));
        assert_eq!(
            s.node(NodeCoord::new(3, 0)),
            Err(TreeError::MissingNode(NodeCoord::new(3, 0)))
        );
    }
}
