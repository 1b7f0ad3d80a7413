//! bcd's `identity.json` reader (`bcd::files::identity::StoredIdentity`, as `read_stored` parses
//! it) with the leaf check `load` runs on it, and the `node.key` PEM reader. Accepted implies:
//! the identity writes back to JSON that reads to the same identity; a leaf that checks out
//! agrees with every stored field; a key reads back from the PEM bcd writes for it.
#![no_main]

use bcd::files::{key_from_pem, key_to_pem};
use bcd::identity_store::StoredIdentity;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(stored) = serde_json::from_slice::<StoredIdentity>(data) {
        let written = stored.to_json();
        let back: StoredIdentity =
            serde_json::from_slice(&written).expect("a written identity.json reads");
        assert_eq!(back, stored);
        let _ = stored.server_time();
        if let Ok(leaf) = stored.parse_leaf() {
            assert_eq!(leaf.spiffe_id.node.as_str(), stored.node_id);
            assert_eq!(leaf.spiffe_id.site.as_str(), stored.site_id);
            assert_eq!(leaf.spiffe_id.trust_domain.as_str(), stored.trust_domain);
            assert_eq!(leaf.role.as_str(), stored.role);
        }
    }
    if let Ok(key) = key_from_pem(data) {
        let again = key_from_pem(key_to_pem(&key).as_bytes()).expect("own PEM reads");
        assert_eq!(again.public_key(), key.public_key());
    }
});
