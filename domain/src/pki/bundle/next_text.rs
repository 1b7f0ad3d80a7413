//! The second command-signing root as the bundle stores it ([`NextRootText`]: base64 DER inside
//! the seal, PEM in a plaintext bundle), and back (see [`super::next`]).

use super::document::NextRootText;
use super::error::{malformed, BundleError};
use crate::pki::ca::CommandSigningRoot;
use crate::pki::encoding::{b64, b64_decode, pem_decode, pem_encode};
use crate::pki::keys::{KeyRole, PrivateKey};
use crate::pki::keyset::KeySet;

const FIELD: &str = "privateKeys.nextCommandSigningRoot";

pub(super) fn to_text(root: &CommandSigningRoot, plaintext: bool) -> NextRootText {
    if plaintext {
        NextRootText {
            certificate: pem_encode("CERTIFICATE", root.cert_der()),
            key: pem_encode("PRIVATE KEY", root.private_key().pkcs8_der()),
        }
    } else {
        NextRootText {
            certificate: b64(root.cert_der()),
            key: b64(root.private_key().pkcs8_der()),
        }
    }
}

pub(super) fn from_text(
    keys: &KeySet,
    text: Option<&NextRootText>,
    plaintext: bool,
) -> Result<Option<CommandSigningRoot>, BundleError> {
    let Some(text) = text else {
        return Ok(None);
    };
    let (cert, key) = if plaintext {
        (
            pem_decode("CERTIFICATE", &text.certificate),
            pem_decode("PRIVATE KEY", &text.key),
        )
    } else {
        (b64_decode(&text.certificate), b64_decode(&text.key))
    };
    let (Some(cert), Some(key)) = (cert, key) else {
        return Err(malformed(FIELD, "the certificate or key does not decode"));
    };
    let key = PrivateKey::from_pkcs8_der(KeyRole::CommandSigningRoot, &key)?;
    let root = CommandSigningRoot::from_parts(&keys.trust_domain, cert, key)?;
    if root.public_key() == keys.command_signing_root.public_key() {
        return Err(malformed(
            FIELD,
            "it is the current command-signing root's key",
        ));
    }
    Ok(Some(root))
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::OffsetDateTime;

    use crate::pki::keyset::KeySetLifetimes;
    use crate::pki::spiffe::TrustDomain;

    fn keys() -> KeySet {
        KeySet::generate(
            TrustDomain::new("next.example.com").expect("td"),
            OffsetDateTime::now_utc(),
            KeySetLifetimes::default(),
        )
        .expect("keys")
    }

    #[test]
    fn a_second_root_with_the_current_roots_key_is_refused() {
        let keys = keys();
        let text = to_text(&keys.command_signing_root, true);
        match from_text(&keys, Some(&text), true) {
            Err(BundleError::Malformed { field, reason }) => {
                assert_eq!(field, FIELD);
                assert_eq!(reason, "it is the current command-signing root's key");
            }
            other => panic!("expected a refusal, got {:?}", other.map(|r| r.is_some())),
        }
    }
}
