//! How many hashes an inclusion proof (`PATH`, RFC 9162 §2.1.3.1) and a consistency proof
//! (`PROOF`, RFC 9162 §2.1.4.1) hold, from the tree sizes alone.
//!
//! The verifiers check a proof's length against these before any hashing, so a truncated proof,
//! or one with hashes added in front or behind, is refused by its length.

use super::walk::Walk;

/// Number of hashes in the inclusion proof of `index` in a tree of `size` (requires index < size).
///
/// The path has one hash per level below the point where `index` and `size - 1` part ways, plus
/// one for each left sibling above it on the right edge.
pub fn inclusion_proof_len(index: u64, size: u64) -> usize {
    debug_assert!(index < size);
    let last = size - 1;
    let inner = 64 - (index ^ last).leading_zeros();
    let border = if inner >= 64 {
        0
    } else {
        (index >> inner).count_ones()
    };
    (inner + border) as usize
}

/// Number of hashes in the consistency proof from `old_size` to `new_size`
/// (0 when `old_size` is 0 or equals `new_size`; requires old_size <= new_size).
///
/// A dry run of §2.1.4.2 steps 2 to 6: the first hash is implicit when `old_size` is a power of
/// two, then one hash per step until `sn` reaches 0.
pub fn consistency_proof_len(old_size: u64, new_size: u64) -> usize {
    if old_size == 0 || old_size >= new_size {
        return 0;
    }
    let mut len = usize::from(!old_size.is_power_of_two());
    let mut walk = Walk::new(old_size - 1, new_size - 1);
    walk.skip_set_bits();
    while !walk.at_root() {
        len += 1;
        if walk.sibling_is_left() {
            walk.skip_lone_levels();
        }
        walk.up();
    }
    len
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proof_lengths_at_the_edges() {
        assert_eq!(inclusion_proof_len(0, 1), 0);
        assert_eq!(inclusion_proof_len(0, 2), 1);
        assert_eq!(inclusion_proof_len(6, 7), 2);
        assert_eq!(inclusion_proof_len(0, 7), 3);
        assert_eq!(inclusion_proof_len(u64::MAX - 1, u64::MAX), 63);
        assert_eq!(consistency_proof_len(3, 7), 4);
        assert_eq!(consistency_proof_len(4, 7), 1);
        assert_eq!(consistency_proof_len(6, 7), 3);
    }
}
