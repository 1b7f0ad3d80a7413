//! The Merkle code against a plain recursive reference of RFC 9162 §2.1: the audit tree, and the
//! batch scope tree, both checked by the one verifier in `domain::merkle`.
//!
//! The reference below is written from the RFC's definitions (MTH §2.1.1, PATH §2.1.3.1,
//! PROOF/SUBPROOF §2.1.4.1) and nothing else; it only memoizes MTH of a leaf range, which is
//! the same for every tree size since all trees here are prefixes of one leaf list.

use std::cell::RefCell;

use domain::audit::merkle::{
    self, consistency_proof_len, inclusion_proof_len, leaf_hash, node_hash, verify_consistency,
    verify_inclusion, Hash, ProofError, EMPTY_ROOT,
};
use domain::audit::tree::{self, Frontier, MemoryStore, NodeCoord};
use domain::quorum::{self, verify_proof, ScopeHash, ScopeProof, ScopeTree};
use sha2::{Digest, Sha256};

// ---- reference ------------------------------------------------------------------------------

struct Reference {
    leaves: Vec<Hash>,
    /// MTH(D[a:b]) at a * (n + 1) + b, once computed.
    memo: RefCell<Vec<Option<Hash>>>,
}

impl Reference {
    fn new(n: usize) -> Self {
        Self::over((0..n as u64).map(|i| leaf_hash(&i.to_be_bytes())).collect())
    }

    /// The reference over given leaf hashes.
    fn over(leaves: Vec<Hash>) -> Self {
        let n = leaves.len();
        Reference {
            leaves,
            memo: RefCell::new(vec![None; (n + 1) * (n + 1)]),
        }
    }

    fn hash_children(l: &Hash, r: &Hash) -> Hash {
        let mut h = Sha256::new();
        h.update([1u8]);
        h.update(l);
        h.update(r);
        h.finalize().into()
    }

    /// k: the largest power of two smaller than n.
    fn k(n: usize) -> usize {
        let mut k = 1;
        while k * 2 < n {
            k *= 2;
        }
        k
    }

    /// MTH(D[a:b]).
    fn mth(&self, a: usize, b: usize) -> Hash {
        let n = b - a;
        if n == 0 {
            return Sha256::digest([]).into();
        }
        if n == 1 {
            return self.leaves[a];
        }
        let slot = a * (self.leaves.len() + 1) + b;
        if let Some(h) = self.memo.borrow()[slot] {
            return h;
        }
        let k = Self::k(n);
        let h = Self::hash_children(&self.mth(a, a + k), &self.mth(a + k, b));
        self.memo.borrow_mut()[slot] = Some(h);
        h
    }

    /// PATH(m, D[a:b]), m relative to a.
    fn path(&self, m: usize, a: usize, b: usize) -> Vec<Hash> {
        let n = b - a;
        if n == 1 {
            return vec![];
        }
        let k = Self::k(n);
        if m < k {
            let mut p = self.path(m, a, a + k);
            p.push(self.mth(a + k, b));
            p
        } else {
            let mut p = self.path(m - k, a + k, b);
            p.push(self.mth(a, a + k));
            p
        }
    }

    /// SUBPROOF(m, D[a:b], flag), m relative to a.
    fn subproof(&self, m: usize, a: usize, b: usize, flag: bool) -> Vec<Hash> {
        let n = b - a;
        if m == n {
            return if flag { vec![] } else { vec![self.mth(a, b)] };
        }
        let k = Self::k(n);
        if m <= k {
            let mut p = self.subproof(m, a, a + k, flag);
            p.push(self.mth(a + k, b));
            p
        } else {
            let mut p = self.subproof(m - k, a + k, b, false);
            p.push(self.mth(a, a + k));
            p
        }
    }

    /// PROOF(m, D[n]) for 0 < m < n.
    fn proof(&self, m: usize, n: usize) -> Vec<Hash> {
        self.subproof(m, 0, n, true)
    }
}

/// A store filled by the appender, one leaf at a time.
fn store_of(leaves: &[Hash]) -> MemoryStore {
    let mut store = MemoryStore::new();
    let mut f = Frontier::new();
    let mut out = Vec::new();
    f.append(leaves, &mut out).unwrap();
    for n in out {
        store.insert(n).unwrap();
    }
    store
}

// ---- checks ---------------------------------------------------------------------------------

