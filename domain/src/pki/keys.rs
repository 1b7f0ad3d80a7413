//! P-256 keys and the one job each of them does.
//!
//! Every private key carries a [`KeyRole`] fixed when it is generated or loaded, and every use
//! checks it: only a CA role can back a [`super::ca::CertificateAuthority`], only
//! [`KeyRole::JoinEncryption`] can open a sealed join token, and a purpose-bound signature
//! ([`super::statement`]) is made only by the role its purpose names. So no key does two jobs,
//! even by mistake in a caller.
//!
//! Keys are ECDSA P-256 (ring's implementation, the fastest sound one available here; RustCrypto
//! `p256` is used only for the static-key ECDH that ring does not offer). Private keys are held as
//! PKCS#8 v1 DER as ring produces it; the bytes are wiped when the key is dropped. Randomness
//! comes only from ring's `SystemRandom`.

use std::fmt;

use ring::rand::SystemRandom;
use ring::signature::{
    EcdsaKeyPair, KeyPair as _, UnparsedPublicKey, ECDSA_P256_SHA256_FIXED,
    ECDSA_P256_SHA256_FIXED_SIGNING,
};

use super::encoding::{b64url, b64url_decode, p256_point_of_spki, p256_spki_from_point};
use super::pin::Pin;

/// Why an outside signer (a node key held by a TPM or `bcd helper`, see `super::signer`) could
/// not sign. Here, beside the keys, so that the CSR and statement builders can carry it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the node key could not sign: {0}")]
pub struct SignerError(pub String);

/// The job a key does. The first seven are the deployment's key set (see
/// [`super::keyset::KeySet`]); the others are keys made outside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum KeyRole {
    /// Self-signed root; signs only the node CA and serving CA certificates.
    RootCa,
    /// Signs agent (node, site, ramdisk) certificates, nothing else.
    NodeCa,
    /// Signs the gateway's serving certificates, nothing else.
    ServingCa,
    /// Signs JoinResponse and trust bundles.
    JoinSigning,
    /// Join tokens are sealed to it (ECDH); it never signs.
    JoinEncryption,
    /// Signs audit checkpoints.
    AuditSigning,
    /// Self-signed root that certifies worker keys for signed intent.
    CommandSigningRoot,
    /// Signs operator certificates (people and automation on the admin API), nothing else.
    /// Certified by the root CA; optional in a key set made before issue 23.
    OperatorCa,
    /// A machine's own node key (agent side), used for CSRs and proofs of possession.
    Node,
    /// A gateway's TLS key, certified by the serving CA.
    Serving,
    /// A control-plane process's worker key, certified by the command-signing root for at
    /// most 24 hours; signs commands only.
    Worker,
    /// A person's or automation's admin API client key, certified by the operator CA
    /// (`pki issue-operator`); it only authenticates TLS handshakes.
    Operator,
    /// The SSH CA (issue 42): an Ed25519 key, not P-256, held by [`super::ssh_ca::SshCa`];
    /// signs OpenSSH certificates and nothing else. Optional in a key set made before.
    SshCa,
}

impl KeyRole {
    /// The seven roles of the deployment's key set, in bundle order.
    pub const KEY_SET: [KeyRole; 7] = [
        KeyRole::RootCa,
        KeyRole::NodeCa,
        KeyRole::ServingCa,
        KeyRole::JoinSigning,
        KeyRole::JoinEncryption,
        KeyRole::AuditSigning,
        KeyRole::CommandSigningRoot,
    ];

    /// A stable lower-case name (used in error messages and the bundle).
    pub fn name(self) -> &'static str {
        match self {
            KeyRole::RootCa => "root-ca",
            KeyRole::NodeCa => "node-ca",
            KeyRole::ServingCa => "serving-ca",
            KeyRole::JoinSigning => "join-signing",
            KeyRole::JoinEncryption => "join-encryption",
            KeyRole::AuditSigning => "audit-signing",
            KeyRole::CommandSigningRoot => "command-signing-root",
            KeyRole::OperatorCa => "operator-ca",
            KeyRole::Node => "node",
            KeyRole::Serving => "serving",
            KeyRole::Worker => "worker",
            KeyRole::Operator => "operator",
            KeyRole::SshCa => "ssh-ca",
        }
    }
}

