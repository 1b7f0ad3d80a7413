//! The PKI bundle: one JSON document holding the whole key set.
//!
//! # Layout
//!
//! ```json
//! {
//!   "format": "bc-pki-bundle",
//!   "version": 1,
//!   "trustDomain": "compute.example.com",
//!   "certificates": {
//!     "rootCa": "-----BEGIN CERTIFICATE-----…",
//!     "nodeCa": "…", "servingCa": "…", "commandSigningRoot": "…"
//!   },
//!   "publicKeys": {
//!     "joinSigning": "-----BEGIN PUBLIC KEY-----…",
//!     "joinEncryption": "…", "auditSigning": "…"
//!   },
//!   "privateKeys": {
//!     "mode": "sealed",
//!     "aead": "AES-256-GCM", "kdf": "Argon2id",
//!     "kdfParams": {"memoryKib": 65536, "iterations": 3, "parallelism": 1},
//!     "salt": "<base64 32 bytes>", "keyCheck": "<base64 32 bytes>",
//!     "nonce": "<base64 12 bytes>", "ciphertext": "<base64>"
//!   }
//! }
//! ```
//!
//! or, with `--plaintext` (development only), `"privateKeys": {"mode": "plaintext", "keys":
//! {"rootCa": "-----BEGIN PRIVATE KEY-----…", …}}` with the seven PKCS#8 keys as PEM
//! (`rootCa`, `nodeCa`, `servingCa`, `joinSigning`, `joinEncryption`, `auditSigning`,
//! `commandSigningRoot`). Unknown fields are refused.
//!
//! A bundle whose root is offline (`pki init --offline-root`, issue 22) says `"rootKey":
//! "offline"` beside `trustDomain` and holds no `rootCa` private key (sealed or plaintext); the
//! two must agree. The field is covered by the seal's digest (below), so it cannot be flipped
//! without the secret; a bundle with an online root has no such field and its digest is as
//! before.
//!
//! A bundle with an operator CA (issue 23; `pki init` makes one, `pki add-operator-ca` adds it)
//! has `certificates.operatorCa` and the private key `operatorCa`; a bundle without one has
//! neither (the two must agree) and its digest is as before: [`operator`].
//!
//! A bundle with an SSH CA (issue 42; `pki init` makes one, `pki add-ssh-ca` adds it) has
//! `publicKeys.sshCa` (one OpenSSH line, `ssh-ed25519 <base64>`) and the private key `sshCa`
//! (Ed25519 PKCS#8); a bundle without one has neither and its digest is as before; with one,
//! the digest ends `lp("sshCa") || lp(<the key's SSH wire blob>)`: [`ssh_ca`].
//!
//! During a command-signing root rotation (`bcctl pki rotate-command-root`, issue 21) the keys
//! also hold `nextCommandSigningRoot: {"certificate", "key"}`: the second root, certificate and
//! key both inside the seal (so the seal authenticates it and the public half, and its digest,
//! stay as they were): [`next`].
//!
//! # The seal
//!
//! With `lp(x) = u32_be(len(x)) || x` and `L = "bc-pki-bundle-seal-v1"`:
//!
//! * `PRK = HKDF-Extract(salt, Argon2id(secret, salt, kdfParams))` (SHA-256; `salt` is 32 fresh
//!   random bytes; bundles written before issue 17 say `"kdf": "HKDF-SHA256"`, have no
//!   `kdfParams` and use `PRK = HKDF-Extract(salt, secret)`: see [`super::bundle_kdf`]);
//!   `K = HKDF-Expand(PRK, L || " key", 32)`, `keyCheck = HKDF-Expand(PRK, L || " check", 32)`.
//!   `keyCheck` tells a wrong secret ([`BundleError::WrongSecret`]) apart from a changed
//!   bundle; it reveals nothing the ciphertext does not already let one test.
//! * The plaintext is JSON `{"publicSha256": "<hex>", "keys": {<role>: "<base64 PKCS#8>", …}}`;
//!   `publicSha256` is SHA-256 of the canonical public part
//!   `lp("bc-pki-bundle-public-v1") || lp(format) || u32_be(version) || lp(trustDomain)` followed
//!   by `lp(name) || lp(DER)` for each certificate and each public key in the order above, and,
//!   for an offline root only, `lp("rootKey") || lp("offline")`, then, with an operator CA only,
//!   `lp("operatorCa") || lp(DER)`.
//!   Reformatting the JSON changes nothing; changing any certificate, key or the trust domain
//!   does ([`BundleError::PublicPartsChanged`]).
//! * `ciphertext = AES-256-GCM(K, nonce, plaintext, AAD = lp(L) || lp(trustDomain))`, tag
//!   appended. A changed trust domain (or altered ciphertext) does not open
//!   ([`BundleError::SealBroken`]).
//!
//! Everything here is pure: bytes in, bytes out. The CLI writes the file (mode 0600, never
//! overwriting). The only outside input is randomness (salt, nonce), from ring's `SystemRandom`.