#[test]
fn hashing_is_rfc9162() {
    let mut expect = Sha256::new();
    expect.update([0u8]);
    expect.update(b"abc");
    assert_eq!(leaf_hash(b"abc"), <Hash>::from(expect.finalize()));
    let (l, r) = (leaf_hash(b"l"), leaf_hash(b"r"));
    assert_eq!(node_hash(&l, &r), Reference::hash_children(&l, &r));
    assert_eq!(merkle::root(&[]), EMPTY_ROOT);
}

/// Every proof of every size up to 1000 is generated and compared with the reference. Verifying
/// them all costs about 40 s of SHA-256 in an unoptimised build, so the verifier runs on every
/// proof up to this size, and above it on every `VERIFY_EVERY`-th index and the last one. (It is
/// checked exhaustively in the consistency sweep and the malformed-proof tests too.)
const VERIFY_ALL_UP_TO: usize = 300;
const VERIFY_EVERY: usize = 7;

#[test]
fn every_root_and_inclusion_proof_up_to_1000() {
    const N: usize = 1000;
    let r = Reference::new(N);
    let store = store_of(&r.leaves);
    for n in 1..=N {
        let root = r.mth(0, n);
        assert_eq!(merkle::root(&r.leaves[..n]), root, "root of size {n}");
        assert_eq!(tree::root_at_size(&store, n as u64).unwrap(), root);
        for m in 0..n {
            let expected = r.path(m, 0, n);
            let got = tree::prove_inclusion(&store, m as u64, n as u64).unwrap();
            assert_eq!(got, expected, "inclusion of {m} in {n}");
            assert_eq!(inclusion_proof_len(m as u64, n as u64), expected.len());
            if n <= VERIFY_ALL_UP_TO || m % VERIFY_EVERY == 0 || m == n - 1 {
                verify_inclusion(&r.leaves[m], m as u64, n as u64, &got, &root).unwrap();
            }
        }
    }
}

#[test]
fn in_memory_proofs_match_the_reference() {
    // merkle::inclusion_proof / consistency_proof hash whole subtrees (O(n) per proof), so the
    // exhaustive sweep above runs on the store; here the slice path is checked on a smaller range.
    let r = Reference::new(80);
    for n in 1..=80 {
        for m in 0..n {
            assert_eq!(
                merkle::inclusion_proof(&r.leaves[..n], m as u64).unwrap(),
                r.path(m, 0, n)
            );
        }
        for m in 1..n {
            assert_eq!(
                merkle::consistency_proof(&r.leaves[..n], m as u64).unwrap(),
                r.proof(m, n)
            );
        }
    }
}

#[test]
fn every_consistency_proof_up_to_200() {
    const N: usize = 200;
    let r = Reference::new(N);
    let store = store_of(&r.leaves);
    for n in 1..=N {
        let new_root = r.mth(0, n);
        for m in 1..n {
            let expected = r.proof(m, n);
            let got = tree::prove_consistency(&store, m as u64, n as u64).unwrap();
            assert_eq!(got, expected, "consistency {m} -> {n}");
            assert_eq!(consistency_proof_len(m as u64, n as u64), expected.len());
            verify_consistency(m as u64, n as u64, &r.mth(0, m), &new_root, &got).unwrap();
        }
        // Equal sizes and the empty tree: empty proofs.
        assert!(tree::prove_consistency(&store, n as u64, n as u64)
            .unwrap()
            .is_empty());
        verify_consistency(n as u64, n as u64, &new_root, &new_root, &[]).unwrap();
        verify_consistency(0, n as u64, &EMPTY_ROOT, &new_root, &[]).unwrap();
    }
}

/// A tiny deterministic generator for batch sizes.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, bound: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % bound
    }
}

