//! The second command-signing root a rotation keeps in the PKI bundle (issue 21, `bcctl pki
//! rotate-command-root`): stage `add` generates it and writes it beside the current root, `drop`
//! makes it the bundle's `commandSigningRoot`. Both its certificate and its key are kept with the
//! private keys (`nextCommandSigningRoot: {"certificate", "key"}`; base64 DER inside the seal, PEM
//! in a plaintext bundle), so the seal authenticates it while the public half, and the digest the
//! seal binds, stay those of a bundle without it: an older build reads the public half unchanged.

use time::OffsetDateTime;

use super::document::Protection;
use super::error::BundleError;
use super::write::{plaintext_with_next, seal_with_next};
use crate::pki::bundle_kdf::{Argon2idParams, BundleKdf};
use crate::pki::ca::CommandSigningRoot;
use crate::pki::keys::{KeyRole, PrivateKey};
use crate::pki::keyset::{KeySet, KeySetLifetimes};
use crate::pki::secret::DeploymentSecret;

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
}
