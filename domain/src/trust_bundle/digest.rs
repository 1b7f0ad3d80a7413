//! The content digest of a trust bundle, and the root hashes it is built from.
//!
//! The content is the set of command-signing roots, the approver set (approverSetInput) and its
//! epoch; its digest is SHA-256 over purpose `trust-bundle` and `[root SHA-256s in ascending
//! order, concatenated; approverSetInput; uint64_be(epoch)]`, framed as
//! [`crate::quorum::signing::signed_parts`]. Set signatures and the active root are not content.

use sha2::{Digest, Sha256};

use crate::quorum::signing::signed_parts;
use crate::quorum::ApproverSet;

/// The purpose the content digest is framed under.
pub const PURPOSE_TRUST_BUNDLE: &str = "trust-bundle";

/// SHA-256 of one root certificate (DER).
pub fn root_sha256(root_der: &[u8]) -> [u8; 32] {
    Sha256::digest(root_der).into()
}

/// SHA-256 of each root, in the order given.
pub fn root_hashes(roots: &[Vec<u8>]) -> Vec<[u8; 32]> {
    roots.iter().map(|r| root_sha256(r)).collect()
}

/// The roots in ascending order of their SHA-256 (the order the content stores them in).
pub fn sorted_roots(roots: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut roots: Vec<Vec<u8>> = roots.to_vec();
    roots.sort_by_key(|r| root_sha256(r));
    roots
}

/// The content digest of a bundle (see the module docs).
pub fn bundle_digest(roots: &[Vec<u8>], set: &ApproverSet, epoch: u64) -> [u8; 32] {
    let mut hashes = root_hashes(roots);
    hashes.sort_unstable();
    let concatenated: Vec<u8> = hashes.concat();
    let framed = signed_parts(
        PURPOSE_TRUST_BUNDLE,
        &[&concatenated, &set.encode(), &epoch.to_be_bytes()],
    );
    Sha256::digest(framed).into()
}

/// The stored digest of an approver set: empty for no quorum.
pub fn set_sha256(set: &ApproverSet) -> Vec<u8> {
    if set.is_empty() {
        Vec::new()
    } else {
        set.digest().as_bytes().to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_ignores_root_order_but_not_the_epoch() {
        let roots = vec![b"root-a".to_vec(), b"root-b".to_vec()];
        let swapped = vec![b"root-b".to_vec(), b"root-a".to_vec()];
        let none = ApproverSet::none();
        assert_eq!(
            bundle_digest(&roots, &none, 0),
            bundle_digest(&swapped, &none, 0)
        );
        assert_ne!(
            bundle_digest(&roots, &none, 0),
            bundle_digest(&roots, &none, 1)
        );
        assert_ne!(
            bundle_digest(&roots, &none, 0),
            bundle_digest(&roots[..1], &none, 0)
        );
    }

    #[test]
    fn sorted_roots_follow_their_hashes() {
        let roots = sorted_roots(&[b"x".to_vec(), b"y".to_vec(), b"z".to_vec()]);
        let hashes = root_hashes(&roots);
        assert!(hashes.windows(2).all(|w| w[0] < w[1]));
    }
}
