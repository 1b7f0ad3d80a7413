//! The public half of a bundle ([`PublicBundle`]): readable without the secret, and the digest
//! of it that the seal covers.

use super::document::{BUNDLE_FORMAT, BUNDLE_VERSION};
use super::error::BundleError;
use crate::pki::ca::parse_cert;
use crate::pki::encoding::{put_lp, sha256};
use crate::pki::keys::PublicKey;
use crate::pki::keyset::{KeySet, KeySetPins};
use crate::pki::pin::Pin;
use crate::pki::spiffe::TrustDomain;
use crate::pki::ssh_ca::{public_key_blob, public_key_line};

const PUBLIC_LABEL: &str = "bc-pki-bundle-public-v1";

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
    /// The SSH CA's Ed25519 public key (`None` in a bundle without one).
    pub ssh_ca_public_key: Option<[u8; 32]>,
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
            ssh_ca_public_key: keys.ssh_ca.as_ref().and_then(|ca| {
                let key: Option<[u8; 32]> = ca.public_key_bytes().try_into().ok();
                key
            }),
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
        if let Some(key) = &self.ssh_ca_public_key {
            put_lp(&mut out, b"sshCa");
            put_lp(&mut out, &public_key_blob(key));
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
            ssh_ca_public_key: self.ssh_ca_public_key.as_ref().map(|k| public_key_line(k)),
        })
    }
}