impl fmt::Display for KeyRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a key was refused or could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The SubjectPublicKeyInfo is not an uncompressed P-256 key in canonical DER.
    #[error(
        "not a P-256 public key (expected an uncompressed point in a 91-byte SubjectPublicKeyInfo)"
    )]
    NotP256,
    /// The point is not on the P-256 curve.
    #[error("the P-256 public key is not a point on the curve")]
    InvalidPoint,
    /// The private key is not a P-256 PKCS#8 document ring accepts.
    #[error("the {role} private key is not a P-256 PKCS#8 key")]
    BadPrivateKey {
        /// Role it was loaded for.
        role: KeyRole,
    },
    /// A key was used for a job its role does not allow.
    #[error("a {actual} key cannot be used as {expected}: no key does two jobs")]
    WrongRole {
        /// Role the use requires.
        expected: KeyRole,
        /// Role of the key given.
        actual: KeyRole,
    },
    /// The system random generator failed.
    #[error("the system random generator failed")]
    Random,
}

/// A validated P-256 public key, held as its SubjectPublicKeyInfo DER.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct PublicKey {
    spki_der: Vec<u8>,
}

/// Pins of public keys. They live here, beside the key, so that `pin` (which knows only SPKI
/// bytes) and `keys` do not import each other.
impl Pin {
    /// The pin of a public key.
    pub fn of(key: &PublicKey) -> Pin {
        Pin::of_spki_der(key.spki_der())
    }

    /// Whether this pin names `key`.
    pub fn matches(&self, key: &PublicKey) -> bool {
        *self == Pin::of(key)
    }
}

impl PublicKey {
    /// Parses a SubjectPublicKeyInfo DER; only an uncompressed P-256 point on the curve passes.
    pub fn from_spki_der(spki_der: &[u8]) -> Result<PublicKey, KeyError> {
        let point = p256_point_of_spki(spki_der).ok_or(KeyError::NotP256)?;
        p256::PublicKey::from_sec1_bytes(point).map_err(|_| KeyError::InvalidPoint)?;
        Ok(PublicKey {
            spki_der: spki_der.to_vec(),
        })
    }

    /// Builds the key from an uncompressed point (`04 || X || Y`).
    pub fn from_uncompressed_point(point: &[u8]) -> Result<PublicKey, KeyError> {
        PublicKey::from_spki_der(&p256_spki_from_point(point))
    }

    /// SubjectPublicKeyInfo DER (91 bytes).
    pub fn spki_der(&self) -> &[u8] {
        &self.spki_der
    }

    /// The uncompressed point (65 bytes).
    pub fn uncompressed_point(&self) -> &[u8] {
        // Checked in the constructor.
        p256_point_of_spki(&self.spki_der).unwrap_or_default()
    }

    /// `sha256/<base64>` pin of this key.
    pub fn pin(&self) -> Pin {
        Pin::of(self)
    }

    /// Verifies an ES256 (fixed `r || s`) signature over `message`.
    pub fn verify_es256(&self, message: &[u8], signature: &Signature) -> bool {
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, self.uncompressed_point())
            .verify(message, signature.as_bytes())
            .is_ok()
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({})", self.pin())
    }
}

/// An ES256 signature: `r || s`, 32 bytes each (the JWS form, not DER).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Signature([u8; 64]);

impl Signature {
    /// From the 64 raw bytes.
    pub fn from_bytes(bytes: &[u8]) -> Option<Signature> {
        bytes.try_into().ok().map(Signature)
    }

    /// The 64 raw bytes.
    pub fn as_bytes(&self) -> &[u8; 64] {
        &self.0
    }

    /// Unpadded base64url, as the wire's JSON evidence carries it.
    pub fn to_base64url(&self) -> String {
        b64url(&self.0)
    }

    /// Parses unpadded base64url of exactly 64 bytes.
    pub fn from_base64url(text: &str) -> Option<Signature> {
        Signature::from_bytes(&b64url_decode(text)?)
    }
}

impl fmt::Debug for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Signature({})", self.to_base64url())
    }
}

/// A P-256 private key bound to its [`KeyRole`].
pub struct PrivateKey {
    role: KeyRole,
    pkcs8: Vec<u8>,
    signer: EcdsaKeyPair,
    public: PublicKey,
}

impl PrivateKey {
    /// Generates a fresh key for `role` from the system random generator.
    pub fn generate(role: KeyRole) -> Result<PrivateKey, KeyError> {
        let rng = SystemRandom::new();
        let doc = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .map_err(|_| KeyError::Random)?;
        PrivateKey::from_pkcs8_der(role, doc.as_ref())
    }

