//! Scope tree properties: every leaf's proof verifies against the root, no proof verifies for
//! another leaf, and proofs of the wrong shape are refused.

use domain::quorum::{
    leaf_hash, verify_proof, BatchId, ProofError, ScopeError, ScopeHash, ScopeLeaf, ScopeProof,
    ScopeTree,
};
use proptest::prelude::*;

fn leaves(count: usize, seed: u64) -> Vec<ScopeHash> {
    let batch = BatchId([7; 32]);
    (0..count)
        .map(|i| leaf_hash(&batch, &format!("node_{seed}_{i}"), "node.reboot", None))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn quorum_scope_every_proof_verifies(count in 1usize..300, seed in any::<u64>()) {
        let tree = ScopeTree::from_leaf_hashes(leaves(count, seed)).expect("tree");
        prop_assert_eq!(tree.size() as usize, count);
        for (index, leaf) in tree.leaves().iter().enumerate() {
            let proof = tree.proof(index as u32).expect("proof");
            prop_assert_eq!(verify_proof(leaf, &proof, tree.size(), &tree.root()), Ok(()));
        }
    }

    #[test]
    fn quorum_scope_no_proof_verifies_for_another_leaf(count in 2usize..300, seed in any::<u64>(), pick in any::<prop::sample::Index>(), other in any::<prop::sample::Index>()) {
        let tree = ScopeTree::from_leaf_hashes(leaves(count, seed)).expect("tree");
        let i = pick.index(count);
        let mut j = other.index(count);
        if j == i { j = (i + 1) % count; }
        let proof = tree.proof(i as u32).expect("proof");
        // Leaf j with leaf i's proof, and an outside leaf with leaf i's proof, both fail.
        prop_assert!(verify_proof(&tree.leaves()[j], &proof, tree.size(), &tree.root()).is_err());
        let outside = leaf_hash(&BatchId([7; 32]), "node_elsewhere", "node.reboot", None);
        prop_assert!(verify_proof(&outside, &proof, tree.size(), &tree.root()).is_err());
        // Leaf j claiming leaf i's index with its own siblings fails too.
        let moved = ScopeProof { index: i as u32, siblings: tree.proof(j as u32).expect("proof").siblings };
        prop_assert!(verify_proof(&tree.leaves()[j], &moved, tree.size(), &tree.root()).is_err());
    }
}

#[test]
fn quorum_scope_refuses_malformed_proofs() {
    let tree = ScopeTree::from_leaf_hashes(leaves(5, 1)).expect("tree");
    let leaf = tree.leaves()[0];
    let mut proof = tree.proof(0).expect("proof");
    assert_eq!(
        verify_proof(
            &leaf,
            &ScopeProof {
                index: 5,
                siblings: proof.siblings.clone()
            },
            5,
            &tree.root()
        ),
        Err(ProofError::IndexOutOfRange { index: 5, size: 5 })
    );
    assert_eq!(
        verify_proof(&leaf, &proof, 0, &tree.root()),
        Err(ProofError::BadSize(0))
    );
    proof.siblings.push(leaf);
    assert!(matches!(
        verify_proof(&leaf, &proof, 5, &tree.root()),
        Err(ProofError::SiblingCount { .. })
    ));
    // The wrong size changes the shape: refused.
    let proof = tree.proof(0).expect("proof");
    assert!(verify_proof(&leaf, &proof, 9, &tree.root()).is_err());
}

#[test]
fn quorum_scope_single_leaf_root_is_the_leaf() {
    let tree = ScopeTree::from_leaf_hashes(leaves(1, 3)).expect("tree");
    assert_eq!(tree.root(), tree.leaves()[0]);
    assert_eq!(tree.proof(0).expect("proof").siblings, vec![]);
    assert_eq!(tree.proof(1), None);
}

#[test]
fn quorum_scope_limits_and_dedup() {
    assert_eq!(ScopeTree::from_leaf_hashes(vec![]), Err(ScopeError::Empty));
    assert!(matches!(
        ScopeTree::from_leaf_hashes(vec![ScopeHash([0; 32]); 50_001]),
        Err(ScopeError::TooManyLeaves { count: 50_001, .. })
    ));
    let batch = BatchId([1; 32]);
    let leaf = ScopeLeaf::new("node_1", "node.reboot", None).expect("leaf");
    let tree = ScopeTree::build(&batch, &[leaf.clone(), leaf.clone()]).expect("tree");
    assert_eq!(tree.size(), 1);
    assert_eq!(
        ScopeLeaf::new("", "node.reboot", None),
        Err(ScopeError::EmptyField("subject"))
    );
    assert_eq!(
        ScopeLeaf::new("node\n1", "node.reboot", None),
        Err(ScopeError::ControlCharacter("subject"))
    );
}

#[test]
fn quorum_scope_builds_50000_leaves_with_all_proofs() {
    let tree = ScopeTree::from_leaf_hashes(leaves(50_000, 9)).expect("tree");
    let mut siblings = Vec::new();
    let mut total = 0;
    for index in 0..tree.size() {
        tree.proof_into(index, &mut siblings).expect("proof");
        total += siblings.len();
    }
    assert!(total >= 50_000 * 15);
    let proof = tree.proof(49_999).expect("proof");
    assert_eq!(
        verify_proof(&tree.leaves()[49_999], &proof, tree.size(), &tree.root()),
        Ok(())
    );
}
