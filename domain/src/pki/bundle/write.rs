//! Writing a bundle: the key map and document of a key set, sealed (under the deployment
//! secret) or plaintext, with the second root of a rotation in progress when there is one.

use ring::aead::{Aad, Nonce};
use ring::rand::{SecureRandom, SystemRandom};

use super::document::{
    seal_aad, Certificates, Document, KeyMap, PrivateKeys, PublicKeys, RootKeyPlace, SealedPayload,
    BUNDLE_FORMAT, BUNDLE_VERSION,
};
use super::error::BundleError;
use super::next_text;
use super::public::PublicBundle;
use crate::pki::bundle_kdf::{seal_keys, Argon2idParams, BundleKdf};
use crate::pki::ca::CommandSigningRoot;
use crate::pki::encoding::{b64, pem_encode};
use crate::pki::keys::{PrivateKey, PublicKey};
use crate::pki::keyset::KeySet;
use crate::pki::secret::DeploymentSecret;
use crate::pki::ssh_ca::SshCa;

fn key_map(
    keys: &KeySet,
    encode: impl Fn(&PrivateKey) -> String,
    encode_ssh: impl Fn(&[u8]) -> String,
) -> KeyMap {
    KeyMap {
        root_ca: keys.root_ca.private_key().map(&encode),
        node_ca: encode(keys.node_ca.private_key()),
        serving_ca: encode(keys.serving_ca.private_key()),
        join_signing: encode(&keys.join_signing),
        join_encryption: encode(keys.join_encryption.private_key()),
        audit_signing: encode(&keys.audit_signing),
        command_signing_root: encode(keys.command_signing_root.private_key()),
        operator_ca: keys.operator_ca.as_ref().map(|ca| encode(ca.private_key())),
        ssh_ca: keys.ssh_ca.as_ref().map(|ca| encode_ssh(ca.pkcs8_der())),
        next_command_signing_root: None,
    }
}

fn document(keys: &KeySet, private_keys: PrivateKeys) -> Document {
    let cert = |der: &[u8]| pem_encode("CERTIFICATE", der);
    let public = |key: &PublicKey| pem_encode("PUBLIC KEY", key.spki_der());
    Document {
        format: BUNDLE_FORMAT.into(),
        version: BUNDLE_VERSION,
        trust_domain: keys.trust_domain.to_string(),
        root_key: keys.root_ca.is_offline().then_some(RootKeyPlace::Offline),
        certificates: Certificates {
            root_ca: cert(keys.root_ca.cert_der()),
            node_ca: cert(keys.node_ca.cert_der()),
            serving_ca: cert(keys.serving_ca.cert_der()),
            command_signing_root: cert(keys.command_signing_root.cert_der()),
            operator_ca: keys.operator_ca.as_ref().map(|ca| cert(ca.cert_der())),
        },
        public_keys: PublicKeys {
            join_signing: public(keys.join_signing.public_key()),
            join_encryption: public(keys.join_encryption.public_key()),
            audit_signing: public(keys.audit_signing.public_key()),
            ssh_ca: keys.ssh_ca.as_ref().map(SshCa::public_key_line),
        },
        private_keys,
    }
}

fn to_json(doc: &Document) -> Result<Vec<u8>, BundleError> {
    let mut out = serde_json::to_vec_pretty(doc).map_err(|e| BundleError::Json(e.to_string()))?;
    out.push(b'\n');
    Ok(out)
}

/// Writes `keys` as a bundle whose private keys are sealed under `secret`, its key derived with
/// Argon2id at [`Argon2idParams::DEFAULT`].
pub fn seal_bundle(keys: &KeySet, secret: &DeploymentSecret) -> Result<Vec<u8>, BundleError> {
    seal_bundle_with(keys, secret, BundleKdf::Argon2id(Argon2idParams::DEFAULT))
}

/// [`seal_bundle`] with another derivation (tests use small Argon2id parameters, and the
/// HKDF-only derivation of older bundles).
pub fn seal_bundle_with(
    keys: &KeySet,
    secret: &DeploymentSecret,
    kdf: BundleKdf,
) -> Result<Vec<u8>, BundleError> {
    seal_with_next(keys, None, secret, kdf)
}

/// [`seal_bundle_with`], with the second root of a rotation in progress.
pub(crate) fn seal_with_next(
    keys: &KeySet,
    next: Option<&CommandSigningRoot>,
    secret: &DeploymentSecret,
    kdf: BundleKdf,
) -> Result<Vec<u8>, BundleError> {
    if let BundleKdf::Argon2id(params) = &kdf {
        params.check()?;
    }
    let rng = SystemRandom::new();
    let mut salt = [0u8; 32];
    let mut nonce = [0u8; 12];
    rng.fill(&mut salt)
        .and_then(|_| rng.fill(&mut nonce))
        .map_err(|_| BundleError::Seal("the system random generator failed".into()))?;
    let (aead, check) = seal_keys(&kdf, secret, &salt)?;
    let mut map = key_map(keys, |k| b64(k.pkcs8_der()), b64);
    map.next_command_signing_root = next.map(|r| next_text::to_text(r, false));
    let payload = SealedPayload {
        public_sha256: hex::encode(PublicBundle::of(keys).public_sha256()),
        keys: map,
    };
    let mut body = serde_json::to_vec(&payload).map_err(|e| BundleError::Json(e.to_string()))?;
    aead.seal_in_place_append_tag(
        Nonce::assume_unique_for_key(nonce),
        Aad::from(seal_aad(&keys.trust_domain)),
        &mut body,
    )
    .map_err(|_| BundleError::Seal("AES-256-GCM".into()))?;
    let sealed = PrivateKeys::Sealed {
        aead: "AES-256-GCM".into(),
        kdf: kdf.name().into(),
        kdf_params: kdf.params(),
        salt: b64(&salt),
        key_check: b64(&check),
        nonce: b64(&nonce),
        ciphertext: b64(&body),
    };
    to_json(&document(keys, sealed))
}

/// Writes `keys` as a development bundle with the private keys unsealed (PEM PKCS#8).
pub fn plaintext_bundle(keys: &KeySet) -> Result<Vec<u8>, BundleError> {
    plaintext_with_next(keys, None)
}

/// [`plaintext_bundle`], with the second root of a rotation in progress.
pub(crate) fn plaintext_with_next(
    keys: &KeySet,
    next: Option<&CommandSigningRoot>,
) -> Result<Vec<u8>, BundleError> {
    let mut keys_pem = key_map(
        keys,
        |k| pem_encode("PRIVATE KEY", k.pkcs8_der()),
        |der| pem_encode("PRIVATE KEY", der),
    );
    keys_pem.next_command_signing_root = next.map(|r| next_text::to_text(r, true));
    to_json(&document(keys, PrivateKeys::Plaintext { keys: keys_pem }))
}