    /// Loads a P-256 PKCS#8 DER key for `role` (ring checks the public half matches).
    pub fn from_pkcs8_der(role: KeyRole, pkcs8: &[u8]) -> Result<PrivateKey, KeyError> {
        let rng = SystemRandom::new();
        let signer = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8, &rng)
            .map_err(|_| KeyError::BadPrivateKey { role })?;
        let public = PublicKey::from_uncompressed_point(signer.public_key().as_ref())
            .map_err(|_| KeyError::BadPrivateKey { role })?;
        Ok(PrivateKey {
            role,
            pkcs8: pkcs8.to_vec(),
            signer,
            public,
        })
    }

    /// The job this key does.
    pub fn role(&self) -> KeyRole {
        self.role
    }

    /// Refuses unless this key's role is `expected`.
    pub fn require_role(&self, expected: KeyRole) -> Result<(), KeyError> {
        if self.role == expected {
            Ok(())
        } else {
            Err(KeyError::WrongRole {
                expected,
                actual: self.role,
            })
        }
    }

    /// The public half.
    pub fn public_key(&self) -> &PublicKey {
        &self.public
    }

    /// The PKCS#8 DER. It is secret: it goes only into a sealed bundle or a 0600 key file.
    pub fn pkcs8_der(&self) -> &[u8] {
        &self.pkcs8
    }

    /// Signs raw bytes with ES256. Crate-internal: callers sign through
    /// [`super::statement`], which names the purpose and checks the role.
    pub(crate) fn sign_raw(&self, message: &[u8]) -> Result<Signature, KeyError> {
        let rng = SystemRandom::new();
        let sig = self
            .signer
            .sign(&rng, message)
            .map_err(|_| KeyError::Random)?;
        Signature::from_bytes(sig.as_ref()).ok_or(KeyError::Random)
    }

    /// An rcgen key pair for building certificates (CA roles only; checked by the caller).
    pub(crate) fn rcgen_key_pair(&self) -> Result<rcgen::KeyPair, KeyError> {
        let bad = || KeyError::BadPrivateKey { role: self.role };
        let kp = rcgen::KeyPair::try_from(self.pkcs8.as_slice()).map_err(|_| bad())?;
        if kp.algorithm() != &rcgen::PKCS_ECDSA_P256_SHA256 {
            return Err(bad());
        }
        Ok(kp)
    }

    /// The RustCrypto secret scalar, for static ECDH (join encryption only; checked by caller).
    pub(crate) fn p256_secret(&self) -> Result<p256::SecretKey, KeyError> {
        use p256::pkcs8::DecodePrivateKey as _;
        p256::SecretKey::from_pkcs8_der(&self.pkcs8)
            .map_err(|_| KeyError::BadPrivateKey { role: self.role })
    }
}

impl Drop for PrivateKey {
    fn drop(&mut self) {
        for byte in self.pkcs8.iter_mut() {
            // black_box keeps the wipe from being optimised away (no `unsafe` volatile writes).
            *byte = std::hint::black_box(0);
        }
    }
}

impl fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "PrivateKey({}, {}, <secret>)",
            self.role,
            self.public.pin()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_key_has_p256_spki_and_signs() {
        let key = PrivateKey::generate(KeyRole::Node).unwrap();
        assert_eq!(key.public_key().spki_der().len(), 91);
        let sig = key.sign_raw(b"hello").unwrap();
        assert!(key.public_key().verify_es256(b"hello", &sig));
        assert!(!key.public_key().verify_es256(b"hellO", &sig));
        let again = PrivateKey::from_pkcs8_der(KeyRole::Node, key.pkcs8_der()).unwrap();
        assert_eq!(again.public_key(), key.public_key());
    }

    #[test]
    fn role_is_checked() {
        let key = PrivateKey::generate(KeyRole::JoinEncryption).unwrap();
        assert_eq!(
            key.require_role(KeyRole::JoinSigning),
            Err(KeyError::WrongRole {
                expected: KeyRole::JoinSigning,
                actual: KeyRole::JoinEncryption
            })
        );
    }

    #[test]
    fn off_curve_point_refused() {
        let mut point = [0u8; 65];
        point[0] = 4;
        point[64] = 1;
        assert_eq!(
            PublicKey::from_uncompressed_point(&point),
            Err(KeyError::InvalidPoint)
        );
        assert_eq!(
            PublicKey::from_spki_der(&[0x30, 0x00]),
            Err(KeyError::NotP256)
        );
    }
}
