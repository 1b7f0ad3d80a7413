//! The audit leaf decoder (`domain::audit::AuditLeaf::decode`): strict, so accepted implies the
//! bytes are the canonical encoding of what decoded, and its leaf hash is RFC 9162's hash of
//! exactly those bytes.
#![no_main]

use domain::audit::{leaf_hash, AuditLeaf};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(leaf) = AuditLeaf::decode(data) else {
        return;
    };
    assert_eq!(leaf.encode().expect("a decoded leaf encodes"), data);
    assert_eq!(leaf.encoded_len(), data.len());
    assert_eq!(leaf.leaf_hash().expect("hashes"), leaf_hash(data));
});