mod document;
mod error;
pub mod next;
mod next_text;
mod operator;
mod public;
mod ssh_ca;
mod write;

use document::{seal_aad, Document, KeyMap, PrivateKeys, RootKeyPlace, SealedPayload};
pub use document::{Protection, BUNDLE_FORMAT, BUNDLE_VERSION};
use error::malformed;
pub use error::BundleError;
pub use public::PublicBundle;
pub use write::{plaintext_bundle, seal_bundle, seal_bundle_with};

use ring::aead::{Aad, Nonce};

use super::bundle_kdf::{seal_keys, BundleKdf};
use super::ca::{parse_cert, CommandSigningRoot, NodeCa, ServingCa};
use super::encoding::{b64_decode, pem_decode};
use super::keys::{KeyRole, PrivateKey, PublicKey};
use super::keyset::KeySet;
use super::root::RootCa;
use super::secret::DeploymentSecret;
use super::spiffe::TrustDomain;
use super::token::constant_time_eq;
use super::token_seal::JoinEncryptionKey;

/// A bundle read from bytes.
#[derive(Debug)]
pub struct LoadedBundle {
    /// The public half.
    pub public: PublicBundle,
    /// Sealed or plaintext.
    pub protection: Protection,
    /// Whether the seal vouched for the public half (only a sealed bundle opened with its
    /// secret). Without it, whoever can write the file chooses the pins.
    pub authenticated: bool,
    /// The keys: `None` for a sealed bundle read without a secret.
    pub keys: Option<KeySet>,
    /// How a sealed bundle's key is derived from the secret (`None` for a plaintext bundle).
    pub kdf: Option<BundleKdf>,
    /// The second command-signing root of a rotation in progress (with the keys only).
    pub next_command_signing_root: Option<CommandSigningRoot>,
}

fn decode_public(doc: &Document) -> Result<PublicBundle, BundleError> {
    let trust_domain = TrustDomain::new(&doc.trust_domain)?;
    let cert = |field: &'static str, pem: &str| -> Result<Vec<u8>, BundleError> {
        let der =
            pem_decode("CERTIFICATE", pem).ok_or(malformed(field, "not one PEM CERTIFICATE"))?;
        parse_cert(&der).ok_or(malformed(field, "not an X.509 DER certificate"))?;
        Ok(der)
    };
    let public = |field: &'static str, pem: &str| -> Result<PublicKey, BundleError> {
        let der =
            pem_decode("PUBLIC KEY", pem).ok_or(malformed(field, "not one PEM PUBLIC KEY"))?;
        PublicKey::from_spki_der(&der).map_err(|e| malformed(field, &e.to_string()))
    };
    let c = &doc.certificates;
    let p = &doc.public_keys;
    Ok(PublicBundle {
        trust_domain,
        root_ca_der: cert("certificates.rootCa", &c.root_ca)?,
        node_ca_der: cert("certificates.nodeCa", &c.node_ca)?,
        serving_ca_der: cert("certificates.servingCa", &c.serving_ca)?,
        command_signing_root_der: cert("certificates.commandSigningRoot", &c.command_signing_root)?,
        join_signing: public("publicKeys.joinSigning", &p.join_signing)?,
        join_encryption: public("publicKeys.joinEncryption", &p.join_encryption)?,
        audit_signing: public("publicKeys.auditSigning", &p.audit_signing)?,
        root_offline: doc.root_key == Some(RootKeyPlace::Offline),
        operator_ca_der: match &c.operator_ca {
            Some(pem) => Some(cert("certificates.operatorCa", pem)?),
            None => None,
        },
        ssh_ca_public_key: ssh_ca::public_key(p.ssh_ca.as_deref())?,
    })
}

