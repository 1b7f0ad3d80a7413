//! The second command-signing root a rotation keeps in the PKI bundle (issue 21, `bcctl pki
//! rotate-command-root`): stage `add` generates it and writes it beside the current root, `drop`
//! makes it the bundle's `commandSigningRoot`. Both its certificate and its key are kept with the
//! private keys (`nextCommandSigningRoot: {"certificate", "key"}`; base64 DER inside the seal, PEM
//! in a plaintext bundle), so the seal authenticates it while the public half, and the digest the
//! seal binds, stay those of a bundle without it: an older build reads the public half unchanged.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::{malformed, plaintext_with_next, seal_with_next, BundleError, Protection};
use crate::pki::bundle_kdf::{Argon2idParams, BundleKdf};
use crate::pki::ca::CommandSigningRoot;
use crate::pki::encoding::{b64, b64_decode, pem_decode, pem_encode};
use crate::pki::keys::{KeyRole, PrivateKey};
use crate::pki::keyset::{KeySet, KeySetLifetimes};
use crate::pki::secret::DeploymentSecret;

const FIELD: &str = "privateKeys.nextCommandSigningRoot";

/// The second root as the bundle stores it.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct NextRootText {
    certificate: String,
    key: String,
}

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

/// A fresh command-signing root for `keys`' trust domain, valid from `now` for the roots'
/// default lifetime.
pub fn generate_command_root(
    keys: &KeySet,
    now: OffsetDateTime,
) -> Result<CommandSigningRoot, BundleError> {
    Ok(CommandSigningRoot::generate(
        &keys.trust_domain,
        PrivateKey::generate(KeyRole::CommandSigningRoot)?,
        now,
        KeySetLifetimes::default().root,
    )?)
}

/// The bundle bytes of `keys` with `next` as the rotation's second root, protected as before:
/// sealed under `secret` (Argon2id with the bundle's own parameters; an older HKDF-only bundle is
/// re-sealed with Argon2id's defaults) or plaintext.
pub fn write_bundle_with_next(
    keys: &KeySet,
    next: Option<&CommandSigningRoot>,
    protection: Protection,
    secret: Option<&DeploymentSecret>,
    kdf: Option<BundleKdf>,
) -> Result<Vec<u8>, BundleError> {
    match protection {
        Protection::Plaintext => plaintext_with_next(keys, next),
        Protection::Sealed => {
            let secret = secret.ok_or_else(|| {
                BundleError::Seal("a sealed bundle is re-sealed only with its secret".into())
            })?;
            let kdf = match kdf {
                Some(k @ BundleKdf::Argon2id(_)) => k,
                _ => BundleKdf::Argon2id(Argon2idParams::DEFAULT),
            };
            seal_with_next(keys, next, secret, kdf)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pki::bundle::open_bundle;
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
    fn the_second_root_survives_the_seal_and_the_public_half_does_not_change() {
        let keys = keys();
        let next = generate_command_root(&keys, OffsetDateTime::now_utc()).expect("root");
        let secret = DeploymentSecret::new("a-deployment-secret-of-more-than-32-characters")
            .expect("secret");
        let small = BundleKdf::Argon2id(Argon2idParams {
            memory_kib: 64,
            iterations: 1,
            parallelism: 1,
        });
        let without =
            write_bundle_with_next(&keys, None, Protection::Sealed, Some(&secret), Some(small))
                .expect("seal");
        let with = write_bundle_with_next(
            &keys,
            Some(&next),
            Protection::Sealed,
            Some(&secret),
            Some(small),
        )
        .expect("seal");
        let a = open_bundle(&without, Some(&secret)).expect("open");
        let b = open_bundle(&with, Some(&secret)).expect("open");
        assert!(a.next_command_signing_root.is_none());
        assert_eq!(
            b.next_command_signing_root
                .as_ref()
                .map(|r| r.cert_der().to_vec()),
            Some(next.cert_der().to_vec())
        );
        assert_eq!(a.public, b.public, "the public half is the same");
        assert_eq!(
            b.kdf,
            Some(small),
            "re-sealed with the bundle's own parameters"
        );
        // Without the secret the second root is not read (it is inside the seal).
        assert!(open_bundle(&with, None)
            .expect("public")
            .next_command_signing_root
            .is_none());
        // A plaintext bundle keeps it too.
        let plain = write_bundle_with_next(&keys, Some(&next), Protection::Plaintext, None, None)
            .expect("plaintext");
        assert!(open_bundle(&plain, None)
            .expect("open")
            .next_command_signing_root
            .is_some());
        // A sealed bundle is never written without its secret.
        assert!(matches!(
            write_bundle_with_next(&keys, None, Protection::Sealed, None, None),
            Err(BundleError::Seal(_))
        ));
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
