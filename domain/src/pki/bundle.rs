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

pub mod next;
mod operator;
mod write;

pub use write::{plaintext_bundle, seal_bundle, seal_bundle_with};
use write::{plaintext_with_next, seal_with_next};

use ring::aead::{Aad, Nonce};

use serde::{Deserialize, Serialize};

use super::bundle_kdf::{seal_keys, Argon2idParams, BundleKdf, KdfError};
use super::ca::{parse_cert, CaError, CommandSigningRoot, NodeCa, ServingCa};
use super::encoding::{b64_decode, pem_decode, put_lp, sha256};
use super::keys::{KeyError, KeyRole, PrivateKey, PublicKey};
use super::keyset::{KeySet, KeySetError, KeySetPins};
use super::pin::Pin;
use super::root::RootCa;
use super::secret::{DeploymentSecret, SecretError};
use super::spiffe::{SpiffeError, TrustDomain};
use super::token::constant_time_eq;
use super::token_seal::JoinEncryptionKey;

/// The `format` field.
pub const BUNDLE_FORMAT: &str = "bc-pki-bundle";
/// The `version` field this code writes and reads.
pub const BUNDLE_VERSION: u32 = 1;
const SEAL_LABEL: &str = "bc-pki-bundle-seal-v1";
const PUBLIC_LABEL: &str = "bc-pki-bundle-public-v1";