#[test]
fn appender_in_random_batches_matches_the_reference() {
    const N: usize = 1000;
    let r = Reference::new(N);
    for seed in 1..=4u64 {
        let mut rng = Lcg(seed);
        let mut store = MemoryStore::new();
        let mut out = Vec::new();
        let mut size = 0usize;
        let mut f = Frontier::new();
        while size < N {
            let batch = (rng.next(if seed % 2 == 0 { 7 } else { 90 }) as usize).min(N - size);
            // Resume from the store, as the sequencer does after a restart.
            let ids: Vec<NodeCoord> = Frontier::node_ids(size as u64).collect();
            assert_eq!(ids.len(), f.hashes().len());
            let resumed = Frontier::read(&store, size as u64).unwrap();
            assert_eq!(resumed, f);
            out.clear();
            let root = f.append(&r.leaves[size..size + batch], &mut out).unwrap();
            assert!(out.len() <= 2 * batch + 64);
            for n in &out {
                store.insert(*n).unwrap();
            }
            size += batch;
            assert_eq!(root, r.mth(0, size), "root after batch to {size}");
            assert_eq!(tree::root_at_size(&store, size as u64).unwrap(), root);
            // Spot-check proofs at this size.
            if size > 0 {
                let m = rng.next(size as u64) as usize;
                assert_eq!(
                    tree::prove_inclusion(&store, m as u64, size as u64).unwrap(),
                    r.path(m, 0, size)
                );
                let old = 1 + rng.next(size as u64) as usize;
                if old < size {
                    assert_eq!(
                        tree::prove_consistency(&store, old as u64, size as u64).unwrap(),
                        r.proof(old, size)
                    );
                }
            }
        }
        assert_eq!(store.size(), N as u64);
        // Old sizes stay answerable from the same store.
        for n in [1usize, 2, 3, 255, 256, 257, 999] {
            assert_eq!(tree::root_at_size(&store, n as u64).unwrap(), r.mth(0, n));
        }
    }
}

#[test]
fn plans_read_log_n_nodes_and_assemble_like_read() {
    let r = Reference::new(1000);
    let store = store_of(&r.leaves);
    for (m, n) in [(0u64, 1000u64), (999, 1000), (511, 1000), (0, 1)] {
        let plan = tree::inclusion_plan(m, n).unwrap();
        assert!(plan.node_ids().len() <= 2 * 64);
        let hashes: Vec<Hash> = plan
            .node_ids()
            .iter()
            .map(|id| {
                use domain::audit::tree::HashReader;
                store.node(*id).unwrap()
            })
            .collect();
        assert_eq!(
            plan.assemble(&hashes).unwrap(),
            r.path(m as usize, 0, n as usize)
        );
        if !hashes.is_empty() {
            assert!(plan.assemble(&hashes[1..]).is_err());
        }
    }
    assert_eq!(tree::root_plan(1000).node_ids().len(), 6); // 1000 = 0b1111101000
}

// ---- malformed proofs -----------------------------------------------------------------------

#[test]
fn inclusion_verifier_refuses_malformed_proofs() {
    let r = Reference::new(64);
    let n = 37usize;
    let root = r.mth(0, n);
    let leaf = r.leaves[5];
    let proof = r.path(5, 0, n);

    // Index at or past the tree size.
    assert_eq!(
        verify_inclusion(&leaf, 37, 37, &proof, &root),
        Err(ProofError::IndexOutOfRange {
            index: 37,
            size: 37
        })
    );
    assert!(matches!(
        verify_inclusion(&leaf, 40, 37, &proof, &root),
        Err(ProofError::IndexOutOfRange { .. })
    ));
    assert!(matches!(
        verify_inclusion(&leaf, 0, 0, &[], &EMPTY_ROOT),
        Err(ProofError::IndexOutOfRange { .. })
    ));
    // Truncated.
    assert!(matches!(
        verify_inclusion(&leaf, 5, 37, &proof[..proof.len() - 1], &root),
        Err(ProofError::TooShort { .. })
    ));
    assert!(matches!(
        verify_inclusion(&leaf, 5, 37, &[], &root),
        Err(ProofError::TooShort { .. })
    ));
    // Extra hashes appended (and prepended).
    let mut longer = proof.clone();
    longer.push(r.leaves[0]);
    assert!(matches!(
        verify_inclusion(&leaf, 5, 37, &longer, &root),
        Err(ProofError::ExtraHashes { .. })
    ));
    let mut prepended = vec![r.leaves[0]];
    prepended.extend_from_slice(&proof);
    assert!(matches!(
        verify_inclusion(&leaf, 5, 37, &prepended, &root),
        Err(ProofError::ExtraHashes { .. })
    ));
    // Right length, wrong content: a flipped bit, another leaf, another index, another root.
    let mut flipped = proof.clone();
    flipped[2][0] ^= 1;
    assert_eq!(
        verify_inclusion(&leaf, 5, 37, &flipped, &root),
        Err(ProofError::RootMismatch)
    );
    assert_eq!(
        verify_inclusion(&r.leaves[6], 5, 37, &proof, &root),
        Err(ProofError::RootMismatch)
    );
    assert_eq!(
        verify_inclusion(&leaf, 4, 37, &proof, &root),
        Err(ProofError::RootMismatch)
    );
    assert_eq!(
        verify_inclusion(&leaf, 5, 37, &proof, &r.mth(0, 36)),
        Err(ProofError::RootMismatch)
    );
    // A proof of the right length for another size.
    assert!(verify_inclusion(&leaf, 5, 38, &proof, &r.mth(0, 38)).is_err());
    // Generation refuses an index at or past the size too.
    assert!(matches!(
        merkle::inclusion_proof(&r.leaves[..10], 10),
        Err(ProofError::IndexOutOfRange { .. })
    ));
    assert!(matches!(
        tree::inclusion_plan(0, 0),
        Err(ProofError::IndexOutOfRange { .. })
    ));
}

