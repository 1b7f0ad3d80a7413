//! A random fraction that spreads what many peers would otherwise do at the same moment: the age
//! at which connections are asked to close, the retry hints nodes are told to wait out. No
//! cryptographic quality is needed, so it takes the standard library's per-process random keys
//! rather than a generator of its own.

/// A random fraction in [0, 1).
pub(crate) fn jitter() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0);
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}
