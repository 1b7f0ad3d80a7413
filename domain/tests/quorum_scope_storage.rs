//! The stored form of a scope tree: each row keeps the nodes at its index, every node is stored
//! exactly once, and every leaf's proof read back from the rows is the tree's own proof.

use domain::quorum::{
    assemble_proof, leaf_hash, proof_rows, BatchId, ScopeHash, ScopeTree, MAX_SCOPE_LEAVES,
};
use proptest::prelude::*;

fn leaves(count: usize, seed: u64) -> Vec<ScopeHash> {
    let batch = BatchId([9; 32]);
    (0..count)
        .map(|i| leaf_hash(&batch, &format!("node_{seed}_{i}"), "node.reboot", None))
        .collect()
}

/// The rows as the projection stores them: (leaf hash, nodes).
fn rows(tree: &ScopeTree) -> Vec<(ScopeHash, Vec<u8>)> {
    (0..tree.size() as usize)
        .map(|i| {
            let mut nodes = Vec::new();
            tree.stored_nodes_into(i, &mut nodes);
            (tree.leaves()[i], nodes)
        })
        .collect()
}

fn read_back(rows: &[(ScopeHash, Vec<u8>)], level: u32, row: u32) -> Option<ScopeHash> {
    let (leaf, nodes) = rows.get(row as usize)?;
    if level == 0 {
        return Some(*leaf);
    }
    let start = (level as usize - 1) * 32;
    ScopeHash::from_slice(nodes.get(start..start + 32)?).ok()
}

/// Interior nodes of a tree with promoted odd nodes copied up: the sum of the level lengths
/// above the leaves.
fn interior_nodes(size: usize) -> usize {
    let (mut len, mut total) = (size, 0);
    while len > 1 {
        len = len.div_ceil(2);
        total += len;
    }
    total
}

fn check(count: usize, seed: u64) {
    let tree = ScopeTree::from_leaf_hashes(leaves(count, seed)).expect("tree");
    let rows = rows(&tree);
    let stored: usize = rows.iter().map(|(_, n)| n.len()).sum();
    assert_eq!(stored, 32 * interior_nodes(count), "each node once");
    if count > 1 {
        assert_eq!(
            &rows[0].1[rows[0].1.len() - 32..],
            tree.root().as_bytes(),
            "row 0 ends with the root"
        );
    }
    for index in 0..tree.size() {
        let expected = tree.proof(index).expect("proof");
        let read = assemble_proof(index, tree.size(), |level, row| {
            read_back(&rows, level, row)
        })
        .expect("every node the proof needs is stored");
        assert_eq!(read, expected, "leaf {index} of {count}");
        assert_eq!(
            proof_rows(index, tree.size()).len(),
            expected.siblings.len()
        );
    }
    assert!(assemble_proof(tree.size(), tree.size(), |l, r| read_back(&rows, l, r)).is_none());
}

#[test]
fn quorum_scope_storage_small_trees() {
    for count in 1..=70 {
        check(count, count as u64);
    }
}

#[test]
fn quorum_scope_storage_the_largest_tree() {
    let tree = ScopeTree::from_leaf_hashes(leaves(MAX_SCOPE_LEAVES, 1)).expect("tree");
    let rows = rows(&tree);
    let stored: usize = rows.iter().map(|(_, n)| n.len()).sum();
    assert_eq!(stored, 32 * interior_nodes(MAX_SCOPE_LEAVES));
    assert!(stored < 33 * MAX_SCOPE_LEAVES, "about 32 bytes a leaf");
    for index in [0, 1, 12_345, 49_998, 49_999] {
        let read = assemble_proof(index, tree.size(), |l, r| read_back(&rows, l, r));
        assert_eq!(read, tree.proof(index));
    }
}

#[test]
fn quorum_scope_storage_a_missing_node_gives_no_proof() {
    let tree = ScopeTree::from_leaf_hashes(leaves(9, 3)).expect("tree");
    let mut rows = rows(&tree);
    rows[1].1.clear();
    // Leaf 2's level-1 sibling is the node stored with row 1.
    assert!(assemble_proof(2, 9, |l, r| read_back(&rows, l, r)).is_none());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn quorum_scope_storage_every_proof_reads_back(count in 1usize..600, seed in any::<u64>()) {
        check(count, seed);
    }
}