/// Why a bundle could not be written or read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BundleError {
    /// Not JSON of the expected shape.
    #[error("INVALID_CONFIG: the PKI bundle is not a valid bc-pki-bundle JSON document: {0}")]
    Json(String),
    /// Another format or version.
    #[error("INVALID_CONFIG: the PKI bundle is {format:?} version {version}; this build reads {BUNDLE_FORMAT:?} version {BUNDLE_VERSION}")]
    UnsupportedFormat {
        /// `format` found.
        format: String,
        /// `version` found.
        version: u32,
    },
    /// A field does not decode.
    #[error("INVALID_CONFIG: the PKI bundle's {field} is malformed: {reason}")]
    Malformed {
        /// Field path.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The trust domain is invalid.
    #[error("INVALID_CONFIG: the PKI bundle's trust domain: {0}")]
    TrustDomain(#[from] SpiffeError),
    /// No usable secret.
    #[error(transparent)]
    Secret(#[from] SecretError),
    /// The secret is not this bundle's.
    #[error("INVALID_CONFIG: the PKI bundle does not open with this BC_DEPLOYMENT_SECRET: it was sealed under another secret (or its kdf or kdfParams were changed)")]
    WrongSecret,
    /// The secret is right, but the sealed keys do not open for this trust domain.
    #[error("INVALID_CONFIG: the PKI bundle's sealed keys do not open for trust domain {trust_domain}: the trust domain or the sealed keys were changed; restore the bundle from a backup")]
    SealBroken {
        /// Trust domain in the file.
        trust_domain: String,
    },
    /// The seal opened but the public parts are not the sealed ones.
    #[error("INVALID_CONFIG: the PKI bundle's public parts (certificates, public keys) changed since it was sealed; restore it from a backup")]
    PublicPartsChanged,
    /// A private key and its public counterpart disagree, or a role is wrong.
    #[error("INVALID_CONFIG: the PKI bundle's keys: {0}")]
    Keys(#[from] KeySetError),
    /// Sealing failed (randomness).
    #[error("sealing the PKI bundle failed: {0}")]
    Seal(String),
}

impl From<CaError> for BundleError {
    fn from(e: CaError) -> Self {
        BundleError::Keys(KeySetError::Ca(e))
    }
}

impl From<KdfError> for BundleError {
    fn from(e: KdfError) -> Self {
        match e {
            KdfError::Params(reason) => BundleError::Malformed {
                field: "privateKeys.kdfParams",
                reason,
            },
            KdfError::Kdf(reason) => BundleError::Malformed {
                field: "privateKeys.kdf",
                reason,
            },
            KdfError::Derive(why) => BundleError::Seal(why),
        }
    }
}

impl From<KeyError> for BundleError {
    fn from(e: KeyError) -> Self {
        BundleError::Keys(KeySetError::Key(e))
    }
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Document {
    format: String,
    version: u32,
    trust_domain: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    root_key: Option<RootKeyPlace>,
    certificates: Certificates,
    public_keys: PublicKeys,
    private_keys: PrivateKeys,
}

/// Where the root CA's key is, when not in the bundle.
#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
enum RootKeyPlace {
    /// In a file kept off the servers (`pki init --offline-root`).
    Offline,
}

#[derive(Serialize, Deserialize, Clone)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Certificates {
    root_ca: String,
    node_ca: String,
    serving_ca: String,
    command_signing_root: String,
    /// Absent in a bundle without an operator CA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    operator_ca: Option<String>,
}

#[derive(Serialize, Deserialize, Clone)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PublicKeys {
    join_signing: String,
    join_encryption: String,
    audit_signing: String,
}

#[derive(Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "camelCase", deny_unknown_fields)]
enum PrivateKeys {
    #[serde(rename_all = "camelCase")]
    Sealed {
        aead: String,
        kdf: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        kdf_params: Option<Argon2idParams>,
        salt: String,
        key_check: String,
        nonce: String,
        ciphertext: String,
    },
    Plaintext {
        keys: KeyMap,
    },
}

/// The seven private keys, as PEM (plaintext mode) or base64 DER (inside the seal).
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct KeyMap {
    /// Absent when the root is offline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    root_ca: Option<String>,
    node_ca: String,
    serving_ca: String,
    join_signing: String,
    join_encryption: String,
    audit_signing: String,
    command_signing_root: String,
    /// Absent in a bundle without an operator CA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    operator_ca: Option<String>,
    /// The second command-signing root while a rotation is in progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    next_command_signing_root: Option<next::NextRootText>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SealedPayload {
    public_sha256: String,
    keys: KeyMap,
}

/// The public half of a bundle: readable without the secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicBundle {
    /// Trust domain.
    pub trust_domain: TrustDomain,
    /// Root CA certificate, DER.
    pub root_ca_der: Vec<u8>,
    /// Node CA certificate, DER.
    pub node_ca_der: Vec<u8>,
    /// Serving CA certificate, DER.
    pub serving_ca_der: Vec<u8>,
    /// Command-signing root certificate, DER.
    pub command_signing_root_der: Vec<u8>,
    /// JoinService signing public key.
    pub join_signing: PublicKey,
    /// JoinService encryption public key.
    pub join_encryption: PublicKey,
    /// Audit signing public key.
    pub audit_signing: PublicKey,
    /// Whether the root CA's key is kept out of the bundle (`pki init --offline-root`).
    pub root_offline: bool,
    /// Operator CA certificate, DER (`None` in a bundle without one).
    pub operator_ca_der: Option<Vec<u8>>,
}

impl PublicBundle {
    /// The public half of `keys`.
    pub fn of(keys: &KeySet) -> PublicBundle {
        PublicBundle {
            trust_domain: keys.trust_domain.clone(),
            root_ca_der: keys.root_ca.cert_der().to_vec(),
            node_ca_der: keys.node_ca.cert_der().to_vec(),
            serving_ca_der: keys.serving_ca.cert_der().to_vec(),
            command_signing_root_der: keys.command_signing_root.cert_der().to_vec(),
            join_signing: keys.join_signing.public_key().clone(),
            join_encryption: keys.join_encryption.public_key().clone(),
            audit_signing: keys.audit_signing.public_key().clone(),
            root_offline: keys.root_ca.is_offline(),
            operator_ca_der: keys.operator_ca.as_ref().map(|ca| ca.cert_der().to_vec()),
        }
    }

    /// SHA-256 over every public field, in the canonical encoding the seal covers.
    pub fn public_sha256(&self) -> [u8; 32] {
        let mut out = Vec::new();
        put_lp(&mut out, PUBLIC_LABEL.as_bytes());
        put_lp(&mut out, BUNDLE_FORMAT.as_bytes());
        out.extend_from_slice(&BUNDLE_VERSION.to_be_bytes());
        put_lp(&mut out, self.trust_domain.as_str().as_bytes());
        for (name, der) in [
            ("rootCa", &self.root_ca_der[..]),
            ("nodeCa", &self.node_ca_der[..]),
            ("servingCa", &self.serving_ca_der[..]),
            ("commandSigningRoot", &self.command_signing_root_der[..]),
            ("joinSigning", self.join_signing.spki_der()),
            ("joinEncryption", self.join_encryption.spki_der()),
            ("auditSigning", self.audit_signing.spki_der()),
        ] {
            put_lp(&mut out, name.as_bytes());
            put_lp(&mut out, der);
        }
        if self.root_offline {
            put_lp(&mut out, b"rootKey");
            put_lp(&mut out, b"offline");
        }
        if let Some(der) = &self.operator_ca_der {
            put_lp(&mut out, b"operatorCa");
            put_lp(&mut out, der);
        }
        sha256(&out)
    }

    /// The pins `pki show` prints (CA pins are of the keys in the certificates).
    pub fn pins(&self) -> Result<KeySetPins, BundleError> {
        let ca_pin = |field: &'static str, der: &[u8]| -> Result<Pin, BundleError> {
            let cert = parse_cert(der).ok_or(BundleError::Malformed {
                field,
                reason: "not an X.509 certificate".into(),
            })?;
            Ok(Pin::of_spki_der(cert.public_key().raw))
        };
        Ok(KeySetPins {
            root_ca: ca_pin("certificates.rootCa", &self.root_ca_der)?,
            node_ca: ca_pin("certificates.nodeCa", &self.node_ca_der)?,
            serving_ca: ca_pin("certificates.servingCa", &self.serving_ca_der)?,
            command_signing_root: ca_pin(
                "certificates.commandSigningRoot",
                &self.command_signing_root_der,
            )?,
            join_signing: self.join_signing.pin(),
            join_encryption: self.join_encryption.pin(),
            audit_signing: self.audit_signing.pin(),
            operator_ca: match &self.operator_ca_der {
                Some(der) => Some(ca_pin("certificates.operatorCa", der)?),
                None => None,
            },
        })
    }
}

/// How the private keys are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protection {
    /// Sealed under the deployment secret.
    Sealed,
    /// Unsealed (`--plaintext`, development only).
    Plaintext,
}

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

fn seal_aad(td: &TrustDomain) -> Vec<u8> {
    let mut aad = Vec::new();
    put_lp(&mut aad, SEAL_LABEL.as_bytes());
    put_lp(&mut aad, td.as_str().as_bytes());
    aad
}

pub(super) fn malformed(field: &'static str, reason: &str) -> BundleError {
    BundleError::Malformed {
        field,
        reason: reason.into(),
    }
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
    Ok(match operator_ca {
        Some(ca) => set.with_operator_ca(ca)?,
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
            let next = next::from_text(&set, keys.next_command_signing_root.as_ref(), true)?;
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
                next::from_text(&set, payload.keys.next_command_signing_root.as_ref(), false)?;
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