#[test]
fn consistency_verifier_refuses_malformed_proofs() {
    let r = Reference::new(64);
    let (m, n) = (13usize, 50usize);
    let (old, new) = (r.mth(0, m), r.mth(0, n));
    let proof = r.proof(m, n);
    verify_consistency(m as u64, n as u64, &old, &new, &proof).unwrap();

    // Old size past new size.
    assert_eq!(
        verify_consistency(51, 50, &old, &new, &proof),
        Err(ProofError::OldSizeExceedsNew {
            old_size: 51,
            new_size: 50
        })
    );
    assert!(matches!(
        tree::consistency_plan(51, 50),
        Err(ProofError::OldSizeExceedsNew { .. })
    ));
    // Truncated, extended, empty.
    assert!(matches!(
        verify_consistency(13, 50, &old, &new, &proof[..proof.len() - 1]),
        Err(ProofError::TooShort { .. })
    ));
    let mut longer = proof.clone();
    longer.push(new);
    assert!(matches!(
        verify_consistency(13, 50, &old, &new, &longer),
        Err(ProofError::ExtraHashes { .. })
    ));
    assert!(matches!(
        verify_consistency(13, 50, &old, &new, &[]),
        Err(ProofError::TooShort { .. })
    ));
    // Wrong roots, tampered hashes.
    assert_eq!(
        verify_consistency(13, 50, &r.mth(0, 12), &new, &proof),
        Err(ProofError::OldRootMismatch)
    );
    assert_eq!(
        verify_consistency(13, 50, &old, &r.mth(0, 49), &proof),
        Err(ProofError::NewRootMismatch)
    );
    for i in 0..proof.len() {
        let mut bad = proof.clone();
        bad[i][31] ^= 0x80;
        assert!(
            verify_consistency(13, 50, &old, &new, &bad).is_err(),
            "tampered hash {i} accepted"
        );
    }
    // Power-of-two old size (implicit first element): an extra leading hash is refused.
    let p16 = r.proof(16, 50);
    let mut with_old = vec![r.mth(0, 16)];
    with_old.extend_from_slice(&p16);
    assert!(matches!(
        verify_consistency(16, 50, &r.mth(0, 16), &new, &with_old),
        Err(ProofError::ExtraHashes { .. })
    ));
    // Equal sizes: a fork is named; a non-empty proof is refused.
    assert_eq!(
        verify_consistency(50, 50, &old, &new, &[]),
        Err(ProofError::EqualSizeDifferentRoots { size: 50 })
    );
    assert!(matches!(
        verify_consistency(50, 50, &new, &new, &[new]),
        Err(ProofError::ExtraHashes { .. })
    ));
    // From the empty tree: only the empty root, only an empty proof.
    assert_eq!(
        verify_consistency(0, 50, &old, &new, &[]),
        Err(ProofError::BadEmptyRoot)
    );
    assert!(matches!(
        verify_consistency(0, 50, &EMPTY_ROOT, &new, &[new]),
        Err(ProofError::ExtraHashes { .. })
    ));
}

// ---- the batch scope: the same tree, the same verifier ---------------------------------------

/// A scope tree of `n` leaves and the reference over its leaves in tree (hash) order.
fn scope_and_reference(n: usize) -> (ScopeTree, Reference) {
    let hashes = (0..n as u64)
        .map(|i| ScopeHash(leaf_hash(&(i ^ 0x5c09e).to_be_bytes())))
        .collect();
    let tree = ScopeTree::from_leaf_hashes(hashes).unwrap();
    let sorted = tree.leaves().iter().map(|h| h.0).collect();
    (tree, Reference::over(sorted))
}