fn assemble(
    public: &PublicBundle,
    keys: &KeyMap,
    decode: impl Fn(&'static str, &str) -> Result<Vec<u8>, BundleError>,
) -> Result<KeySet, BundleError> {
    let key = |role: KeyRole, field: &'static str, text: &str| -> Result<PrivateKey, BundleError> {
        Ok(PrivateKey::from_pkcs8_der(role, &decode(field, text)?)?)
    };
    let td = &public.trust_domain;
    let operator_ca = operator::load(public, keys.operator_ca.as_deref(), &decode)?;
    let ssh_ca = ssh_ca::load(public, keys.ssh_ca.as_deref(), &decode)?;
    let join_signing = key(
        KeyRole::JoinSigning,
        "privateKeys.joinSigning",
        &keys.join_signing,
    )?;
    let join_encryption = JoinEncryptionKey::new(key(
        KeyRole::JoinEncryption,
        "privateKeys.joinEncryption",
        &keys.join_encryption,
    )?)?;
    let audit_signing = key(
        KeyRole::AuditSigning,
        "privateKeys.auditSigning",
        &keys.audit_signing,
    )?;
    for (role, private, public) in [
        (
            KeyRole::JoinSigning,
            join_signing.public_key(),
            &public.join_signing,
        ),
        (
            KeyRole::JoinEncryption,
            join_encryption.public_key(),
            &public.join_encryption,
        ),
        (
            KeyRole::AuditSigning,
            audit_signing.public_key(),
            &public.audit_signing,
        ),
    ] {
        if private != public {
            return Err(malformed_keys(role));
        }
    }
    let set =
        KeySet::from_parts(
            td.clone(),
            match (&keys.root_ca, public.root_offline) {
                (Some(root_key), false) => RootCa::from_parts(
                    td,
                    public.root_ca_der.clone(),
                    key(KeyRole::RootCa, "privateKeys.rootCa", root_key)?,
                )?,
                (None, true) => RootCa::from_certificate(td, public.root_ca_der.clone())?,
                (Some(_), true) => {
                    return Err(malformed(
                        "privateKeys.rootCa",
                        "the bundle says its root key is offline (rootKey) but holds one",
                    ))
                }
                (None, false) => return Err(malformed(
                    "privateKeys.rootCa",
                    "missing (a bundle whose root key is kept apart says \"rootKey\": \"offline\")",
                )),
            },
            NodeCa::from_parts(
                td,
                public.node_ca_der.clone(),
                key(KeyRole::NodeCa, "privateKeys.nodeCa", &keys.node_ca)?,
            )?,
            ServingCa::from_parts(
                td,
                public.serving_ca_der.clone(),
                key(
                    KeyRole::ServingCa,
                    "privateKeys.servingCa",
                    &keys.serving_ca,
                )?,
            )?,
            join_signing,
            join_encryption,
            audit_signing,
            CommandSigningRoot::from_parts(
                td,
                public.command_signing_root_der.clone(),
                key(
                    KeyRole::CommandSigningRoot,
                    "privateKeys.commandSigningRoot",
                    &keys.command_signing_root,
                )?,
            )?,
        )?;
    let set = match operator_ca {
        Some(ca) => set.with_operator_ca(ca)?,
        None => set,
    };
    Ok(match ssh_ca {
        Some(ca) => set.with_ssh_ca(ca),
        None => set,
    })
}

