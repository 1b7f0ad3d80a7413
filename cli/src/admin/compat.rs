//! TEMPORARY: what helper "operator" provides (the operator CA in the key set, the revoked
//! operator serials from the log), until its branch is merged here.

use domain::pki::KeySet;
use events::store::EventStore;

/// The operator CA's certificate (DER), if the bundle has one.
pub fn operator_ca_der(keys: &KeySet) -> Option<Vec<u8>> {
    let _ = keys;
    None
}

/// The revoked operator certificates' serials.
pub async fn revoked_serials(store: &EventStore) -> Result<Vec<Vec<u8>>, String> {
    let _ = store;
    Ok(Vec::new())
}
