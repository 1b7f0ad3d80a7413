//! The SSH CA (issue 42): the deployment's Ed25519 key that signs OpenSSH certificates, and
//! nothing else.
//!
//! It is a key of its own in the key set ([`super::keyset::KeySet::ssh_ca`]): `pki init` makes
//! it, `pki add-ssh-ca` adds it to a bundle made before, and the bundle seals its PKCS#8 with
//! the other private keys ([`super::bundle`]). No other key signs SSH certificates (the SSH
//! certificate code takes an [`SshCa`], never a [`super::keys::PrivateKey`]), and it signs
//! nothing else: [`SshCa::sign_certificate`] refuses any input that is not the body of an
//! OpenSSH certificate (its first string names a `…-cert-v01@openssh.com` type). Ed25519
//! signatures are deterministic, so signing draws no randomness.

use std::fmt;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use ring::rand::SystemRandom;
use ring::signature::{Ed25519KeyPair, KeyPair as _};

use super::keys::{KeyError, KeyRole};
use crate::ssh::wire::{put_string, Reader};

/// The key type name of the CA's key (the `@cert-authority` line and the certificate's
/// signature key).
pub const SSH_CA_KEY_TYPE: &str = "ssh-ed25519";

/// Why the SSH CA would not sign.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the SSH CA signs only OpenSSH certificates (a body whose type is …-cert-v01@openssh.com)")]
pub struct NotACertificate;

/// The SSH CA: an Ed25519 key pair.
pub struct SshCa {
    pkcs8: Vec<u8>,
    pair: Ed25519KeyPair,
}

impl SshCa {
    /// A fresh key from the system random generator (`pki init`, `pki add-ssh-ca`).
    pub fn generate() -> Result<SshCa, KeyError> {
        let doc =
            Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).map_err(|_| KeyError::Random)?;
        SshCa::from_pkcs8_der(doc.as_ref())
    }

    /// Loads the PKCS#8 (v2, with the public key, as ring writes it) the bundle holds.
    pub fn from_pkcs8_der(pkcs8: &[u8]) -> Result<SshCa, KeyError> {
        let pair = Ed25519KeyPair::from_pkcs8(pkcs8).map_err(|_| KeyError::BadPrivateKey {
            role: KeyRole::SshCa,
        })?;
        Ok(SshCa {
            pkcs8: pkcs8.to_vec(),
            pair,
        })
    }

    /// The PKCS#8 DER. Secret: it goes only into the bundle.
    pub fn pkcs8_der(&self) -> &[u8] {
        &self.pkcs8
    }

    /// The public key's 32 bytes.
    pub fn public_key_bytes(&self) -> &[u8] {
        self.pair.public_key().as_ref()
    }

    /// The public key's wire blob (`string "ssh-ed25519" || string key`).
    pub fn public_key_blob(&self) -> Vec<u8> {
        public_key_blob(self.public_key_bytes())
    }

    /// The public key as an OpenSSH line, `ssh-ed25519 <base64>` (no comment).
    pub fn public_key_line(&self) -> String {
        public_key_line(self.public_key_bytes())
    }

    /// Signs the body of an OpenSSH certificate (everything before its signature field),
    /// answering the signature field's contents (`string "ssh-ed25519" || string sig`).
    /// Refuses anything else (see the module docs).
    pub fn sign_certificate(&self, body: &[u8]) -> Result<Vec<u8>, NotACertificate> {
        let cert_type = Reader::new(body).string().ok_or(NotACertificate)?;
        let is_cert = std::str::from_utf8(cert_type)
            .is_ok_and(|t| t.ends_with("-cert-v01@openssh.com") && !t.contains(' '));
        if !is_cert {
            return Err(NotACertificate);
        }
        let sig = self.pair.sign(body);
        let mut out = Vec::new();
        put_string(&mut out, SSH_CA_KEY_TYPE.as_bytes());
        put_string(&mut out, sig.as_ref());
        Ok(out)
    }
}

/// The wire blob of an Ed25519 public key.
pub fn public_key_blob(key: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    put_string(&mut out, SSH_CA_KEY_TYPE.as_bytes());
    put_string(&mut out, key);
    out
}

/// `ssh-ed25519 <base64 blob>`.
pub fn public_key_line(key: &[u8]) -> String {
    format!(
        "{SSH_CA_KEY_TYPE} {}",
        STANDARD.encode(public_key_blob(key))
    )
}

/// Reads the CA's public key back from its OpenSSH line (`ssh-ed25519 <base64> [comment]`),
/// answering its 32 bytes; `None` for anything else (another type, a second line).
pub fn parse_public_key_line(text: &str) -> Option<[u8; 32]> {
    let text = text.trim();
    if text.contains('\n') {
        return None;
    }
    let mut fields = text.split_whitespace();
    if fields.next()? != SSH_CA_KEY_TYPE {
        return None;
    }
    let blob = STANDARD.decode(fields.next()?).ok()?;
    let mut r = Reader::new(&blob);
    if r.string()? != SSH_CA_KEY_TYPE.as_bytes() {
        return None;
    }
    let key: [u8; 32] = r.string()?.try_into().ok()?;
    r.is_empty().then_some(key)
}

impl Drop for SshCa {
    fn drop(&mut self) {
        for byte in self.pkcs8.iter_mut() {
            *byte = std::hint::black_box(0);
        }
    }
}

impl fmt::Debug for SshCa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SshCa({}, <secret>)", self.public_key_line())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signs_certificate_bodies_only() {
        let ca = SshCa::generate().unwrap();
        let mut body = Vec::new();
        put_string(&mut body, b"ssh-ed25519-cert-v01@openssh.com");
        assert!(ca.sign_certificate(&body).is_ok());
        let mut other = Vec::new();
        put_string(&mut other, b"bc-statement");
        assert_eq!(ca.sign_certificate(&other), Err(NotACertificate));
        assert_eq!(ca.sign_certificate(b"x"), Err(NotACertificate));
    }

    #[test]
    fn public_line_reads_back() {
        let ca = SshCa::generate().unwrap();
        let again = SshCa::from_pkcs8_der(ca.pkcs8_der()).unwrap();
        assert_eq!(again.public_key_line(), ca.public_key_line());
        let key = parse_public_key_line(&format!("{} comment", ca.public_key_line())).unwrap();
        assert_eq!(&key[..], ca.public_key_bytes());
    }
}