#[test]
fn scope_tree_is_the_rfc_tree_and_its_proofs_are_paths() {
    for n in 1..=130usize {
        let (tree, r) = scope_and_reference(n);
        let root = r.mth(0, n);
        assert_eq!(tree.root().0, root, "scope root of size {n}");
        for m in 0..n {
            let proof = tree.proof(m as u32).unwrap();
            let siblings: Vec<Hash> = proof.siblings.iter().map(|h| h.0).collect();
            assert_eq!(siblings, r.path(m, 0, n), "scope proof of {m} in {n}");
            assert_eq!(inclusion_proof_len(m as u64, n as u64), siblings.len());
            verify_proof(&tree.leaves()[m], &proof, n as u32, &tree.root()).unwrap();
            verify_inclusion(&r.leaves[m], m as u64, n as u64, &siblings, &root).unwrap();
        }
    }
}

#[test]
fn scope_verifier_refuses_what_the_shared_verifier_refuses() {
    let n = 37u32;
    let (tree, r) = scope_and_reference(n as usize);
    let root = tree.root();
    let leaf = tree.leaves()[5];
    let proof = tree.proof(5).unwrap();
    verify_proof(&leaf, &proof, n, &root).unwrap();

    // Surplus siblings, appended or prepended, and a missing one: refused by count.
    let mut appended = proof.clone();
    appended.siblings.push(leaf);
    assert_eq!(
        verify_proof(&leaf, &appended, n, &root),
        Err(quorum::ProofError::SiblingCount {
            given: proof.siblings.len() + 1,
            expected: proof.siblings.len()
        })
    );
    let mut prepended = proof.clone();
    prepended.siblings.insert(0, root);
    assert!(matches!(
        verify_proof(&leaf, &prepended, n, &root),
        Err(quorum::ProofError::SiblingCount { .. })
    ));
    let mut truncated = proof.clone();
    truncated.siblings.pop();
    assert!(matches!(
        verify_proof(&leaf, &truncated, n, &root),
        Err(quorum::ProofError::SiblingCount { .. })
    ));

    // A wrong index: past the size, or another leaf's place with this leaf's siblings.
    let at = |index: u32| ScopeProof {
        index,
        siblings: proof.siblings.clone(),
    };
    assert_eq!(
        verify_proof(&leaf, &at(n), n, &root),
        Err(quorum::ProofError::IndexOutOfRange { index: n, size: n })
    );
    assert_eq!(
        inclusion_proof_len(4, n.into()),
        inclusion_proof_len(5, n.into())
    );
    assert_eq!(
        verify_proof(&leaf, &at(4), n, &root),
        Err(quorum::ProofError::RootMismatch)
    );

    // A wrong size: out of the scope's bounds, or another size whose path has this length (the
    // fold is then the same, so it is the root signed with that size that refuses it: here the
    // root of the 38-leaf tree that extends these 37 leaves).
    let mut extended = r.leaves.clone();
    extended.push(leaf_hash(b"one more"));
    let root_38 = ScopeHash(Reference::over(extended).mth(0, 38));
    assert_eq!(
        verify_proof(&leaf, &proof, 0, &root),
        Err(quorum::ProofError::BadSize(0))
    );
    assert_eq!(
        verify_proof(&leaf, &proof, 50_001, &root),
        Err(quorum::ProofError::BadSize(50_001))
    );
    assert_eq!(inclusion_proof_len(5, 38), inclusion_proof_len(5, n.into()));
    assert_eq!(
        verify_proof(&leaf, &proof, 38, &root_38),
        Err(quorum::ProofError::RootMismatch)
    );
    assert!(verify_proof(&leaf, &proof, 9, &root).is_err());

    // The shared verifier says the same of the same bytes.
    let siblings: Vec<Hash> = proof.siblings.iter().map(|h| h.0).collect();
    let mut longer = siblings.clone();
    longer.push(r.leaves[0]);
    assert!(matches!(
        verify_inclusion(&leaf.0, 5, n.into(), &longer, &root.0),
        Err(ProofError::ExtraHashes { .. })
    ));
    assert_eq!(
        verify_inclusion(&leaf.0, 5, 38, &siblings, &root_38.0),
        Err(ProofError::RootMismatch)
    );
}