fn malformed_keys(role: KeyRole) -> BundleError {
    BundleError::Malformed {
        field: "privateKeys",
        reason: format!("the {role} private key does not match its public key"),
    }
}

/// Reads a bundle. With `secret`, a sealed bundle is opened and its public half authenticated;
/// without it, only the public half is read (`keys: None`, `authenticated: false`). A plaintext
/// bundle always yields its keys and is never authenticated.
pub fn open_bundle(
    bytes: &[u8],
    secret: Option<&DeploymentSecret>,
) -> Result<LoadedBundle, BundleError> {
    let doc: Document =
        serde_json::from_slice(bytes).map_err(|e| BundleError::Json(e.to_string()))?;
    if doc.format != BUNDLE_FORMAT || doc.version != BUNDLE_VERSION {
        return Err(BundleError::UnsupportedFormat {
            format: doc.format,
            version: doc.version,
        });
    }
    let public = decode_public(&doc)?;
    match &doc.private_keys {
        PrivateKeys::Plaintext { keys } => {
            let set = assemble(&public, keys, |field, text| {
                pem_decode("PRIVATE KEY", text).ok_or(malformed(field, "not one PEM PRIVATE KEY"))
            })?;
            let next = next_text::from_text(&set, keys.next_command_signing_root.as_ref(), true)?;
            Ok(LoadedBundle {
                public,
                protection: Protection::Plaintext,
                authenticated: false,
                keys: Some(set),
                kdf: None,
                next_command_signing_root: next,
            })
        }
        PrivateKeys::Sealed {
            aead,
            kdf,
            kdf_params,
            salt,
            key_check,
            nonce,
            ciphertext,
        } => {
            if aead != "AES-256-GCM" {
                return Err(malformed("privateKeys", "unknown aead"));
            }
            let kdf = BundleKdf::from_header(kdf, *kdf_params)?;
            let Some(secret) = secret else {
                return Ok(LoadedBundle {
                    public,
                    protection: Protection::Sealed,
                    authenticated: false,
                    keys: None,
                    kdf: Some(kdf),
                    next_command_signing_root: None,
                });
            };
            let b = |field: &'static str, text: &str| {
                b64_decode(text).ok_or(malformed(field, "not base64"))
            };
            let salt = b("privateKeys.salt", salt)?;
            let check = b("privateKeys.keyCheck", key_check)?;
            let nonce: [u8; 12] = b("privateKeys.nonce", nonce)?
                .try_into()
                .map_err(|_| malformed("privateKeys.nonce", "not 12 bytes"))?;
            let mut body = b("privateKeys.ciphertext", ciphertext)?;
            let (aead, expected_check) = seal_keys(&kdf, secret, &salt)?;
            if !constant_time_eq(&check, &expected_check) {
                return Err(BundleError::WrongSecret);
            }
            let plain = aead
                .open_in_place(
                    Nonce::assume_unique_for_key(nonce),
                    Aad::from(seal_aad(&public.trust_domain)),
                    &mut body,
                )
                .map_err(|_| BundleError::SealBroken {
                    trust_domain: public.trust_domain.to_string(),
                })?;
            let payload: SealedPayload = serde_json::from_slice(plain)
                .map_err(|e| malformed("privateKeys.ciphertext", &e.to_string()))?;
            let sealed_digest = hex::decode(&payload.public_sha256)
                .map_err(|_| malformed("privateKeys.ciphertext", "publicSha256 is not hex"))?;
            if !constant_time_eq(&sealed_digest, &public.public_sha256()) {
                return Err(BundleError::PublicPartsChanged);
            }
            let set = assemble(&public, &payload.keys, |field, text| {
                b64_decode(text).ok_or(malformed(field, "not base64"))
            })?;
            let next =
                next_text::from_text(&set, payload.keys.next_command_signing_root.as_ref(), false)?;
            Ok(LoadedBundle {
                public,
                protection: Protection::Sealed,
                authenticated: true,
                keys: Some(set),
                kdf: Some(kdf),
                next_command_signing_root: next,
            })
        }
    }
}
