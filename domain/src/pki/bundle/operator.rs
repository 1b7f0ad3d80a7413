//! The operator CA in a bundle (issue 23): its certificate in `certificates.operatorCa`, its key
//! `operatorCa` with the other private keys. A bundle written before has neither; one without
//! the other is malformed. [`load`] pairs them; the key set checks the CA against its root
//! ([`crate::pki::KeySet::with_operator_ca`]).

use super::error::{malformed, BundleError};
use super::public::PublicBundle;
use crate::pki::ca::OperatorCa;
use crate::pki::keys::{KeyRole, PrivateKey};

const KEY_FIELD: &str = "privateKeys.operatorCa";

/// The operator CA of a bundle, from the public half's certificate and the key text (decoded by
/// `decode`, PEM or base64 as the bundle's mode says); `None` when the bundle has none.
pub(super) fn load(
    public: &PublicBundle,
    key_text: Option<&str>,
    decode: &impl Fn(&'static str, &str) -> Result<Vec<u8>, BundleError>,
) -> Result<Option<OperatorCa>, BundleError> {
    match (&public.operator_ca_der, key_text) {
        (None, None) => Ok(None),
        (Some(der), Some(text)) => {
            let key = PrivateKey::from_pkcs8_der(KeyRole::OperatorCa, &decode(KEY_FIELD, text)?)?;
            Ok(Some(OperatorCa::from_parts(
                &public.trust_domain,
                der.clone(),
                key,
            )?))
        }
        (Some(_), None) => Err(malformed(
            KEY_FIELD,
            "missing: the bundle has an operator CA certificate but not its key",
        )),
        (None, Some(_)) => Err(malformed(
            KEY_FIELD,
            "the bundle holds an operator CA key but no certificates.operatorCa",
        )),
    }
}
