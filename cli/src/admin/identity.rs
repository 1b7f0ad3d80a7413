//! Who a verified client certificate names: its SPIFFE ID and role
//! (`domain::pki::OperatorIdentity`), the actor of every event the call appends. Read from the
//! leaf the handshake verified, never from the request.

use domain::pki::{OperatorIdentity, TrustDomain};
use events::Actor;

use super::run::Caller;

/// The caller a verified operator certificate names, or why it names none.
pub fn caller_of(leaf_der: &[u8], trust_domain: &TrustDomain) -> Result<Caller, String> {
    let identity =
        OperatorIdentity::from_leaf_der(leaf_der, trust_domain).map_err(|e| e.to_string())?;
    let actor = Actor::new(identity.spiffe_id.clone(), identity.role.as_str())
        .map_err(|e| e.to_string())?;
    Ok(Caller {
        spiffe_id: identity.spiffe_id,
        role: identity.role,
        actor,
        serial: identity.serial.as_bytes().to_vec(),
        not_after: identity.not_after,
    })
}
