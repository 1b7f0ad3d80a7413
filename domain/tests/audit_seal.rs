//! The seal decision: the sealer signs only strict extensions of the last checkpoint.

use domain::audit::merkle::{self, leaf_hash, Hash, ProofError, EMPTY_ROOT};
use domain::audit::seal::{check_seal, SealRefusal, TreeHead};

fn leaves(n: u64, salt: &str) -> Vec<Hash> {
    (0..n)
        .map(|i| leaf_hash(format!("{salt}{i}").as_bytes()))
        .collect()
}

fn head(l: &[Hash]) -> TreeHead {
    TreeHead {
        size: l.len() as u64,
        root: merkle::root(l),
    }
}

#[test]
fn a_strict_extension_is_sealed() {
    let l = leaves(30, "a");
    let old = head(&l[..11]);
    let new = head(&l);
    let proof = merkle::consistency_proof(&l, 11).unwrap();
    assert_eq!(check_seal(Some(old), new, &proof), Ok(new));
    // The first checkpoint extends the empty tree, with an empty proof.
    assert_eq!(check_seal(None, old, &[]), Ok(old));
}

#[test]
fn no_growth_is_nothing_to_seal() {
    let l = leaves(12, "a");
    assert_eq!(
        check_seal(Some(head(&l)), head(&l), &[]),
        Err(SealRefusal::NothingToSeal { size: 12 })
    );
    assert_eq!(
        check_seal(
            None,
            TreeHead {
                size: 0,
                root: EMPTY_ROOT
            },
            &[]
        ),
        Err(SealRefusal::NothingToSeal { size: 0 })
    );
}

#[test]
fn same_size_other_root_is_a_fork() {
    let (a, b) = (leaves(12, "a"), leaves(12, "b"));
    assert!(matches!(
        check_seal(Some(head(&a)), head(&b), &[]),
        Err(SealRefusal::Fork { size: 12, .. })
    ));
}

#[test]
fn a_smaller_tree_is_refused() {
    let l = leaves(12, "a");
    assert_eq!(
        check_seal(Some(head(&l)), head(&l[..5]), &[]),
        Err(SealRefusal::Shrinks {
            signed: 12,
            proposed: 5
        })
    );
}

#[test]
fn a_bad_or_missing_proof_is_refused() {
    let l = leaves(30, "a");
    let old = head(&l[..11]);
    let new = head(&l);
    let proof = merkle::consistency_proof(&l, 11).unwrap();
    // No proof at all.
    assert!(matches!(
        check_seal(Some(old), new, &[]),
        Err(SealRefusal::NotAnExtension {
            source: ProofError::TooShort { .. },
            ..
        })
    ));
    // A tampered proof.
    let mut bad = proof.clone();
    bad[0][0] ^= 1;
    assert!(matches!(
        check_seal(Some(old), new, &bad),
        Err(SealRefusal::NotAnExtension { .. })
    ));
    // Extra hashes.
    let mut longer = proof.clone();
    longer.push(new.root);
    assert!(matches!(
        check_seal(Some(old), new, &longer),
        Err(SealRefusal::NotAnExtension {
            source: ProofError::ExtraHashes { .. },
            ..
        })
    ));
    // A bigger tree that rewrote history: its own proof does not reproduce the signed root.
    let mut rewritten = l.clone();
    rewritten[3] = leaf_hash(b"rewritten");
    let forged_proof = merkle::consistency_proof(&rewritten, 11).unwrap();
    assert!(matches!(
        check_seal(Some(old), head(&rewritten), &forged_proof),
        Err(SealRefusal::NotAnExtension {
            source: ProofError::OldRootMismatch,
            ..
        })
    ));
    // A first checkpoint must come with an empty proof.
    assert!(matches!(
        check_seal(None, new, &proof),
        Err(SealRefusal::NotAnExtension {
            source: ProofError::ExtraHashes { .. },
            ..
        })
    ));
}
