//! RFC 9162 §2.1.1: the Merkle Tree Hash's two prefixed SHA-256 hashes and the empty root.
//!
//! `MTH({}) = SHA-256()`, `MTH({d0}) = SHA-256(0x00 || d0)`, and for n > 1, with k the largest
//! power of two smaller than n, `MTH(D[n]) = SHA-256(0x01 || MTH(D[0:k]) || MTH(D[k:n]))`.
//! [`leaf_hash`] and [`node_hash`] are those two prefixed hashes; [`EMPTY_ROOT`] is `MTH({})`.

use sha2::{Digest, Sha256};

/// A SHA-256 output: leaf hashes, interior node hashes and tree roots.
pub type Hash = [u8; 32];

/// `MTH({})`: the root of the empty tree, SHA-256 of the empty string (RFC 9162 §2.1.1).
pub const EMPTY_ROOT: Hash = [
    0xe3, 0xb0, 0xc4, 0x42, 0x98, 0xfc, 0x1c, 0x14, 0x9a, 0xfb, 0xf4, 0xc8, 0x99, 0x6f, 0xb9, 0x24,
    0x27, 0xae, 0x41, 0xe4, 0x64, 0x9b, 0x93, 0x4c, 0xa4, 0x95, 0x99, 0x1b, 0x78, 0x52, 0xb8, 0x55,
];

/// Prefix byte of a leaf hash (RFC 9162 §2.1.1).
pub const LEAF_PREFIX: u8 = 0x00;
/// Prefix byte of an interior node hash (RFC 9162 §2.1.1).
pub const NODE_PREFIX: u8 = 0x01;

/// `SHA-256(0x00 || data)`: the hash of one leaf's bytes.
pub fn leaf_hash(data: &[u8]) -> Hash {
    let mut h = Sha256::new();
    h.update([LEAF_PREFIX]);
    h.update(data);
    h.finalize().into()
}

/// `SHA-256(0x01 || left || right)`: the hash of an interior node.
pub fn node_hash(left: &Hash, right: &Hash) -> Hash {
    let mut buf = [0u8; 65];
    buf[0] = NODE_PREFIX;
    buf[1..33].copy_from_slice(left);
    buf[33..].copy_from_slice(right);
    Sha256::digest(buf).into()
}
